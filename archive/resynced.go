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
//
// The marks are committed in synced batches of at most resyncedBatch
// accounts, and meta/index after the last of them (markIndex): a crash
// part-way leaves the marker absent, and the next open marks again. The
// repo/ rows themselves say which accounts are marked already (the ev/ rows
// are in seq order, not DID order, and a set of every DID with a sync row
// would grow with the network), so the memory is one batch's.

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble"
)

// resyncedBatch is how many accounts one batch of the marks marks.
const resyncedBatch = 4096

// markResynced marks, for every active account with a sync row in ev/ up
// to tip, the repo/ state of a replacement due when p started and its due/
// entry, in synced batches, and returns how many accounts it marked; p
// counts the rows it reads. It runs in Open, before any writer exists. A
// malformed row is skipped: the index backfill reads the same rows, and
// reports it by halting compaction.
func (s *Store) markResynced(tip uint64, p *StepProgress) (int, error) {
	nowUS := p.Started().UnixMicro()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: EventKey(1), UpperBound: EventKey(tip + 1)})
	if err != nil {
		return 0, s.persistErr("read ev/ for the accounts resynced before the compaction index", err)
	}
	defer it.Close()
	// Indexed, so that an account marked earlier in the batch reads as
	// marked.
	b := s.db.NewIndexedBatch()
	defer func() { b.Close() }()
	n, inBatch := 0, 0
	var ev Event
	for ok := it.First(); ok; ok = it.Next() {
		if p.Read() {
			p.Tick("accounts_marked", n)
		}
		seq, err := ParseSeqKey(PrefixEvent, it.Key())
		if err != nil || DecodeEvent(it.Value(), seq, &ev) != nil || ev.Kind != KindSync {
			continue
		}
		marked, err := markReplacement(b, ev.DID, nowUS)
		if err != nil {
			return 0, err
		}
		if !marked {
			continue
		}
		n++
		if inBatch++; inBatch < resyncedBatch {
			continue
		}
		if err := s.commit(opMarkResynced, b); err != nil {
			return 0, err
		}
		b.Close()
		b, inBatch = s.db.NewIndexedBatch(), 0
	}
	if err := it.Error(); err != nil {
		return 0, s.persistErr("read ev/ for the accounts resynced before the compaction index", err)
	}
	if inBatch > 0 {
		if err := s.commit(opMarkResynced, b); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// opMarkResynced names a batch of markResynced's marks.
const opMarkResynced = "mark the accounts resynced before the compaction index"

// markReplacement adds to b (read through it) the repo/ state of did
// marked for a replacement due at nowUS and its due/ entry, and reports
// whether it changed anything: an account without a repo/ state or
// inactive (a reactivation replaces it) is left alone, and so is one
// already marked at nowUS, so that marking twice is marking once.
func markReplacement(b *pebble.Batch, did string, nowUS int64) (bool, error) {
	st, err := get(b, RepoKey(did), DecodeRepoState)
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("archive: mark the accounts resynced before the compaction index: %w", err)
	case !st.Active:
		return false, nil
	case st.Refetch != RefetchNone && st.NextAttemptUS == nowUS:
		return false, nil // marked already
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
		return false, fmt.Errorf("archive: mark %s for a replacement: %w", did, err)
	}
	_ = b.Set(RepoKey(did), v, nil)
	_ = b.Set(DueKey(st.NextAttemptUS, did), []byte(st.Host), nil)
	return true, nil
}
