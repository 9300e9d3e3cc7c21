package firehose

// gap.go owns what the consumer does when the relay cannot resume exactly:
// it remembers the gap it saw (OutdatedCursor, FutureCursor, seqs that stay
// below the last accepted one, a seq skip above the threshold) and records
// it as a gap/ row in the unit of the next frame it accepts, the unit that
// moves cursor/relay past it. A hole found while the newest gap recorded
// has no repair pass begun (nor has waited long for the stream, the repair
// runner says which: archive.GapIDs.Begin) extends that gap
// (archive.GapIDs.Record). A relay that restarted its sequence also resets
// cursor/relay to the new sequence in that unit. Until that unit is
// submitted nothing moved: a crash re-dials from the old cursor and the
// relay tells the same story again.

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstream/backstream/archive"
)

// DefaultGapThreshold is the largest seq skip between consecutive frames
// counted only as an anomaly; a larger one is recorded as a gap. Relays
// skip seqs of events they did not emit; thousands in a row is an outage.
const DefaultGapThreshold = 1000

// pendingGap is a gap seen whose resume point is not durable yet.
type pendingGap struct {
	gap      archive.Gap
	reset    bool // the relay restarted its sequence: cursor/relay goes back
	recorded bool // its row is durable already (without ToSeq)
}

// noteGap remembers a gap of kind found now after the last accepted seq; an
// earlier one still pending wins (one outage, one row).
func (c *Consumer) noteGap(kind archive.GapKind, reset bool) {
	if c.pending != nil {
		c.pending.reset = c.pending.reset || reset
		return
	}
	c.pending = &pendingGap{reset: reset, gap: archive.Gap{Kind: kind, FromSeq: uint64(c.last), FirstSeenUS: c.cfg.Now().UnixMicro()}}
	if !c.hasPos {
		c.pending.gap.FromSeq = 0
	}
}

// checkSeq applies the seq rules to a frame about to be processed: it
// reports false for a duplicate, and notes a skip above the threshold as a
// gap. Frames that stay below the last accepted seq (the dialed cursor, or
// a frame this connection brought) for more than the threshold in a row
// come from a relay that restarted its sequence without saying
// FutureCursor, before the connection or during it (a relay merely
// replaying too much, or re-sending a few frames, reaches the cursor
// soon): that is a regression, and the frame goes on as the first of the
// new sequence.
func (c *Consumer) checkSeq(seq int64) bool {
	if !c.hasPos {
		c.below = 0
		return true
	}
	switch {
	case seq <= c.last:
		c.m.anomaly(AnomalyDuplicate)
		if seq == c.last {
			return false
		}
		if c.below++; c.below <= c.cfg.GapThreshold {
			return false
		}
		c.noteGap(archive.GapSeqRegression, true)
	case seq > c.last+1:
		c.m.anomaly(AnomalySeqGap)
		if seq-c.last-1 > c.cfg.GapThreshold {
			c.noteGap(archive.GapSeqSkip, false)
		}
	}
	c.below = 0
	return true
}

// recordNow submits the pending gap's row on its own, before any frame of
// the new sequence: after FutureCursor the stream resumes at the relay's
// live tip, and a quiet relay may send nothing for a while. cursor/relay
// does not move; the first frame's unit rewrites the row with its ToSeq.
func (c *Consumer) recordNow(ctx context.Context) error {
	p := c.pending
	if p == nil || p.recorded {
		return nil
	}
	row, err := c.cfg.GapIDs.Record(p.gap, func(row archive.Gap) error {
		kv, err := archive.GapPut(row)
		if err != nil {
			return fmt.Errorf("firehose: record gap: %w", err)
		}
		u := &archive.Unit{Puts: []archive.KV{kv}, Token: c.last, Acks: c.acks}
		if err := c.submit(ctx, u); err != nil {
			if werr := c.writerErr(); werr != nil {
				return werr
			}
			return fmt.Errorf("firehose: record gap: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	p.gap, p.recorded = row, true
	c.logGap(p.gap)
	return nil
}

// submitWithGap submits u, the unit of seq, with the pending gap (if any):
// its gap/ row (archive.GapIDs.Record: a later hole extends the newest
// gap whose repair pass has not begun), and a cursor reset when the relay
// restarted its sequence. The reset does not wait for the units accepted
// before it: the writer applies units in order, and keeps cursor/relay
// where it was until those of them waiting behind a replacement are
// applied (archive.SeqCursor.Reset), so the firehose never waits for a
// replacement.
func (c *Consumer) submitWithGap(ctx context.Context, u *archive.Unit, seq int64) error {
	p := c.pending
	if p == nil {
		return c.submit(ctx, u)
	}
	p.gap.ToSeq = uint64(seq)
	row, err := c.cfg.GapIDs.Record(p.gap, func(row archive.Gap) error {
		kv, err := archive.GapPut(row)
		if err != nil {
			return fmt.Errorf("firehose: record gap: %w", err)
		}
		u.Puts = append(u.Puts, kv)
		u.Cursor.Reset = p.reset
		return c.submit(ctx, u)
	})
	p.gap = row
	return err
}

// gapRecorded is called once the pending gap's unit is submitted.
func (c *Consumer) gapRecorded() {
	p := c.pending
	c.pending = nil
	if !p.recorded {
		c.logGap(p.gap)
	}
}

// logGap counts a gap and logs its line: at most one a minute per kind (a
// relay skipping seqs on every frame finds a hole per frame, each
// extending the one gap waiting for its pass), standing for the
// occurrences since the last.
func (c *Consumer) logGap(g archive.Gap) {
	c.m.gap(g.Kind)
	c.lines.Log(c.log, slog.LevelError, "gap:"+g.Kind.String(), "firehose: gap in the relay's stream recorded; its repair pass will fetch what changed",
		"gap", g.ID, "kind", g.Kind.String(), "from_seq", g.FromSeq, "to_seq", g.ToSeq)
}

// idlePong notes a pong on a connection that has been silent for a ping
// interval since its last message (at lastMsgUS): the relay is up and has
// nothing newer to send, so the archive is at its tip (Behind is 0 now). A
// connection busy replaying old frames never looks idle.
func (c *Consumer) idlePong(lastMsgUS int64) {
	now := c.cfg.Now()
	if now.Sub(time.UnixMicro(lastMsgUS)) >= c.cfg.IdleTimeout/3 {
		c.lastEventUS.Store(now.UnixMicro())
	}
}
