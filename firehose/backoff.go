package firehose

// backoff.go owns the reconnect delay: capped exponential with equal jitter.

import (
	"math/rand/v2"
	"time"
)

// Default reconnect delays.
const (
	DefaultBackoffMin = 250 * time.Millisecond
	DefaultBackoffMax = 30 * time.Second
)

// backoff doubles from min up to max; each delay is drawn uniformly from
// [d/2, d] so a fleet of consumers does not reconnect in lockstep.
type backoff struct {
	min, max time.Duration
	cur      time.Duration // 0: the next delay is min
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(b.cur*2, b.max)
	}
	half := b.cur / 2
	return half + time.Duration(rand.Int64N(int64(b.cur-half)+1))
}

// reset starts over at min (after a connection that made progress).
func (b *backoff) reset() { b.cur = 0 }
