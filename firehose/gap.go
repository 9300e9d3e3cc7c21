package firehose

// gap.go owns what the consumer does when the relay cannot resume exactly:
// it remembers the gap it saw (OutdatedCursor, FutureCursor, seqs that stay
// below the last accepted one, a frame under an accepted seq that is not
// the one accepted there, a seq skip above the threshold) and records it
// as a gap/ row in the unit of the next frame it accepts, the unit that
// moves cursor/relay past it; a late frame's own unit records the gap
// covering it. It also keeps the window of recently accepted frames that
// tells a duplicate from a late or a new frame (checkSeq). A hole found
// while the newest gap recorded has no repair pass begun (nor has waited
// long for the stream, the repair runner says which: archive.GapIDs.Begin)
// extends that gap (archive.GapIDs.Record). A relay that restarted its
// sequence also resets cursor/relay to the new sequence in that unit.
// Until that unit is submitted nothing moved: a crash re-dials from the
// old cursor and the relay tells the same story again.

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
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

// seqRule is what checkSeq makes of a frame.
type seqRule int

const (
	seqDrop  seqRule = iota // a duplicate: dropped (counted)
	seqNext                 // processed, and the consumer's position moves to it
	seqLate                 // below the position, never accepted: processed, the position stays
	seqNewer                // below the window, newer than the archive: followed or late once its rows are known (followNewer)
)

// maxRecentFrames bounds the window of accepted frames the consumer
// remembers (recent), whatever the gap threshold.
const maxRecentFrames = 1 << 16

// recentFrame is one accepted frame: its seq and frameKey.
type recentFrame struct {
	seq int64
	key uint64
}

// checkSeq applies the seq rules to frame f of seq, about to be processed.
// A frame below the last accepted seq within the window of frames this
// consumer remembers (the last GapThreshold seqs, none at or below the
// position it started from: checked) is a duplicate only when it is the
// frame accepted under that seq. Another frame under an accepted seq
// comes from a relay that went back in its sequence (restored from a
// backup, say) and sends new events under old seqs: a regression, and
// the frame goes on as the first of the new sequence. A frame under a seq
// never accepted (the relay delivered out of order) is late: processed
// without moving the position, and noted as a gap (seqLate). Below the
// window (before this process started, say) a #commit or #sync whose rev
// is newer than the account's archived one is an event the archive does
// not hold (newerThanArchived): a relay that went back in its sequence
// while we were down, a regression too, followed at once when it brings
// rows, so the frames after it (an #identity or #account, which no rev
// tells from a replay) are the new sequence's (seqNewer, followNewer).
// Below the
// window any other frame is a duplicate, unless frames stay below the last
// accepted seq (the dialed cursor, or a frame this connection brought)
// for more than the threshold in a row: they come from a relay that
// restarted its sequence without saying FutureCursor, before the
// connection or during it (a relay merely replaying too much, or
// re-sending a few frames, reaches the cursor soon), and that frame too
// goes on as the first of the new sequence. A skip above the threshold is
// noted as a gap.
func (c *Consumer) checkSeq(f *upstream.Frame, seq int64) (seqRule, error) {
	if !c.hasPos {
		c.below = 0
		c.forget(seq - 1) // a new position: nothing before it was seen
		return seqNext, nil
	}
	switch {
	case seq <= c.last:
		if r, ok := c.recentAt(seq); ok {
			switch {
			case r.seq != seq:
				c.m.anomaly(AnomalyLate)
				return seqLate, nil
			case r.key != c.frameKey(f):
				c.noteGap(archive.GapSeqRegression, true)
				c.forgetAbove(seq - 1)
				c.below = 0
				return seqNext, nil
			}
		} else if newer, err := c.newerThanArchived(f); err != nil {
			return seqDrop, err
		} else if newer {
			return seqNewer, nil
		}
		c.m.anomaly(AnomalyDuplicate)
		if seq == c.last {
			return seqDrop, nil
		}
		if c.below++; c.below <= c.cfg.GapThreshold {
			return seqDrop, nil
		}
		c.noteGap(archive.GapSeqRegression, true)
		c.forget(seq - 1)
	case seq > c.last+1:
		c.m.anomaly(AnomalySeqGap)
		if seq-c.last-1 > c.cfg.GapThreshold {
			c.noteGap(archive.GapSeqSkip, false)
		}
	}
	c.below = 0
	return seqNext, nil
}

