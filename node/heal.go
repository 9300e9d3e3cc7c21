package node

// heal.go owns what the node knows of gaps in the archive: how far behind
// the relay it is (the live consumer's Behind against MaxStale), which gaps
// are open, and what /readyz and the metrics say about both.

import (
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/repair"
)

// DefaultMaxStale is how far behind the relay the archive may be while
// /readyz answers 200: the upstream time of the last event applied (or
// the live consumer's start, before any) at most this long ago.
const DefaultMaxStale = 5 * time.Minute

// Lagging says why the archive is not the relay's truth as of MaxStale ago,
// nil when it is: the live consumer is more than MaxStale behind (a relay
// refusing every cursor, a connection that never delivers, a catch-up), or
// a gap is open (its repair pass has not finished). /readyz answers 503
// with it; /subscribe still serves.
func (n *Node) Lagging() error {
	if c := n.live.Load(); c != nil {
		if b := c.Behind(); b > n.cfg.MaxStale {
			return fmt.Errorf("the archive is %s behind the relay (max stale %s)", b.Round(time.Second), n.cfg.MaxStale)
		}
	}
	gs, err := n.store.Gaps()
	if err != nil {
		return fmt.Errorf("reading gaps: %w", err)
	}
	for _, g := range gs {
		if g.Open() {
			return fmt.Errorf("gap %d (%s after relay seq %d) found at %s is open: its repair pass has not finished",
				g.ID, g.Kind, g.FromSeq, time.UnixMicro(g.FirstSeenUS).UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// registerHealMetrics registers the gauges of lagging and open gaps.
func (n *Node) registerHealMetrics(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "backstream_firehose_behind_seconds",
		Help: "How far behind the relay the archive is: now less the upstream time of the last event applied (0 outside steady state).",
	}, func() float64 {
		if c := n.live.Load(); c != nil {
			return c.Behind().Seconds()
		}
		return 0
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "backstream_gaps_open",
		Help: "Gaps in the archive (gap/ rows) whose repair pass has not finished; -1 when they cannot be read.",
	}, func() float64 {
		gs, err := n.store.Gaps()
		if err != nil {
			return -1
		}
		open := 0
		for _, g := range gs {
			if g.Open() {
				open++
			}
		}
		return float64(open)
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "backstream_lagging",
		Help: "1 while /readyz answers 503 because the archive is more than --max-stale behind the relay or a gap is open.",
	}, func() float64 {
		if n.health.Ready() && n.Lagging() != nil {
			return 1
		}
		return 0
	}))
}

func (n *Node) setLive(c *firehose.Consumer) { n.live.Store(c) }

// liveStream is repair's Config.Stream: the live consumer once it runs
// (before, no frame was accepted and nothing is caught up).
type liveStream struct{ n *Node }

func (s liveStream) AcceptedSince(us int64) bool {
	c := s.n.live.Load()
	return c != nil && c.AcceptedSince(us)
}

func (s liveStream) Behind() time.Duration {
	if c := s.n.live.Load(); c != nil {
		return c.Behind()
	}
	return math.MaxInt64
}

// Repairer is the repair runner (its Status for /status).
func (n *Node) Repairer() *repair.Runner { return n.repairer }
