package archive

// records.go owns the archive's view of one account's current records: what
// a whole-repo replacement is diffed against, so that it is archived as the
// rows that change the account (a delete for each record the snapshot
// lacks, an update for each changed CID, a create for each new record)
// rather than as the whole repo again.

import (
	"fmt"

	"github.com/cockroachdb/pebble"
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
// update row, nothing for a record whose newest row is a delete or that an
// account row with a purging status (deleted, takendown: what compaction
// removes) supersedes. A sync row removes nothing: a replacement is
// archived as the rows that change the account, so the records a sync row
// does not touch stay current.
//
// It reads the record index, not ev/: one scan of the account's rec/ and
// tomb/ entries, and one point read of ev/ per current record for its CID
// (recomputed from the record when the row does not store it). All reads
// are of one Pebble snapshot, so a compaction pass running meanwhile never
// shows half of its removal. Malformed index entries or rows fail closed,
// naming the key. While the index backfill runs (IndexReady) the index
// lacks the older rows' records: it fails with ErrIndexPending rather than
// answer with part of the account.
func (s *Store) AccountRecords(did string, fn func(CurrentRecord) error) error {
	snap := s.db.NewSnapshot()
	defer snap.Close()
	if err := indexReady(snap); err != nil {
		return fmt.Errorf("archive: records of %s: %w", did, err)
	}
	purged, err := accountPurgedAt(snap, did)
	if err != nil {
		return err
	}
	prefix := AccountRecordPrefix(did)
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return fmt.Errorf("archive: records of %s: %w", did, err)
	}
	defer it.Close()
	var (
		cur     RecordKeyFields
		deleted bool
		have    bool
	)
	emit := func() error {
		if !have || deleted || cur.Seq < purged {
			return nil
		}
		c, err := eventCID(snap, cur.Seq)
		if err != nil {
			return err
		}
		return fn(CurrentRecord{Collection: cur.Collection, RKey: cur.RKey, CID: c, Seq: cur.Seq})
	}
	for it.First(); it.Valid(); it.Next() {
		f, err := ParseRecordKey(it.Key())
		if err != nil {
			return &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		del, _, err := DecodeRecordValue(it.Value())
		if err != nil {
			return &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		if have && (f.Collection != cur.Collection || f.RKey != cur.RKey) {
			if err := emit(); err != nil {
				return err
			}
		}
		cur, deleted, have = f, del, true
	}
	if err := it.Error(); err != nil {
		return &KeyError{Key: keyString(prefix), Kind: ErrRead, Err: err}
	}
	return emit()
}

// accountPurgedAt returns the seq of the account's newest tombstone of a
// purging account row (0: none left; the compaction pass that applies one
// removes what it supersedes with it).
func accountPurgedAt(r pebble.Reader, did string) (uint64, error) {
	prefix := AppendTombKey(nil, did, 0)
	prefix = prefix[:len(prefix)-8]
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return 0, fmt.Errorf("archive: tombstones of %s: %w", did, err)
	}
	defer it.Close()
	var at uint64
	for it.First(); it.Valid(); it.Next() {
		_, seq, err := ParseTombKey(it.Key())
		if err != nil {
			return 0, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		t, err := DecodeTomb(it.Value())
		if err != nil {
			return 0, &KeyError{Key: keyString(it.Key()), Kind: ErrMalformed, Err: err}
		}
		if t.Kind == KindAccount {
			at = max(at, seq)
		}
	}
	if err := it.Error(); err != nil {
		return 0, &KeyError{Key: keyString(prefix), Kind: ErrRead, Err: err}
	}
	return at, nil
}

// eventCID reads ev/<seq> through r and returns a copy of its CID.
func eventCID(r pebble.Reader, seq uint64) ([]byte, error) {
	ev, err := get(r, EventKey(seq), func(b []byte) (Event, error) {
		var ev Event
		err := DecodeEvent(b, seq, &ev)
		ev.CID = append([]byte(nil), ev.CID...)
		return ev, err
	})
	if err != nil {
		return nil, err
	}
	return ev.CID, nil
}