// followNewer decides the frame of seq that checkSeq found below the
// window and newer than the archive (seqNewer), once its unit is built.
// One that brings rows starts the relay's new sequence: a regression,
// followed at once, as another event under an accepted seq is. One that
// brings none (it failed verification, or no op of it was valid) never
// moved the archive's rev, and may be a replay of a frame that did the
// same before (a relay replaying more than asked): it is late, its unit
// archived alone, the position kept, so the replayed frames after it stay
// duplicates.
func (c *Consumer) followNewer(seq int64, rows bool) seqRule {
	if !rows {
		c.m.anomaly(AnomalyLate)
		return seqLate
	}
	c.noteGap(archive.GapSeqRegression, true)
	c.forget(seq - 1)
	c.below = 0
	return seqNext
}

// newerThanArchived reports whether f, live, is a #commit or #sync whose
// rev is newer than its account's archived rev (rev/): an event the
// archive does not hold, whatever its seq. An account the archive has no
// rev for tells nothing (false). A rev/ row that cannot be read is our
// own store failing: an error.
func (c *Consumer) newerThanArchived(f *upstream.Frame) (bool, error) {
	if c.cfg.Store == nil || c.cfg.Mode != ModeLive {
		return false, nil
	}
	var did, rev string
	switch {
	case f.Commit != nil:
		did, rev = f.Commit.Repo, f.Commit.Rev
	case f.Sync != nil:
		did, rev = f.Sync.Did, f.Sync.Rev
	default:
		return false, nil
	}
	if !upstream.ValidDID(did) || !upstream.ValidTID(rev) {
		return false, nil
	}
	cur, err := c.cfg.Store.Rev(did)
	switch {
	case errors.Is(err, archive.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("firehose: a frame below the window: %w", err)
	}
	return rev > cur, nil
}

// recentAt returns the slot of seq in the window of accepted frames; ok
// is false when seq lies outside the window (at or below the floor, or
// more than its length below the last accepted seq). Within it, a slot
// holding another seq means seq was never accepted.
func (c *Consumer) recentAt(seq int64) (recentFrame, bool) {
	n := int64(len(c.recent))
	if seq <= c.floor || seq <= c.last-n {
		return recentFrame{}, false
	}
	return c.recent[seq%n], true
}

// remember puts frame f of seq, accepted or late, in the window. A late
// frame below the window takes no slot: its slot belongs to a frame
// within the window, which a replay must still find there.
func (c *Consumer) remember(f *upstream.Frame, seq int64) {
	n := int64(len(c.recent))
	if seq <= c.last-n {
		return
	}
	c.recent[seq%n] = recentFrame{seq: seq, key: c.frameKey(f)}
}

// forget empties the window: the seqs at or below floor were not seen by
// this consumer (a new position, or a new sequence).
func (c *Consumer) forget(floor int64) {
	clear(c.recent)
	c.floor = floor
}

// forgetAbove drops the frames above seq from the window: the relay went
// back to seq, and what it sends above is a new sequence.
func (c *Consumer) forgetAbove(seq int64) {
	for i := range c.recent {
		if c.recent[i].seq > seq {
			c.recent[i] = recentFrame{}
		}
	}
}

// frameKey tells one event from another under the same seq: its type,
// account, rev (a commit or sync) and time, and what an #identity or
// #account says. A relay replaying a frame sends the same event; one
// that went back in its sequence sends others under those seqs.
func (c *Consumer) frameKey(f *upstream.Frame) uint64 {
	var h maphash.Hash
	h.SetSeed(c.seed)
	h.WriteString(frameType(f))
	h.WriteByte(0)
	h.WriteString(f.DID())
	h.WriteByte(0)
	switch {
	case f.Commit != nil:
		h.WriteString(f.Commit.Rev)
	case f.Sync != nil:
		h.WriteString(f.Sync.Rev)
	case f.Identity != nil:
		if f.Identity.Handle != nil {
			h.WriteString(*f.Identity.Handle)
		}
	case f.Account != nil:
		if f.Account.Active {
			h.WriteByte(1)
		}
		if f.Account.Status != nil {
			h.WriteString(*f.Account.Status)
		}
	}
	h.WriteByte(0)
	h.WriteString(eventTimeString(f))
	return h.Sum64()
}

// submitLate submits u, the unit of the late frame of seq, which moves
// no cursor, with a gap covering it (a seq_regression from the last
// accepted seq to seq, or the extension of the newest gap waiting for its
// pass): its rows are archived, and the repair pass audits what its
// effects applied out of order (an older #account after a newer one). A
// gap already pending is recorded by the next frame that moves the
// cursor, as before, and covers this one.
func (c *Consumer) submitLate(ctx context.Context, u *archive.Unit, seq int64) error {
	u.Cursor = archive.SeqCursor{}
	if c.pending != nil {
		return c.submit(ctx, u)
	}
	c.noteGap(archive.GapSeqRegression, false)
	if err := c.submitWithGap(ctx, u, seq); err != nil {
		return err
	}
	c.gapRecorded()
	return nil
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
