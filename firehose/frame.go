package firehose

// frame.go owns turning one decoded subscribeRepos frame into archive rows,
// with the S1 validation: an invalid DID or rev drops the whole event, an
// invalid op drops that op only, and every drop is counted by reason.

import (
	"errors"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/upstream"
)

// Rows returns the archive rows of a #commit, #identity, #account or #sync
// frame carrying upstream seq, with Source = archive.SourceLive. Rows that
// fail validation are left out and counted on m (nil: not counted); the
// result may be empty (every row dropped, or a commit without ops). Frames
// without rows of their own (#info, error frames) return nil. A #sync's row
// carries its rev and effect to the writer: the capture writer stores it,
// the archive writer moves the ratchet and archives none (the replacement
// it schedules opens with the account's sync row).
func Rows(f *upstream.Frame, seq int64, m *Metrics) []archive.Event {
	switch {
	case f.Commit != nil:
		return commitRows(f, seq, m)
	case f.Identity != nil:
		b := f.Identity
		if !validDID(b.Did, m) {
			return nil
		}
		ev := archive.Event{Kind: archive.KindIdentity, DID: b.Did, UpstreamSeq: seq, Source: archive.SourceLive}
		if b.Handle != nil {
			ev.Handle = *b.Handle
		}
		if len(ev.Handle) > archive.MaxHandle {
			// No handle is this long: archived as the lexicon's word for a
			// handle that does not validate, not refused (every subscriber
			// still learns the identity changed) and not cut (a cut one
			// would name a handle the account never declared).
			ev.Handle = ident.HandleInvalid
			m.invalidHandle()
		}
		return keep(nil, ev, m)
	case f.Account != nil:
		b := f.Account
		if !validDID(b.Did, m) {
			return nil
		}
		ev := archive.Event{Kind: archive.KindAccount, DID: b.Did, Active: b.Active, UpstreamSeq: seq, Source: archive.SourceLive}
		if b.Status != nil {
			// Cut as a listed status is, not refused: the account's
			// activity is what matters, to its repo and to subscribers.
			ev.Status = upstream.CutStatus(*b.Status)
		}
		return keep(nil, ev, m)
	case f.Sync != nil:
		b := f.Sync
		if !validDID(b.Did, m) || !validRev(b.Rev, m) {
			return nil
		}
		ev := archive.Event{Kind: archive.KindSync, DID: b.Did, Rev: b.Rev, UpstreamSeq: seq, Source: archive.SourceLive}
		return keep(nil, ev, m)
	}
	return nil
}

func commitRows(f *upstream.Frame, seq int64, m *Metrics) []archive.Event {
	c := f.Commit
	if !validDID(c.Repo, m) || !validRev(c.Rev, m) {
		return nil
	}
	ops, err := upstream.CommitOps(c)
	if err != nil {
		m.drop(DropBadBlocks)
		return nil
	}
	evs := make([]archive.Event, 0, len(ops))
	for i := range ops {
		op := &ops[i]
		if op.Err != nil {
			m.drop(opReason(op.Err))
			continue
		}
		ev := archive.Event{DID: c.Repo, Collection: op.Collection, RKey: op.RKey, Rev: c.Rev,
			UpstreamSeq: seq, Source: archive.SourceLive}
		switch op.Action {
		case upstream.ActionCreate:
			ev.Kind = archive.KindCreate
		case upstream.ActionUpdate:
			ev.Kind = archive.KindUpdate
		case upstream.ActionDelete:
			ev.Kind = archive.KindDelete
		default: // CommitOps sets Err for these; belt and braces
			m.drop(DropInvalidAction)
			continue
		}
		if ev.Kind != archive.KindDelete {
			// Refused here as backfill refuses it in a downloaded repo: a
			// block no decoder reads as a record would be archived and then
			// never rendered.
			if !backfill.WellFormedRecord(op.Record) {
				m.drop(DropBadRecord)
				continue
			}
			ev.CID = op.CID.Bytes()
			ev.Record = op.Record
		}
		evs = keep(evs, ev, m)
	}
	return evs
}

// keep appends ev when the archive would store it; otherwise counts it.
func keep(dst []archive.Event, ev archive.Event, m *Metrics) []archive.Event {
	if err := archive.ValidateEvent(&ev); err != nil {
		m.drop(DropInvalidRow)
		return dst
	}
	return append(dst, ev)
}

func validDID(did string, m *Metrics) bool {
	if !upstream.ValidDID(did) { // exactly syntax.ParseDID, without its regexp
		m.drop(DropInvalidDID)
		return false
	}
	return true
}

func validRev(rev string, m *Metrics) bool {
	if !upstream.ValidTID(rev) { // exactly syntax.ParseTID, without its regexp
		m.drop(DropInvalidRev)
		return false
	}
	return true
}

func opReason(err error) string {
	switch {
	case errors.Is(err, upstream.ErrInvalidCollection):
		return DropInvalidCollection
	case errors.Is(err, upstream.ErrInvalidRKey):
		return DropInvalidRKey
	case errors.Is(err, upstream.ErrMissingBlock):
		return DropMissingBlock
	}
	return DropInvalidAction
}
