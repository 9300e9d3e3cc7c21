package backfill

// job_emit.go owns emission of a verified snapshot: rows in chunks of at
// most ChunkRows (R3), at most ChunksInFlight chunks submitted and not yet
// durable, the completion carried by the last chunk (R4: units apply in
// order, so it is durable with the last rows, never before them), and the
// counters moved from receipts (R8).
//
// Record bytes, CIDs and record keys are copied out of the CAR buffer into
// small slabs owned by the rows, so the CAR buffer is freed when the job
// ends instead of being pinned by rows that stay in the writer's live log,
// and a row costs no allocation of its own; consecutive rows of one
// collection share its string.

import (
	"bytes"
	"context"
	"fmt"
	"unsafe"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/crashpoint"
)

// emitter builds and submits one job's chunks.
type emitter struct {
	r    *Runner
	ctx  context.Context
	req  Request
	res  *Result
	src  archive.Source
	rev  string
	acks *archive.Acks

	events      []archive.Event
	recsInChunk int
	chunkRecs   []int // record rows per submitted chunk, by token
	added       int   // record rows added to chunks
	submitted   int
	received    int
	kept        int
	slab        []byte
	coll        string // the collection of the last record read
	final       int    // token of the unit carrying the completion (-1 until submitted)
	left        int    // bytes the snapshot's rows may still copy (bounded by the CAR size)
	// hashed: every record's bytes are the CAR block that was hashed
	// against its CID (a snapshot verified in memory; one verified from
	// its file reads them again), so rows carry Event.CIDOfRecord.
	hashed bool
}

func (r *Runner) emit(ctx context.Context, req Request, p *prepared, res *Result) (Result, error) {
	defer p.release()
	snap := p.snap
	res.Rev = snap.Rev.String()
	res.Bytes = p.size
	res.Dropped = snap.Dropped
	res.Records = snap.RecordCount
	e := r.newEmitter(ctx, req, res, res.Rev, snap.Bytes)
	e.hashed = snap.file == nil
	if err := e.rows(snap.kept); err != nil {
		return *res, e.fail(err)
	}
	res.Status = archive.StatusComplete
	return e.complete(&archive.RepoUpdate{DID: req.DID, Func: r.terminal(res, r.o.Now())})
}

func (r *Runner) newEmitter(ctx context.Context, req Request, res *Result, rev string, bytes int) *emitter {
	e := &emitter{
		r: r, ctx: ctx, req: req, res: res,
		src:   archive.SourceBackfill,
		rev:   rev,
		acks:  archive.NewAcks(),
		final: -1,
		left:  bytes,
	}
	if req.Replace {
		e.src = archive.SourceRetry
	}
	e.startChunk()
	return e
}

// rows emits the job's rows from records (Snapshot.kept): every record as
// a create, or for a replacement its sync row and then only what changes
// the account.
func (e *emitter) rows(records func(visitFunc) error) error {
	if !e.req.Replace {
		return records(func(key, cid, body []byte) error {
			coll, rkey, err := e.path(key)
			if err != nil {
				return err
			}
			return e.add(archive.KindCreate, coll, rkey, cid, body)
		})
	}
	if err := e.open(); err != nil {
		return err
	}
	return e.diff(records)
}

// complete submits the last chunk with the terminal state done, waits for
// every receipt, and accounts for the job.
func (e *emitter) complete(done *archive.RepoUpdate) (Result, error) {
	res := e.res
	if err := e.flush(done); err != nil {
		return *res, e.fail(err)
	}
	if err := e.collect(e.submitted - e.received); err != nil {
		return *res, err
	}
	e.r.o.Crash.Hit(crashpoint.RepoComplete)
	if e.kept != e.added {
		// Backfill and replacement rows always pass the ratchet; a
		// shortfall is a writer bug.
		return *res, fmt.Errorf("backfill: %s: %d of %d rows kept", e.req.DID, e.kept, e.added)
	}
	res.Units = e.submitted
	res.Duration = e.r.o.Now().Sub(res.Started)
	e.r.o.Metrics.durableOutcome(res)
	e.r.log(res)
	return *res, nil
}

func (e *emitter) fail(err error) error {
	if e.ctx.Err() != nil {
		return fmt.Errorf("%w: %s: %w", ErrCanceled, e.req.DID, e.ctx.Err())
	}
	return err
}

// startChunk begins a chunk.
func (e *emitter) startChunk() {
	e.events = make([]archive.Event, 0, min(e.r.o.ChunkRows, max(e.res.Records-e.added, 0)+1))
	e.recsInChunk = 0
}

