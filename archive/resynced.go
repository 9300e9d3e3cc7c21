package archive

// This file owns the one repair the rows of builds before the compaction
// index need, on the first open by a build that has it (meta/index
// absent). Those builds archived a whole-repo replacement as a sync row
// that reset the account followed by every record of the snapshot, and a
// fold cleared the account at the sync row. Since, a sync row changes
// nothing: a replacement is archived as the rows that change the account,
// deletes included. Read by today's rule, the records an older
// replacement dropped would stay live for ever: in a replay from cursor
// 0, in the record index a replacement diffs against, to compaction. So
// that open marks every active account with a sync row in those rows for
// a replacement (RefetchSync, due now, as a #sync marks one): its
// snapshot, diffed against the archived records, deletes them. A row does
// not say which rule wrote it (builds between the change and the index
// wrote the new kind), so every such account is replaced; where the
// newer rule wrote it, the replacement changes nothing but its sync row.

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
)

// markResynced adds to b, for every active account with a sync row in
// ev/ up to tip, the repo/ state of a replacement due at nowUS and its
// due/ entry, and returns how many it marked. It runs in Open, before any
// writer exists. A malformed row is skipped: the index backfill reads the
// same rows, and reports it by halting compaction.
func (s *Store) markResynced(b *pebble.Batch, tip uint64, nowUS int64) (int, error) {
	dids := map[string]bool{}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: EventKey(1), UpperBound: EventKey(tip + 1)})
	if err != nil {
		return 0, s.persistErr("read ev/ for the accounts resynced before the compaction index", err)
	}
	var ev Event
	for ok := it.First(); ok; ok = it.Next() {
		seq, err := ParseSeqKey(PrefixEvent, it.Key())
		if err == nil && DecodeEvent(it.Value(), seq, &ev) == nil && ev.Kind == KindSync {
			dids[ev.DID] = true
		}
	}
	if err := it.Close(); err != nil {
		return 0, s.persistErr("read ev/ for the accounts resynced before the compaction index", err)
	}
	n := 0
	for did := range dids {
		st, err := get(s.db, RepoKey(did), DecodeRepoState)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return 0, fmt.Errorf("archive: mark the accounts resynced before the compaction index: %w", err)
		case !st.Active:
			continue // a reactivation replaces it
		}
		if st.Retryable() {
			_ = b.Delete(DueKey(st.NextAttemptUS, did), nil)
		}
		if st.Refetch == RefetchNone {
			st.Refetch = RefetchSync
		}
		st.NextAttemptUS = nowUS
		v, err := EncodeRepoState(st)
		if err != nil {
			return 0, fmt.Errorf("archive: mark %s for a replacement: %w", did, err)
		}
		_ = b.Set(RepoKey(did), v, nil)
		_ = b.Set(DueKey(st.NextAttemptUS, did), []byte(st.Host), nil)
		n++
	}
	return n, nil
}
