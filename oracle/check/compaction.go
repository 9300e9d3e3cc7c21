package check

import (
	"fmt"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
)

// Survivors recomputes, from every row ever archived (in seq order, as the
// writer assigned them), the seqs a compaction to watermark w must leave:
// a create or update row is gone when a later row below w supersedes it —
// an update or delete of the same record, or an account row of its account
// whose status is deleted or takendown (a sync row supersedes nothing: the
// replacement it opens is archived as the rows that change the account). Every
// other row (delete, account, identity, sync, and anything not superseded)
// survives. It is the definition written out directly, one backward walk
// over the rows, independent of the store's index, so tests at every
// level can compare what a store kept with it.
func Survivors(rows []archive.Event, w uint64) map[uint64]bool {
	type record struct{ did, collection, rkey string }
	reset := map[string]bool{}    // accounts superseded from here back
	replaced := map[record]bool{} // records superseded from here back
	keep := make(map[uint64]bool, len(rows))
	for i := len(rows) - 1; i >= 0; i-- {
		ev := &rows[i]
		r := record{ev.DID, ev.Collection, ev.RKey}
		gone := (ev.Kind == archive.KindCreate || ev.Kind == archive.KindUpdate) && (reset[ev.DID] || replaced[r])
		if !gone {
			keep[ev.Seq] = true
		}
		if ev.Seq >= w {
			continue // a row at or above w supersedes nothing yet
		}
		switch {
		case ev.Kind == archive.KindUpdate || ev.Kind == archive.KindDelete:
			replaced[r] = true
		case ev.Kind == archive.KindAccount && (ev.Status == "deleted" || ev.Status == "takendown"):
			reset[ev.DID] = true
		}
	}
	return keep
}

// ForgetIndex makes s a store written by a backstream older than the
// record index: its rec/ and tomb/ entries and meta/index are deleted in
// one synced batch. Reopened, the store marks every row up to its tip as
// not indexed yet, for the index backfill (Store.FillIndex).
func ForgetIndex(s *archive.Store) error {
	b := s.DB().NewBatch()
	defer b.Close()
	for _, p := range [][]byte{archive.PrefixRecord, archive.PrefixTomb} {
		end := append(append([]byte(nil), p[:len(p)-1]...), p[len(p)-1]+1)
		_ = b.DeleteRange(p, end, nil)
	}
	_ = b.Delete(archive.KeyIndex, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		return fmt.Errorf("check: forget the index: %w", err)
	}
	return nil
}
