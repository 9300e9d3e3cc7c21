package retry

// backoff.go owns the steady-state retry schedule: exponential from
// Interval to MaxDelay with the project's one jitter rule (package
// internal/backoff). The same schedule is handed to the backfill jobs
// (backfill.Options.NextAttempt) so the next attempt is written in the same
// unit as the failure, and used by the runner for the failures it writes
// itself (a replacement refused too often).

import (
	"time"

	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/backoff"
)

// Defaults of the schedule (--retry-interval, --retry-max-delay).
const (
	DefaultInterval = time.Minute
	DefaultMaxDelay = 24 * time.Hour
)

// Backoff is the durable per-repo retry schedule. Failure n (1-based) is
// retried after d = min(MaxDelay, Interval·2^(n-1)), jittered uniformly
// within ±25% of d and never above MaxDelay (backoff.Policy.Delay of
// attempt n-1), so repos that failed together do not come back together.
type Backoff struct {
	Interval time.Duration
	MaxDelay time.Duration
	// Rand draws the jitter in [0,1); nil uses math/rand/v2.
	Rand func() float64
}

// Delay is the wait before the next attempt after the failures-th
// consecutive failure (failures ≥ 1; 0 is treated as 1).
func (b Backoff) Delay(failures uint32) time.Duration {
	p := backoff.Policy{Base: b.Interval, Max: b.MaxDelay}
	if p.Base <= 0 {
		p.Base = DefaultInterval
	}
	if p.Max <= 0 {
		p.Max = DefaultMaxDelay
	}
	return p.Draw(int(max(failures, 1))-1, b.Rand)
}

// NextAttempt is Delay in the shape backfill.Options.NextAttempt takes:
// wire it into the job runner the retry runner uses, so a failed job's
// next attempt follows this schedule and is written with the failure.
func (b Backoff) NextAttempt() func(failures uint32) time.Duration { return b.Delay }

// JobOptions returns o set up for the runner's jobs: a failure's next
// attempt follows b and is written with the failure, and a 429 ends the job
// at once (no in-job 429 budget) so the runner parks the host instead of a
// worker sleeping on it. Build the retry runner's backfill.Runner from it,
// with the same Interval and MaxDelay as the runner's Config.
func (b Backoff) JobOptions(o backfill.Options) backfill.Options {
	o.NextAttempt = b.NextAttempt()
	o.RateLimitRetries = -1
	return o
}
