package main

// gaps.go owns serve's part of healing gaps: the flags (--max-stale,
// --gap-threshold, --repair-period, --audit-interval), the probe's lagging
// check, and the "gaps" section of the status report.

import (
	"fmt"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/repair"
)

// healOptions are serve's flags about gaps.
type healOptions struct {
	maxStale      time.Duration
	gapThreshold  int64
	repairPeriod  time.Duration
	auditInterval time.Duration
	maxAbsent     int
}

func healFlags(fs *flagSet) {
	fs.Duration("max-stale", node.DefaultMaxStale, "/readyz answers 503 while the archive is more than this behind the relay (the last event applied is older, or the relay refuses every cursor) or a gap in it is open")
	fs.Int("gap-threshold", firehose.DefaultGapThreshold, "relay seqs skipped between two frames beyond which the skip is recorded as a gap (and repaired), not only counted; also the window of accepted seqs within which a frame below the last is told a duplicate from a late or new one")
	fs.Duration("repair-period", repair.DefaultPeriod, "pause between two looks of the repair runner at the open gaps (and at whether a pass's replacements have finished)")
	fs.Duration("audit-interval", repair.DefaultAuditInterval, "record a scheduled audit this long after the last gap: its pass compares every account's listed rev with the archive (0 = off)")
	fs.Int("repair-max-absent", repair.DefaultMaxAbsent, "a repair pass asks the status of each account no listing named whose records the archive keeps (active, deactivated or suspended: a deletion lost in a gap), at most this many a pass (more absent: the next ones in DID order each pass)")
}

func healOptionsFrom(fs *flagSet) (healOptions, error) {
	o := healOptions{maxStale: fs.get("max-stale").(time.Duration), gapThreshold: int64(fs.get("gap-threshold").(int)),
		repairPeriod: fs.get("repair-period").(time.Duration), auditInterval: fs.get("audit-interval").(time.Duration),
		maxAbsent: fs.get("repair-max-absent").(int)}
	switch {
	case o.repairPeriod <= 0:
		return o, fmt.Errorf("--repair-period %s: must be positive", o.repairPeriod)
	case o.auditInterval < 0:
		return o, fmt.Errorf("--audit-interval %s: must not be negative (0 = off)", o.auditInterval)
	case o.maxStale <= 0:
		return o, fmt.Errorf("--max-stale %s: must be positive", o.maxStale)
	case o.gapThreshold <= 0:
		return o, fmt.Errorf("--gap-threshold %d: must be positive", o.gapThreshold)
	case o.maxAbsent <= 0:
		return o, fmt.Errorf("--repair-max-absent %d: must be positive", o.maxAbsent)
	}
	return o, nil
}

func (o healOptions) apply(c *node.Config) {
	c.MaxStale, c.GapThreshold = o.maxStale, o.gapThreshold
	c.RepairPeriod, c.AuditInterval, c.RepairMaxAbsent = o.repairPeriod, o.auditInterval, o.maxAbsent
}

// lagging is /readyz's staleness check: the node's, once there is one.
func (s *server) lagging() error {
	s.mu.Lock()
	n := s.node
	s.mu.Unlock()
	if n == nil {
		return nil
	}
	return n.Lagging()
}

// statusGaps is the report's "gaps" section: the gaps recorded in the
// store, the open ones listed, and (serve only) why /readyz says lagging.
type statusGaps struct {
	Open    int            `json:"open"`
	Closed  int            `json:"closed"` // the closed gaps the store keeps: the newest 100
	List    []statusGap    `json:"open_gaps"`
	Lagging string         `json:"lagging,omitempty"`
	Repair  *repair.Status `json:"repair,omitempty"` // the pass in progress (serve only)
}

type statusGap struct {
	ID        uint64    `json:"id"`
	Kind      string    `json:"kind"`
	FromSeq   uint64    `json:"from_seq"`
	ToSeq     uint64    `json:"to_seq"`
	FirstSeen time.Time `json:"first_seen"`
	// Audit is its repair pass's durable position (absent: not started).
	Audit *statusAudit `json:"audit,omitempty"`
}

type statusAudit struct {
	Phase  string `json:"phase"`
	Listed uint64 `json:"listed"`
	Marked uint64 `json:"marked"`
}

// gapsStatus reads the gaps section, fail-closed.
func gapsStatus(s *archive.Store) (*statusGaps, error) {
	gs, err := s.Gaps()
	if err != nil {
		return nil, err
	}
	r := &statusGaps{List: []statusGap{}}
	for _, g := range gs {
		if !g.Open() {
			r.Closed++
			continue
		}
		r.Open++
		sg := statusGap{ID: g.ID, Kind: g.Kind.String(), FromSeq: g.FromSeq, ToSeq: g.ToSeq,
			FirstSeen: time.UnixMicro(g.FirstSeenUS).UTC()}
		a, err := s.Audit(g.ID)
		switch {
		case err == nil:
			sg.Audit = &statusAudit{Phase: a.Phase.String(), Listed: a.Listed, Marked: a.Marked}
		case absentOK(err) != nil:
			return nil, err
		}
		r.List = append(r.List, sg)
	}
	return r, nil
}

// fromNode adds what only a running node knows: why /readyz says lagging,
// and the repair pass in progress.
func (r *statusGaps) fromNode(n *node.Node) {
	if err := n.Lagging(); err != nil {
		r.Lagging = err.Error()
	}
	if rr := n.Repairer(); rr != nil {
		st := rr.Status()
		r.Repair = &st
	}
}
