package archive

import (
	"errors"

	"github.com/cockroachdb/pebble"
)

// SetCompactBatchBytes bounds a pass's shared removal batches (tests: a
// small bound makes every account its own batch).
func SetCompactBatchBytes(o *CompactOptions, n int) { o.batchBytes = n }

// SetCompactHeldTombs bounds the bytes of one account's tombstones a
// pass's first read keeps for its second (tests: a small bound makes the
// second read read tomb/ again).
func SetCompactHeldTombs(o *CompactOptions, n int) { o.heldTombs = n }

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
	out, runs := map[string]string{}, 0
	err := eachRecordEntry(s, func(k, v []byte) error {
		if _, _, _, ok := splitRunKey(k); !ok {
			out[string(k)] = string(v)
			return nil
		}
		runs++
		return runMembers(s.db, k, v, 0, func(ev *Event, size int) error {
			out[string(RecordKey(ev.DID, ev.Collection, ev.RKey, ev.Seq))] = string(AppendRecordValue(nil, KindCreate, size))
			return nil
		})
	})
	return out, runs, err
}

// UnfoldRuns rewrites s's record index as a writer before run entries
// wrote it: each run entry becomes the per-record entries of its members
// whose rows are left.
func UnfoldRuns(s *Store) error {
	b := s.db.NewBatch()
	err := eachRecordEntry(s, func(k, v []byte) error {
		if _, _, _, ok := splitRunKey(k); !ok {
			return nil
		}
		err := runMembers(s.db, k, v, 0, func(ev *Event, size int) error {
			return b.Set(RecordKey(ev.DID, ev.Collection, ev.RKey, ev.Seq), AppendRecordValue(nil, KindCreate, size), nil)
		})
		if err != nil {
			return err
		}
		if err := b.Delete(k, nil); err != nil || b.Len() < 4<<20 {
			return err
		}
		err = errors.Join(b.Commit(pebble.Sync), b.Close())
		b = s.db.NewBatch()
		return err
	})
	if err != nil {
		return errors.Join(err, b.Close())
	}
	return errors.Join(b.Commit(pebble.Sync), b.Close())
}

// eachRecordEntry calls fn for every rec/ entry of s, in key order.
func eachRecordEntry(s *Store, fn func(k, v []byte) error) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixRecord, UpperBound: prefixEnd(PrefixRecord)})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		if err := fn(it.Key(), it.Value()); err != nil {
			return errors.Join(err, it.Close())
		}
	}
	return errors.Join(it.Error(), it.Close())
}

// RaceEnabled: the test binary runs under the race detector.
const RaceEnabled = raceEnabled
