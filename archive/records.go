package archive

// records.go owns the archive's view of one account's current records: what
// a whole-repo replacement is diffed against, so that it is archived as the
// rows that change the account (a delete for each record the snapshot
// lacks, an update for each changed CID, a create for each new record)
// rather than as the whole repo again.

import (
	"fmt"
	"slices"
	"strings"

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
// (recomputed from the record when the row does not store it) and per
// member of a run entry (recrun.go), whose rkey only its row holds. All reads
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
	c := currentRecords{snap: snap, did: did, purged: purged, fn: fn, runs: map[string]CurrentRecord{}}
	for it.First(); it.Valid(); it.Next() {
		if err := c.entry(it.Key(), it.Value()); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return &KeyError{Key: keyString(prefix), Kind: ErrRead, Err: err}
	}
	return c.endCollection()
}

// currentRecords folds one account's rec/ entries, in key order, into its
// current records. A collection's run entries (recrun.go) sort before its
// per-record entries: their members are read from ev/ first and held in
// runs until the collection ends; a record's newest row wins, wherever it
// is indexed. Records are sent to fn a collection at a time, in rkey order.
type currentRecords struct {
	snap   pebble.Reader
	did    string
	purged uint64
	fn     func(CurrentRecord) error

	collection string
	runs       map[string]CurrentRecord // the collection's run creates, by rkey
	out        []CurrentRecord          // the collection's current records
	cur        RecordKeyFields          // the newest per-record entry of the record being read
	deleted    bool
	have       bool
}

func (c *currentRecords) entry(k, v []byte) error {
	if _, collection, _, ok := splitRunKey(k); ok {
		if err := c.enter(string(collection)); err != nil {
			return err
		}
		return c.run(k, v)
	}
	f, err := ParseRecordKey(k)
	if err != nil {
		return &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: err}
	}
	del, _, err := DecodeRecordValue(v)
	if err != nil {
		return &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: err}
	}
	if err := c.enter(f.Collection); err != nil {
		return err
	}
	if c.have && f.RKey != c.cur.RKey {
		if err := c.record(); err != nil {
			return err
		}
	}
	c.cur, c.deleted, c.have = f, del, true
	return nil
}

// enter ends the collection being read when collection is another.
func (c *currentRecords) enter(collection string) error {
	if collection == c.collection {
		return nil
	}
	if err := c.endCollection(); err != nil {
		return err
	}
	c.collection = collection
	return nil
}

// run reads the members of one run entry.
func (c *currentRecords) run(k, v []byte) error {
	return runMembers(c.snap, k, v, c.purged, func(ev *Event, _ int) error {
		if old, ok := c.runs[ev.RKey]; !ok || old.Seq < ev.Seq {
			c.runs[ev.RKey] = CurrentRecord{Collection: ev.Collection, RKey: ev.RKey, CID: ev.CID, Seq: ev.Seq}
		}
		return nil
	})
}

// record ends the record being read: its newest row, per-record or in a
// run, decides.
func (c *currentRecords) record() error {
	c.have = false
	if r, ok := c.runs[c.cur.RKey]; ok {
		delete(c.runs, c.cur.RKey)
		if r.Seq > c.cur.Seq {
			c.out = append(c.out, r)
			return nil
		}
	}
	if c.deleted || c.cur.Seq < c.purged {
		return nil
	}
	cid, err := eventCID(c.snap, c.cur.Seq)
	if err != nil {
		return err
	}
	c.out = append(c.out, CurrentRecord{Collection: c.cur.Collection, RKey: c.cur.RKey, CID: cid, Seq: c.cur.Seq})
	return nil
}

// endCollection sends the collection's current records to fn.
func (c *currentRecords) endCollection() error {
	if c.have {
		if err := c.record(); err != nil {
			return err
		}
	}
	for _, r := range c.runs {
		c.out = append(c.out, r)
	}
	clear(c.runs)
	slices.SortFunc(c.out, func(a, b CurrentRecord) int { return strings.Compare(a.RKey, b.RKey) })
	for _, r := range c.out {
		if err := c.fn(r); err != nil {
			return err
		}
	}
	c.out = c.out[:0]
	return nil
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
