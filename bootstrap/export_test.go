package bootstrap

// LaneRunnersPerWorker is laneRunnersPerWorker, for the lane bound's test.
const LaneRunnersPerWorker = laneRunnersPerWorker

// HostRetryBase and HostRetryMax are a host's retry backoff, for the test
// of how long a host down for good holds bootstrap's end.
const HostRetryBase, HostRetryMax = hostRetryBase, hostRetryMax

// GaveUpLine and LoopLine are the lines of a host given up on and of a
// listing whose cursor repeats, for the test that counts them.
const GaveUpLine, LoopLine = gaveUpLine, loopLine
