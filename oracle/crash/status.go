package crash

// status.go owns the harness's reading of serve's /status JSON and of a data
// dir no process holds.

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstream/backstream/archive"
)

// Status is the part of serve's /status report (the keys of `backstream
// status --json`) the harness reads.
type Status struct {
	Phase               string           `json:"phase"`
	PhaseEnteredAt      *time.Time       `json:"phase_entered_at,omitempty"`
	BackfillStartedAt   *time.Time       `json:"backfill_started_at,omitempty"`
	BackfillCompletedAt *time.Time       `json:"backfill_completed_at,omitempty"`
	Repos               map[string]int64 `json:"repos"`
	Cursors             struct {
		Relay *uint64 `json:"relay"`
		Merge *uint64 `json:"merge"`
	} `json:"cursors"`
	Archive struct {
		TipSeq uint64 `json:"tip_seq"`
	} `json:"archive"`
	Bootstrap *struct {
		State string `json:"state"`
	} `json:"bootstrap,omitempty"`
	Compaction *struct {
		Watermark  uint64 `json:"watermark"`
		Passes     int64  `json:"passes"`
		LastRows   int64  `json:"last_rows_removed"`
		Halted     bool   `json:"halted"`
		HaltReason string `json:"halt_reason"`
		// The backfills of a store archived before the writer kept the
		// compaction index and the replay index (absent when never needed).
		Index       *Backfill `json:"index_backfill,omitempty"`
		ReplayIndex *Backfill `json:"replay_index_backfill,omitempty"`
	} `json:"compaction,omitempty"`
}

// Backfill is an index backfill's progress in /status: the rows from Next
// up to End were not indexed yet.
type Backfill struct {
	Next uint64 `json:"next_seq"`
	End  uint64 `json:"end_seq"`
	Done bool   `json:"done"`
}

// Watermark is compaction.watermark (0 when absent).
func (s Status) Watermark() uint64 {
	if s.Compaction == nil {
		return 0
	}
	return s.Compaction.Watermark
}

// RelayCursor is cursors.relay (0 when absent).
func (s Status) RelayCursor() uint64 {
	if s.Cursors.Relay == nil {
		return 0
	}
	return *s.Cursors.Relay
}

// Phase names as /status and the store spell them.
const (
	PhaseBootstrap = string(archive.PhaseBootstrap)
	PhaseMerging   = string(archive.PhaseMerging)
	PhaseSteady    = string(archive.PhaseSteadyState)
)

// OpenStore opens the store of a data dir read-only; no process may hold it.
// The caller closes it.
func OpenStore(dataDir string) (*archive.Store, error) {
	s, err := archive.Open(dataDir, archive.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("crash: open store %s: %w", dataDir, err)
	}
	return s, nil
}

// Summary is what a data dir no process holds says after a kill.
type Summary struct {
	Phase                               string
	Complete, Pending, Failed, NotStart int64
	Tip                                 uint64
}

func (s Summary) String() string {
	return fmt.Sprintf("phase %s, %d complete, %d pending, %d failed, %d not_started, archive tip %d",
		s.Phase, s.Complete, s.Pending, s.Failed, s.NotStart, s.Tip)
}

// Summarize reads a Summary from a store.
func Summarize(s *archive.Store) (Summary, error) {
	var out Summary
	phase, err := s.Phase()
	if err != nil {
		return out, fmt.Errorf("crash: summary: %w", err)
	}
	out.Phase = string(phase)
	counts, err := s.Counts()
	if err != nil && !errors.Is(err, archive.ErrNotFound) {
		return out, fmt.Errorf("crash: summary: %w", err)
	}
	out.Complete, out.Pending = counts.Get(archive.StatusComplete), counts.Get(archive.StatusPending)
	out.Failed, out.NotStart = counts.Get(archive.StatusFailed), counts.Get(archive.StatusNotStarted)
	if out.Tip, err = s.Tip(); err != nil {
		return out, fmt.Errorf("crash: summary: %w", err)
	}
	return out, nil
}
