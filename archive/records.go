package archive

// records.go owns the archive's view of one account's current records: what
// a whole-repo replacement is diffed against, so that it is archived as the
// rows that change the account (a delete for each record the snapshot
// lacks, an update for each changed CID, a create for each new record)
// rather than as the whole repo again.

import (
	"fmt"
	"sort"
)

// CurrentRecord is one record the archive holds for an account: the newest
// row of (DID, Collection, RKey) is a create or an update at Seq, with CID
// (binary form).
type CurrentRecord struct {
	Collection, RKey string
	CID              []byte
	Seq              uint64
}

// AccountRecords calls fn for every record the archive holds for did as of
// the call, in (collection, rkey) order: each record's newest create or
// update row, nothing for a record whose newest row is a delete. Sync and
// account rows remove nothing: a replacement is archived as the rows that
// change the account, so the records a sync row does not touch stay
// current.
//
// It walks every row of ev/: O(archive) per call. Once the writer keeps the
// record index, this becomes a scan of the account's index entries.
func (s *Store) AccountRecords(did string, fn func(CurrentRecord) error) error {
	it, err := s.Events(0)
	if err != nil {
		return err
	}
	defer it.Close()
	type path struct{ coll, rkey string }
	cur := map[path]CurrentRecord{}
	for it.Next() {
		ev := it.Event()
		if ev.DID != did || !ev.Kind.IsCommit() {
			continue
		}
		p := path{ev.Collection, ev.RKey}
		if ev.Kind == KindDelete {
			delete(cur, p)
			continue
		}
		cur[p] = CurrentRecord{Collection: ev.Collection, RKey: ev.RKey, CID: append([]byte(nil), ev.CID...), Seq: ev.Seq}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("archive: records of %s: %w", did, err)
	}
	out := make([]CurrentRecord, 0, len(cur))
	for _, r := range cur {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Collection != out[j].Collection {
			return out[i].Collection < out[j].Collection
		}
		return out[i].RKey < out[j].RKey
	})
	for _, r := range out {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}
