package bootstrap

// LaneRunnersPerWorker is laneRunnersPerWorker, for the lane bound's test.
const LaneRunnersPerWorker = laneRunnersPerWorker
