package archive

import (
	"errors"

	"github.com/cockroachdb/pebble"
)

// SetCompactBatchBytes bounds a pass's shared removal batches (tests: a
// small bound makes every account its own batch).
func SetCompactBatchBytes(o *CompactOptions, n int) { o.batchBytes = n }

// KeyString is how a message names a key.
var KeyString = keyString

// RKeyHash is a run member's hash.
var RKeyHash = rkeyHash[string]

// RunKey is a run entry's key.
func RunKey(did, collection string, first uint64) []byte {
	return appendRunKey(nil, did, collection, first)
}

// RecordEntries returns the entries of s's record index, its run entries
// expanded: a member whose ev/ row is left as the per-record entry it
// stands for, a member whose row a pass removed as nothing; and the number
// of run entries.
func RecordEntries(s *Store) (map[string]string, int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixRecord, UpperBound: prefixEnd(PrefixRecord)})
	if err != nil {
		return nil, 0, err
	}
	defer it.Close()
	out, runs := map[string]string{}, 0
	for it.First(); it.Valid(); it.Next() {
		did, collection, first, ok := splitRunKey(it.Key())
		if !ok {
			out[string(it.Key())] = string(it.Value())
			continue
		}
		runs++
		run, err := decodeRun(it.Value())
		if err != nil {
			return nil, 0, err
		}
		for i := range run.n {
			ev, size, found, err := runMember(s.db, it.Key(), first+uint64(i), did, collection)
			if err != nil {
				return nil, 0, err
			}
			if !found {
				continue
			}
			if rkeyHash(ev.RKey) != run.hash(i) {
				return nil, 0, errors.New("a run member's hash is not its rkey's")
			}
			out[string(RecordKey(ev.DID, ev.Collection, ev.RKey, ev.Seq))] = string(AppendRecordValue(nil, KindCreate, size))
		}
	}
	return out, runs, it.Error()
}

// UnfoldRuns rewrites s's record index as a writer before run entries
// wrote it: each run entry becomes the per-record entries of its members
// whose rows are left.
func UnfoldRuns(s *Store) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixRecord, UpperBound: prefixEnd(PrefixRecord)})
	if err != nil {
		return err
	}
	defer it.Close()
	b := s.db.NewBatch()
	for it.First(); it.Valid(); it.Next() {
		did, collection, first, ok := splitRunKey(it.Key())
		if !ok {
			continue
		}
		run, err := decodeRun(it.Value())
		if err != nil {
			return err
		}
		for i := range run.n {
			ev, size, found, err := runMember(s.db, it.Key(), first+uint64(i), did, collection)
			if err != nil {
				return err
			}
			if found {
				_ = b.Set(RecordKey(ev.DID, ev.Collection, ev.RKey, ev.Seq), AppendRecordValue(nil, KindCreate, size), nil)
			}
		}
		_ = b.Delete(it.Key(), nil)
		if b.Len() > 4<<20 {
			if err := errors.Join(b.Commit(pebble.Sync), b.Close()); err != nil {
				return err
			}
			b = s.db.NewBatch()
		}
	}
	if err := it.Error(); err != nil {
		return errors.Join(err, b.Close())
	}
	return errors.Join(b.Commit(pebble.Sync), b.Close())
}
