package backfill

// job_replace.go owns how a whole-repo replacement is archived: as the
// rows that change the account, not as the whole repo again. A resync of a
// large repo that changed k records costs its sync row and k rows; an
// account whose repo did not change (a reactivation) costs its sync row
// alone. Every consumer, a Jetstream v1 client that never sees the sync
// row included, folds the stream to the new snapshot.

import (
	"errors"
	"fmt"
	"sort"

	"github.com/backstream/backstream/archive"
)

// Current is what a replacement needs of the archive: the account's
// records as archived now, which it can only tell once its record index
// covers every row (IndexReady, archive.ErrIndexPending). *archive.Store
// implements it.
type Current interface {
	AccountRecords(did string, fn func(archive.CurrentRecord) error) error
	IndexReady() error
}

var _ Current = (*archive.Store)(nil)

// errNoCurrent: a replacement job on a runner built without Options.Current.
var errNoCurrent = errors.New("backfill: a replacement needs Options.Current")

// open submits the replacement's first unit, its sync row alone, and waits
// until it is durable. The writer refuses it whole when the archive is
// newer than the snapshot (ErrStale), and from its application until the
// final unit the writer's barrier keeps every other unit touching the
// account waiting, whatever its producer: the records read after open are
// exactly those the rest of the replacement applies to.
func (e *emitter) open() error {
	if e.r.o.Current == nil {
		return errNoCurrent
	}
	e.events = append(e.events, archive.Event{Kind: archive.KindSync, DID: e.req.DID, Rev: e.rev, Source: e.src})
	if err := e.flush(nil); err != nil {
		return err
	}
	e.startChunk()
	return e.collect(e.submitted - e.received)
}

// recPath names one record of the account.
type recPath struct{ coll, rkey string }

// diff emits, against the archive's records of the account, a create for
// every snapshot record the archive lacks, an update for every record whose
// CID changed, nothing for an unchanged record, and then a delete for every
// archived record the snapshot lacks (in (collection, rkey) order). It
// holds the account's archived paths and CIDs in memory while it runs.
func (e *emitter) diff(records func(visitFunc) error) error {
	cur := map[recPath]string{}
	err := e.r.o.Current.AccountRecords(e.req.DID, func(c archive.CurrentRecord) error {
		cur[recPath{c.Collection, c.RKey}] = string(c.CID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("backfill: %s: the archived records to replace: %w", e.req.DID, err)
	}
	err = records(func(key, cid, body []byte) error {
		coll, rkey, err := e.path(key)
		if err != nil {
			return err
		}
		p := recPath{coll, rkey}
		old, had := cur[p]
		if !had {
			return e.add(archive.KindCreate, coll, rkey, cid, body)
		}
		delete(cur, p)
		if old == string(cid) {
			return nil
		}
		return e.add(archive.KindUpdate, coll, rkey, cid, body)
	})
	if err != nil {
		return err
	}
	gone := make([]recPath, 0, len(cur))
	for p := range cur {
		gone = append(gone, p)
	}
	sort.Slice(gone, func(i, j int) bool {
		if gone[i].coll != gone[j].coll {
			return gone[i].coll < gone[j].coll
		}
		return gone[i].rkey < gone[j].rkey
	})
	for _, p := range gone {
		if err := e.add(archive.KindDelete, p.coll, p.rkey, nil, nil); err != nil {
			return err
		}
	}
	return nil
}