// path splits a verified record's MST key (valid only during the visit)
// into its collection, the last record's string when it is the same, and
// its record key, copied into the slab.
func (e *emitter) path(key []byte) (coll, rkey string, err error) {
	slash := bytes.IndexByte(key, '/')
	if slash < 0 { // verification dropped such keys
		return "", "", fmt.Errorf("backfill: %s: record key %q has no collection", e.req.DID, key)
	}
	if string(key[:slash]) != e.coll {
		e.coll = string(key[:slash])
	}
	return e.coll, e.slabString(key[slash+1:]), nil
}

// add appends one record row with the record's CID and block (a delete
// carries none), first submitting the chunk when it is full.
func (e *emitter) add(kind archive.Kind, coll, rkey string, cid, body []byte) error {
	if len(e.events) == e.r.o.ChunkRows {
		if err := e.flush(nil); err != nil {
			return err
		}
		e.startChunk()
	}
	ev := archive.Event{Kind: kind, DID: e.req.DID, Collection: coll, RKey: rkey, Rev: e.rev, Source: e.src}
	if kind != archive.KindDelete {
		ev.CID = e.copyBytes(cid)
		ev.Record = e.copyBytes(body)
		ev.CIDOfRecord = e.hashed
	}
	e.events = append(e.events, ev)
	e.recsInChunk++
	e.added++
	return nil
}

// copyBytes copies b into the current slab (a fresh one when it does not
// fit); large records get their own allocation.
func (e *emitter) copyBytes(b []byte) []byte {
	if len(b) > defaultArenaBlock/4 {
		e.left -= len(b)
		return append([]byte(nil), b...)
	}
	e.room(len(b))
	n := len(e.slab)
	e.slab = append(e.slab, b...)
	return e.slab[n:len(e.slab):len(e.slab)]
}

// slabString copies b into the slab as a string. The slab's bytes are
// never written again once appended, so the string stays immutable.
func (e *emitter) slabString(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	c := e.copyBytes(b)
	return unsafe.String(unsafe.SliceData(c), len(c))
}

// room makes sure the slab has n free bytes. A new slab is sized to what
// the snapshot can still need (its records and CIDs are sections of the
// CAR, and each record's MST entry names its CID again, which a record key
// rarely exceeds, so the CAR's size bounds them), at most
// defaultArenaBlock: a small repo's rows do not pin a large, mostly empty
// block in the live log.
func (e *emitter) room(n int) {
	if n <= cap(e.slab)-len(e.slab) {
		e.left -= n
		return
	}
	size := min(max(e.left, n), defaultArenaBlock)
	e.slab = make([]byte, 0, max(size, n))
	e.left -= n
}

// flush submits the current chunk (with the completion when done is set),
// first waiting while ChunksInFlight chunks are not yet durable.
func (e *emitter) flush(done *archive.RepoUpdate) error {
	if over := e.submitted - e.received - e.r.o.ChunksInFlight; over >= 0 {
		if err := e.collect(over + 1); err != nil {
			return err
		}
	}
	u := &archive.Unit{Events: e.events, Token: e.submitted, Acks: e.acks}
	if done != nil {
		u.Repos = []archive.RepoUpdate{*done}
		e.final = e.submitted
	}
	if e.req.Replace {
		u.Replace = &archive.Replacement{DID: e.req.DID, Rev: e.rev, Final: done != nil}
	}
	if err := e.r.o.Writer.Submit(e.ctx, u); err != nil {
		return e.r.submitErr(e.ctx, e.req, err)
	}
	e.chunkRecs = append(e.chunkRecs, e.recsInChunk)
	e.submitted++
	e.events = nil
	return nil
}

// collect waits for n more receipts and accounts for each, also for those
// that arrived before a wait failed (their chunks are durable).
func (e *emitter) collect(n int) error {
	rc, err := e.r.wait(e.ctx, e.req, e.acks, n)
	for _, r := range rc {
		if err := e.account(r); err != nil {
			return err
		}
	}
	return err
}

// account counts one chunk's receipt; its token is the chunk's index.
func (e *emitter) account(r archive.Receipt) error {
	e.received++
	if r.Refused != nil {
		return e.r.refused(e.req, r.Refused)
	}
	tok, err := archive.TokenOf[int](r)
	if err == nil && (tok < 0 || tok >= len(e.chunkRecs)) {
		err = fmt.Errorf("token %d names no chunk of this job", tok)
	}
	if err != nil {
		return fmt.Errorf("backfill: %s: receipt: %w", e.req.DID, err)
	}
	if e.final < 0 || tok != e.final {
		e.r.o.Crash.Hit(crashpoint.RepoChunk)
	}
	recs := min(r.Kept, e.chunkRecs[tok]) // a replacement's first chunk is its sync row alone
	e.kept += recs
	e.r.o.Metrics.durableRecords(recs)
	if r.Kept > 0 {
		if e.res.FirstSeq == 0 {
			e.res.FirstSeq = r.FirstSeq
		}
		e.res.LastSeq = r.LastSeq
	}
	return nil
}
