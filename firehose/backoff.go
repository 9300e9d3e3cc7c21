package firehose

// backoff.go owns the reconnect delay: the project's capped exponential
// (package internal/backoff) from BackoffMin to BackoffMax.

import (
	"time"

	"github.com/backstream/backstream/internal/backoff"
)

// Default reconnect delays.
const (
	DefaultBackoffMin = 250 * time.Millisecond
	DefaultBackoffMax = 30 * time.Second
)

// reconnects is the reconnect schedule of one Run: reconnect k waits
// BackoffMin·2^k capped at BackoffMax, jittered within ±25 % (never above
// the cap) so a fleet of consumers does not reconnect in lockstep. Run
// resets it after a session that accepted a frame.
func (c *Consumer) reconnects() *backoff.Loop {
	return &backoff.Loop{Policy: backoff.Policy{Base: c.cfg.BackoffMin, Max: c.cfg.BackoffMax}}
}
