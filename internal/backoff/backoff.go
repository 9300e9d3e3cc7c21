// Package backoff owns the one rule by which backstream waits before trying
// again: capped exponential growth with jitter. Every retry and reconnect
// takes its waits from here — a backfill job's in-job retries, the listRepos
// paging of bootstrap and discovery, the durable schedule of failed repos
// (package retry), the firehose consumer's and `backstream tail`'s
// reconnects — each with its own base and cap.
//
// # The rule
//
// Attempt k (0-based) has the nominal delay d = min(Max, Base·2^k). The
// wait is drawn uniformly from ±25 % of d, cut at Max:
//
//	wait = lo + u·(hi − lo), lo = 0.75·d, hi = min(1.25·d, Max), u uniform in [0, 1]
//
// So below the cap the nominal schedule is the mean wait (a configured
// interval means what it says), Max is a hard ceiling, and callers that
// failed together come back spread over half of d instead of in lockstep —
// at the cap too, where the waits spread over [0.75·Max, Max] rather than
// piling up on Max.
//
// # What it provides
//
//   - Policy.Delay(attempt, u): the pure form, for schedules that keep
//     their own attempt count (a job's retry budgets, the durable failure
//     count of a repo). Policy.Draw takes u from a random source.
//   - Loop: the stateful form for reconnect loops: Next is the following
//     attempt's wait, Reset starts over after a connection made progress.
//   - Sleep: the real clock's wait, cut short by ctx. Callers that sleep
//     take it as an injected func(ctx, d) error, so tests can record the
//     waits and return at once, or run it inside a testing/synctest bubble.
//
// The random source is a func() float64 drawing from [0, 1); nil means
// math/rand/v2. Tests inject a constant or a script.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// spread is the jitter's half-width as a fraction of the nominal delay.
const spread = 0.25

// Policy is a capped exponential schedule. Base ≤ 0 means no wait; a Max
// below Base is taken as Base.
type Policy struct {
	Base time.Duration // nominal delay of attempt 0
	Max  time.Duration // ceiling of every delay
}

func (p Policy) ceiling() time.Duration { return max(p.Max, p.Base) }

// Nominal is attempt's delay before jitter: min(Max, Base·2^attempt). A
// negative attempt counts as 0; huge attempts stay at Max without overflow.
func (p Policy) Nominal(attempt int) time.Duration {
	if p.Base <= 0 {
		return 0
	}
	top := p.ceiling()
	d := p.Base
	for i := 0; i < attempt && d < top; i++ {
		if d > top/2 {
			return top
		}
		d *= 2
	}
	return d
}

// Delay is the wait before attempt (0-based) for the draw u in [0, 1]: the
// point u of the way from 0.75·d to min(1.25·d, Max), d = Nominal(attempt).
// u outside [0, 1] (or NaN) is clamped into it. Pure: the same inputs give
// the same wait.
func (p Policy) Delay(attempt int, u float64) time.Duration {
	switch {
	case !(u >= 0): // also NaN
		u = 0
	case u > 1:
		u = 1
	}
	top := p.ceiling()
	d := float64(p.Nominal(attempt))
	lo, hi := d*(1-spread), min(d*(1+spread), float64(top))
	w := lo + u*(hi-lo)
	if w >= float64(top) {
		return top
	}
	return time.Duration(w)
}

// Draw is Delay with u drawn from rnd (nil: math/rand/v2).
func (p Policy) Draw(attempt int, rnd func() float64) time.Duration {
	if rnd == nil {
		rnd = rand.Float64
	}
	return p.Delay(attempt, rnd())
}

// Loop walks a Policy for a reconnect loop. The zero attempt count starts
// at Base. Not safe for concurrent use.
type Loop struct {
	Policy
	// Rand draws the jitter from [0, 1); nil uses math/rand/v2.
	Rand    func() float64
	attempt int
}

// Next returns the wait before the next attempt and counts it.
func (l *Loop) Next() time.Duration {
	d := l.Draw(l.attempt, l.Rand)
	l.attempt++
	return d
}

// Reset starts the schedule over at Base (after an attempt that made
// progress).
func (l *Loop) Reset() { l.attempt = 0 }

// Sleep waits d on the real clock (a fake one inside a testing/synctest
// bubble). It returns ctx's error, at once, when ctx ends first or when d ≤
// 0 and ctx has already ended; nil otherwise.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
