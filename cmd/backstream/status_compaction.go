package main

// This file owns the compaction section of the status report: the
// watermark and its lag read from the store (`backstream status`), or the
// running node's compaction owner's view (/status), which adds the last
// pass and whether compaction is halted.

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/human"
	"github.com/backstream/backstream/node"
)

// statusCompaction is the report's "compaction" object.
type statusCompaction = node.CompactionStatus

// readCompaction reads the section from a store: the watermark, its lag
// behind the tip, an interrupted pass's intent, and an unfinished index
// or replay index backfill. A malformed compaction
// state is shown as halted, with the error, not as a failed report; its
// lag is counted from watermark 0, as serve's /status counts it and where
// the pass after the reset starts.
func readCompaction(s *archive.Store) (*statusCompaction, error) {
	c := &statusCompaction{}
	switch st, err := s.Compaction(); {
	case errors.Is(err, archive.ErrCompactionState):
		halt(c, s, err)
	case err != nil:
		return nil, err
	default:
		c.Watermark = st.Watermark
		if st.Intent != nil {
			w := st.Intent.W
			c.Intent = &w
		}
	}
	var err error
	if c.LagSeqs, c.LagSeconds, err = node.CompactionLag(s, c.Watermark); err != nil {
		return nil, err
	}
	switch m, err := s.IndexMarker(); {
	case errors.Is(err, archive.ErrCompactionState):
		halt(c, s, err)
	case err != nil:
		return nil, err
	case !m.Done():
		c.Index = &node.IndexBackfillStatus{Next: m.Next, End: m.End}
	}
	switch m, err := s.ReplayIndexMarker(); {
	case errors.Is(err, archive.ErrCompactionState):
		halt(c, s, err)
	case err != nil:
		return nil, err
	case !m.Done():
		c.ReplayIndex = &node.IndexBackfillStatus{Next: m.Next, End: m.End}
	}
	return c, nil
}

// halt marks c halted by err, a malformed compaction state of s, with what
// repairs it; the first one found stays, as serve's compaction owner keeps
// the first.
func halt(c *statusCompaction, s *archive.Store, err error) {
	if c.Halted {
		return
	}
	c.Halted, c.HaltReason, c.HaltRecovery = true, err.Error(), node.HaltRecovery(err, s.DataDir())
}

func printCompaction(tw io.Writer, c *statusCompaction) {
	if c == nil {
		return
	}
	fmt.Fprintf(tw, "compaction watermark\t%s (%s seqs, %s behind the tip)\n", human.Count(c.Watermark), human.Count(c.LagSeqs), human.Duration(time.Duration(c.LagSeconds*float64(time.Second))))
	if c.Intent != nil {
		fmt.Fprintf(tw, "compaction intent\tto %s (an interrupted pass; the next start finishes it)\n", human.Count(*c.Intent))
	}
	if c.Index != nil && !c.Index.Done {
		left, total := backfillSeqs(c.Index)
		fmt.Fprintf(tw, "index backfill\t%s of %s seqs left (no compaction pass until it ends)\n", human.Count(left), human.Count(total))
	}
	if c.ReplayIndex != nil && !c.ReplayIndex.Done {
		left, total := backfillSeqs(c.ReplayIndex)
		fmt.Fprintf(tw, "replay index backfill\t%s of %s seqs left (filtered replays scan until it ends)\n", human.Count(left), human.Count(total))
	}
	if c.LastPassAt != nil {
		fmt.Fprintf(tw, "last compaction pass\t%s: %s rows, %s removed in %s\n",
			c.LastPassAt.UTC().Format("2006-01-02T15:04:05Z"), human.Count(c.LastRows), human.Bytes(c.LastBytes),
			human.Duration(time.Duration(c.LastPassSeconds*float64(time.Second))))
	}
	if c.Halted {
		fmt.Fprintf(tw, "compaction HALTED\t%s\ncompaction recovery\t%s\n", c.HaltReason, c.HaltRecovery)
	}
}

// backfillSeqs counts an index backfill's seqs: those from Next to End
// (one past the last row to index) left, of those from seq 1, the first
// archived, to End.
func backfillSeqs(m *node.IndexBackfillStatus) (left, total uint64) {
	end := max(m.End, 1)
	return end - min(max(m.Next, 1), end), end - 1
}
