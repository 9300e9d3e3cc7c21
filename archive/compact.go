package archive

// This file owns the compaction pass: the physical removal of superseded
// rows below a watermark (meta/compaction), driven by the tombstones the
// writer lists in tomb/ and the record index it keeps in rec/, never by a
// scan of ev/. Its cost is proportional to the tombstones it applies and
// the rows it removes (plus the index entries of an account deleted or
// taken down, which it scans): a record's tombstone names the rows it
// supersedes and their sizes (compact_supersede.go), so the pass reads
// tomb/ and deletes blind; only a tombstone written before they were named
// makes it look the rows up in rec/. It never reads ev/.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/internal/crashpoint"
)

// DefaultCompactReclaimBytes is the bytes a pass must remove before it asks
// Pebble for a manual compaction of the ranges it removed much of, so the
// disk really shrinks.
const DefaultCompactReclaimBytes = 64 << 20

// DefaultCompactReclaimShare is the default CompactOptions.ReclaimShare: a
// range of ev/ the pass removed rows from is compacted at once only when
// what it removed is at least a quarter of Pebble's estimate of the
// range's size on disk, so the manual compaction rewrites at most about 4
// bytes per byte it reclaims. Rows removed here and there (deletes of old
// records, spread over the whole archive) are left to Pebble's own
// compactions, which the sized deletes point at: compacting from the
// lowest removed seq to the watermark rewrote the whole archive for a pass
// that removed a few rows of it.
const DefaultCompactReclaimShare = 4

// compactBatchBytes bounds a removal batch shared by several accounts; one
// account's removals are one batch, up to MaxAccountBatch.
const compactBatchBytes = 1 << 20

// rangeTombs is the fewest tombstones of one account that the pass deletes
// with one range deletion of the account's tomb/ keys below W rather than
// one deletion each: a sixth of the batch of an account's many deletes,
// and one span for the next pass's tomb/ iterator to step over, not
// thousands of deleted keys; few accounts a pass reach it, so Pebble
// holds few range deletions.
const rangeTombs = 1024

// maxHeldTombs bounds the bytes of one account's tombstones the first read
// keeps for the second (most accounts'); a larger account's are read again.
const maxHeldTombs = 1 << 20

// DefaultCompactMaxAccountBatch is the default CompactOptions.MaxAccountBatch:
// 1 GiB, the removal of about 16 million downloaded records of an account
// taken down or deleted, or of about 4 million records it deleted (the
// pass holds about twice its batch at most).
const DefaultCompactMaxAccountBatch = 1 << 30

// MaxCompactAccountBatch is the largest MaxAccountBatch: Pebble cannot
// build a batch of 4 GiB (it panics), and the bound is checked after each
// tombstone or run entry is added, which adds well under 64 MiB.
const MaxCompactAccountBatch = 4<<30 - 64<<20

// ErrCompactionState: the compaction state (a tomb/ or rec/ entry,
// compact/intent, meta/compaction) is malformed.
// The pass stopped before removing anything the bad value concerns and
// guessed nothing. The owner halts compaction (ingest and serving go on)
// and reports the key; the recovery path for a bad intent is `backstream
// compaction reset`, which deletes compact/intent (ResetCompactionIntent).
// The error also matches ErrMalformed and names the key.
var ErrCompactionState = errors.New("malformed compaction state: compaction halted")

// ErrCompactionTooLarge: one account's removal below the pass's watermark
// is larger than CompactOptions.MaxAccountBatch. Its removal must be one
// batch (a subscriber never sees half of it), so the pass stops before
// committing any of it, leaving its intent (the accounts before it in
// earlier batches stay removed); the error names the account. The owner
// halts compaction (ingest and serving go on) rather than retrying a pass
// that fails the same way; the recovery is a larger MaxAccountBatch (at
// most MaxCompactAccountBatch, with the memory for about twice it).
var ErrCompactionTooLarge = errors.New("one account's removal is larger than the removal batch limit: compaction halted")

// CompactOptions configure one pass.
type CompactOptions struct {
	// ReclaimBytes: a pass that removed more than this many bytes of ev/
	// values asks Pebble for a manual compaction of the ranges it removed
	// much of (ReclaimShare). 0 is DefaultCompactReclaimBytes; negative
	// never compacts.
	ReclaimBytes int64
	// ReclaimShare: past ReclaimBytes, a chunk of ev/ the pass removed
	// rows from is compacted when what it removed there is at least
	// 1/ReclaimShare of the chunk's size on disk. 0 is
	// DefaultCompactReclaimShare; negative compacts every chunk it removed
	// rows from, whatever is on disk (tests).
	ReclaimShare int
	// Logger receives the pass's one summary line; nil is slog.Default().
	Logger *slog.Logger
	// Crash fires compaction-intent, compaction-batch and compaction-done
	// right after the batch each names (tests; nil in production).
	Crash *crashpoint.Set
	// Now is the clock of the intent's start time; nil is time.Now.
	Now func() time.Time
	// MaxAccountBatch bounds the bytes of one account's removal batch
	// (what the pass holds is about twice it at most); an account whose
	// removal would be larger fails the pass with ErrCompactionTooLarge.
	// 0 is DefaultCompactMaxAccountBatch; above MaxCompactAccountBatch is
	// MaxCompactAccountBatch.
	MaxAccountBatch int

	batchBytes int // tests: the shared removal batch bound (0: compactBatchBytes)
	heldTombs  int // tests: the bytes of tombstones the first read keeps (0: maxHeldTombs)
}

func (o *CompactOptions) defaults() {
	if o.ReclaimBytes == 0 {
		o.ReclaimBytes = DefaultCompactReclaimBytes
	}
	if o.ReclaimShare == 0 {
		o.ReclaimShare = DefaultCompactReclaimShare
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.MaxAccountBatch <= 0 {
		o.MaxAccountBatch = DefaultCompactMaxAccountBatch
	}
	o.MaxAccountBatch = min(o.MaxAccountBatch, MaxCompactAccountBatch)
	if o.heldTombs <= 0 {
		o.heldTombs = maxHeldTombs
	}
	if o.batchBytes <= 0 {
		o.batchBytes = compactBatchBytes
	}
}

// CompactResult is what one pass did.
type CompactResult struct {
	From, To   uint64 // the watermark before and after the pass
	Accounts   int    // accounts whose tombstones were applied
	Tombstones int    // tomb/ entries applied and deleted
	Rows       int    // ev/ rows removed (see Bytes)
	// Bytes: of the removed ev/ values. Rows and Bytes count a row a
	// tombstone names even when an earlier pass removed it (an account's
	// deletion or takedown applied while the writer named the row, or an
	// unnamed tombstone's lookup of a row the writer named past an update
	// written before updates had their own rec/ tag), or another named
	// tombstone of the pass names it too (the walk past such an update):
	// its removal is blind.
	Bytes   int64
	Batches int // removal batches committed
	// LargestBatch: the bytes of the largest removal batch committed (one
	// account's removal is one batch: see CompactOptions.MaxAccountBatch).
	LargestBatch int
	BytesRead    int64 // block bytes the pass's iterators loaded (cached or not)
	// BytesUncached: of BytesRead, the bytes not found in the block cache:
	// read from the files and decompressed (what a pass's CPU follows).
	BytesUncached int64
	Duration      time.Duration
	Reclaimed     bool // a manual compaction ran (Bytes > ReclaimBytes)
	RolledOver    bool // the pass finished an intent a previous pass left
	// IndexPending: the index backfill has not finished (FillIndex), so no
	// pass ran and the watermark did not move.
	IndexPending bool
}

// CompactionState is the durable compaction state.
type CompactionState struct {
	// Watermark: below it every superseded row is gone (0: never compacted).
	Watermark uint64
	// Intent is the pass in progress, nil when none is: a pass that did not
	// finish (a crash), which the next pass rolls forward.
	Intent *CompactIntent
}

// Compaction reads meta/compaction and compact/intent. A malformed value
// (or an intent below the watermark) is an error matching
// ErrCompactionState and ErrMalformed, naming the key.
func (s *Store) Compaction() (CompactionState, error) {
	var st CompactionState
	w, err := get(s.db, KeyCompaction, DecodeWatermark)
	switch {
	case err == nil:
		st.Watermark = w
	case !errors.Is(err, ErrNotFound):
		return st, compactionErr(err)
	}
	in, err := get(s.db, KeyCompactIntent, DecodeCompactIntent)
	switch {
	case err == nil:
		if in.W < st.Watermark {
			return st, compactionErr(&KeyError{Key: string(KeyCompactIntent), Kind: ErrMalformed,
				Err: malformed("intent watermark %d below the watermark %d", in.W, st.Watermark)})
		}
		st.Intent = &in
	case !errors.Is(err, ErrNotFound):
		return st, compactionErr(err)
	}
	return st, nil
}

// compactionErr marks a malformed compaction value as ErrCompactionState;
// other errors (I/O) pass unchanged.
func compactionErr(err error) error {
	if errors.Is(err, ErrMalformed) {
		return fmt.Errorf("%w: %w", ErrCompactionState, err)
	}
	return err
}

// badState is ErrCompactionState naming key (readably: keyString), for the
// decode failure err, or the reason format describes when err is nil.
func badState(key []byte, err error, format string, args ...any) error {
	if err == nil {
		err = malformed(format, args...)
	}
	return compactionErr(&KeyError{Key: keyString(key), Kind: ErrMalformed, Err: err})
}

// ResetCompactionIntent deletes compact/intent in one synced batch: the
// recovery path of a malformed or unfinishable intent. A malformed
// watermark (meta/compaction) goes in the same batch (dropped reports it):
// absent is 0, which is always true. Safe: a pass is defined by tomb/ and
// the watermark, and an applied tombstone is deleted with what it removed,
// so the next pass recomputes what it must remove. hadIntent reports
// whether there was an intent to delete, well-formed or not. An
// unreadable watermark or intent is an error, and nothing is deleted.
func (s *Store) ResetCompactionIntent() (dropped, hadIntent bool, err error) {
	_, err = get(s.db, KeyCompaction, DecodeWatermark)
	switch {
	case errors.Is(err, ErrMalformed):
		dropped = true
	case err != nil && !errors.Is(err, ErrNotFound):
		return false, false, fmt.Errorf("archive: reset the compaction intent: %w", err)
	}
	_, err = get(s.db, KeyCompactIntent, func(b []byte) ([]byte, error) { return b, nil })
	switch {
	case err == nil:
		hadIntent = true
	case !errors.Is(err, ErrNotFound):
		return false, false, fmt.Errorf("archive: reset the compaction intent: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Delete(KeyCompactIntent, nil)
	if dropped {
		_ = b.Delete(KeyCompaction, nil)
	}
	if err := s.commit("reset the compaction intent", b); err != nil {
		return false, false, err
	}
	return dropped, hadIntent, nil
}

// CompactionGeneration counts the compaction removal batches committed
// since the store was opened. A reader holding an iterator opened at
// another generation reopens it at its position before its next read, so
// it never reads a row a committed removal batch took away.
func (s *Store) CompactionGeneration() uint64 { return s.compactGen.Load() }

// TombstonesWritten counts the tomb/ entries this writer committed since it
// started (an owner compares it with its value at the last pass to run an
// early pass).
func (w *Writer) TombstonesWritten() uint64 { return w.tombs.Load() }

// Compact runs one compaction pass to W = max(watermark, w's durable tip +
// 1), or to the watermark of an intent a previous pass left (rolled
// forward):
//
//  1. one synced batch writes compact/intent = W;
//  2. tomb/ is read account by account; for each account, its tombstones
//     below W name the superseded rows (a record's tombstone lists them,
//     or, written before it did, the rec/ entries of the record older than
//     the update or delete; every rec/ entry of the account older than a
//     deleted/taken-down account row); their ev/ rows and rec/
//     entries, the applied tombstones, and a delete's own rec/ entry are
//     removed in ONE batch (several small accounts may share one), so no
//     reader's snapshot holds half of an account's removal. Removal batches
//     are committed without a sync: the watermark batch's sync makes the
//     WAL before it durable, and a crash before it leaves the intent, which
//     the next pass rolls forward (removing is idempotent). After each
//     batch the store's compaction generation moves and the removed rows
//     still in w's live log are marked forgotten;
//  3. one synced batch sets meta/compaction = W and deletes the intent;
//  4. past ReclaimBytes removed, a manual compaction of the ranges removed
//     from lets the disk shrink.
//
// Only one pass may run at a time (one owner goroutine); the writer goes
// on meanwhile (it only adds keys above W). A malformed compaction value
// stops the pass with an error matching ErrCompactionState, naming the key;
// a store I/O error is returned wrapped as usual (fatal for the owner). A
// cancelled ctx stops it between accounts, leaving the intent.
func (s *Store) Compact(ctx context.Context, w *Writer, opts CompactOptions) (CompactResult, error) {
	opts.defaults()
	start := time.Now()
	st, err := s.Compaction()
	if err != nil {
		return CompactResult{}, fmt.Errorf("archive: compaction: %w", err)
	}
	p := &compactPass{s: s, w: w, opts: opts, lowest: math.MaxUint64,
		sized: s.db.FormatMajorVersion() >= pebble.FormatDeleteSizedAndObsolete}
	p.res.From = st.Watermark
	if m, err := s.IndexMarker(); err != nil {
		return p.res, fmt.Errorf("archive: compaction: %w", err)
	} else if !m.Done() {
		p.res.To, p.res.IndexPending = st.Watermark, true
		return p.res, nil
	}
	if st.Intent != nil {
		p.W, p.res.RolledOver = st.Intent.W, true
	} else {
		p.W = max(st.Watermark, w.Live().Tip()+1)
		if p.W == st.Watermark {
			p.res.To = p.W
			return p.res, nil // nothing archived since the last pass
		}
		if err := p.writeIntent(); err != nil {
			return p.res, err
		}
	}
	err = p.run(ctx)
	p.close()
	if err != nil {
		return p.res, err
	}
	if err := p.finish(); err != nil {
		return p.res, err
	}
	p.res.To = p.W
	if err := p.reclaim(ctx); err != nil {
		return p.res, err
	}
	p.res.Duration = time.Since(start)
	opts.Logger.Info("archive: compaction pass done", "from", p.res.From, "to", p.res.To,
		"accounts", p.res.Accounts, "tombstones", p.res.Tombstones, "rows", p.res.Rows, "bytes", p.res.Bytes,
		"reclaimed", p.res.Reclaimed, "rolled_over", p.res.RolledOver, "duration", p.res.Duration)
	return p.res, nil
}

// compactPass is one pass's state. What it holds for one account is
// bounded by what the account's removal adds to the batch, never by its
// history: the tombstones are read twice (the first read finds the
// account's reset and its unnamed tombstones, the second applies the named
// ones and deletes every applied tombstone as it goes; up to maxHeldTombs
// of them the first read keeps a copy, so the second needs no seek), and
// the removed rows are listed only when the live log may hold them.
type compactPass struct {
	s    *Store
	w    *Writer
	opts CompactOptions
	W    uint64
	res  CompactResult

	b             *pebble.Batch
	tombIt, recIt *pebble.Iterator
	forgotten     []uint64 // seqs removed by the open batch that the live log may hold
	liveFloor     uint64   // the live log's lowest seq when the open batch began
	lowest        uint64   // lowest seq removed
	acct          accountTombs
	acctStart     int // the open batch's length before the account's removal
	kbuf          []byte
	xbuf          []byte              // replay index keys being deleted
	removed       map[uint64]struct{} // rows the account's unnamed tombstones' lookups removed
	lookup        bool                // removeRange is removing an unnamed tombstone's rows
	sized         bool                // the store's format has sized deletes
	evBytes       seqChunks           // bytes removed from ev/, by seq chunk (reclaim)
}

// accountTombs is what the first read of one account's tombstones below W
// keeps: no named tombstone (the second read applies them).
type accountTombs struct {
	did        string
	start      []byte                 // its first tomb/ key
	next       []byte                 // the tomb/ key after its tombstones (nil: none)
	tombstones int                    // its tombstones below W
	reset      uint64                 // highest deleted/taken-down account tombstone (0: none)
	held       []byte                 // its tombstones while they fit: [uvarint len][key][uvarint len][value]…
	spilled    bool                   // they did not fit: the second read reads tomb/ again
	recs       map[string]unnamedTomb // unnamed: collection\x00rkey → its latest tombstone
}

// unnamedTomb is a record's latest unnamed tombstone.
type unnamedTomb struct {
	seq  uint64
	kind Kind
}

func (p *compactPass) writeIntent() error {
	v, err := EncodeCompactIntent(CompactIntent{W: p.W, Started: p.opts.Now()})
	if err != nil {
		return fmt.Errorf("archive: compaction intent: %w", err)
	}
	b := p.s.db.NewBatch()
	defer b.Close()
	_ = b.Set(KeyCompactIntent, v, nil)
	if err := p.s.commit("commit the compaction intent", b); err != nil {
		return err
	}
	p.opts.Crash.Hit(crashpoint.CompactionIntent)
	return nil
}

// run applies every account's tombstones below W.
func (p *compactPass) run(ctx context.Context) error {
	p.b = p.s.db.NewBatch()
	p.liveFloor = p.w.live.floor()
	if err := p.open(PrefixTomb); err != nil {
		return err
	}
	valid := p.tombIt.First()
	for valid {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		if valid, err = p.readAccount(); err != nil {
			return err
		}
		if p.acct.tombstones == 0 {
			continue
		}
		if err := p.removeAccount(); err != nil {
			return err
		}
		if p.b.Len() >= p.opts.batchBytes {
			if err := p.commit(); err != nil {
				return err
			}
			if valid {
				// Fresh iterators after each commit: a long pass pins no
				// memtable or sstable for its whole length.
				if err := p.open(p.acct.next); err != nil {
					return err
				}
				valid = p.tombIt.First()
			}
		}
	}
	if err := p.tombIt.Error(); err != nil {
		return p.readErr(PrefixTomb, err)
	}
	return p.commit()
}

// open (re)opens the pass's iterators, tomb/ from the key from.
func (p *compactPass) open(from []byte) error {
	p.closeIters()
	var err error
	if p.tombIt, err = p.s.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: prefixEnd(PrefixTomb)}); err != nil {
		return p.readErr(PrefixTomb, err)
	}
	if p.recIt, err = p.s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixRecord, UpperBound: prefixEnd(PrefixRecord)}); err != nil {
		return p.readErr(PrefixRecord, err)
	}
	return nil
}

func (p *compactPass) closeIters() {
	for _, it := range []**pebble.Iterator{&p.tombIt, &p.recIt} {
		if *it != nil {
			st := (*it).Stats()
			p.res.BytesRead += int64(st.InternalStats.BlockBytes)
			p.res.BytesUncached += int64(st.InternalStats.BlockBytes - st.InternalStats.BlockBytesInCache)
			_ = (*it).Close()
			*it = nil
		}
	}
}

func (p *compactPass) close() {
	p.closeIters()
	if p.b != nil {
		_ = p.b.Close()
		p.b = nil
	}
}

func (p *compactPass) readErr(what []byte, err error) error {
	return p.s.persistErr("compaction: read "+string(what), err)
}

// readAccount is the first read of the tombstones of the account at the
// tomb/ iterator's position: it finds the account's reset and keeps its
// unnamed tombstones (the latest of each record), validating every value
// but a named record tombstone's (the second read decodes those). It
// leaves the iterator on the next account's first key (p.acct.next) and
// reports whether there is one.
func (p *compactPass) readAccount() (bool, error) {
	did, _, err := ParseTombKey(p.tombIt.Key())
	if err != nil {
		return false, badState(p.tombIt.Key(), err, "")
	}
	a := &p.acct
	a.did, a.tombstones, a.reset = did, 0, 0
	a.held, a.spilled = a.held[:0], false
	a.start = append(a.start[:0], p.tombIt.Key()...)
	clear(a.recs)
	valid, err := p.readTombs()
	a.next = a.next[:0]
	if valid {
		a.next = append(a.next, p.tombIt.Key()...)
	} else {
		a.next = nil
	}
	return valid, err
}

// readTombs is readAccount's loop over the account's tombstones.
func (p *compactPass) readTombs() (bool, error) {
	a := &p.acct
	for {
		k := p.tombIt.Key()
		d, seq, err := ParseTombKey(k)
		if err != nil {
			return false, badState(k, err, "")
		}
		if d != a.did {
			return true, nil
		}
		if seq >= p.W {
			// The account's later tombstones are all above W (keys sort
			// by seq): skip to the next account.
			p.kbuf = append(append(append(p.kbuf[:0], PrefixTomb...), a.did...), keySep+1)
			return p.tombIt.SeekGE(p.kbuf), nil // the caller checks the iterator's error
		}
		a.tombstones++
		v := p.tombIt.Value()
		if len(v) == 0 || v[0] != tombNamed {
			t, err := DecodeTomb(v)
			if err != nil {
				return false, badState(k, err, "")
			}
			a.add(seq, t)
		}
		a.keep(k, v, p.opts.heldTombs)
		if !p.tombIt.Next() {
			// An unreadable rest must not leave half an account applied.
			if err := p.tombIt.Error(); err != nil {
				return false, p.readErr(PrefixTomb, err)
			}
			return false, nil
		}
	}
}

// keep copies the tombstone k, v into a.held while they fit in limit
// bytes, so the second read needs no seek back; past it, a.held is
// dropped and the second read reads tomb/ again.
func (a *accountTombs) keep(k, v []byte, limit int) {
	if a.spilled {
		return
	}
	if len(a.held)+len(k)+len(v)+2*binary.MaxVarintLen32 > limit {
		a.held, a.spilled = nil, true
		return
	}
	a.held = binary.AppendUvarint(a.held, uint64(len(k)))
	a.held = append(a.held, k...)
	a.held = binary.AppendUvarint(a.held, uint64(len(v)))
	a.held = append(a.held, v...)
}

// add keeps the unnamed tombstone t at seq.
func (a *accountTombs) add(seq uint64, t Tomb) {
	if t.Kind == KindAccount {
		a.reset = max(a.reset, seq)
		return
	}
	if a.recs == nil {
		a.recs = make(map[string]unnamedTomb)
	}
	id := t.Collection + "\x00" + t.RKey
	if cur, ok := a.recs[id]; !ok || seq > cur.seq {
		a.recs[id] = unnamedTomb{seq: seq, kind: t.Kind}
	}
}

// removeAccount adds the removal of everything p.acct's tombstones
// supersede, and of the tombstones, to the open batch: the reset's, the
// unnamed tombstones' (looked up in rec/), then, in the second read of
// its tombstones, the named tombstones'.
func (p *compactPass) removeAccount() error {
	a := &p.acct
	p.acctStart = p.b.Len()
	if a.reset > 0 {
		// Every record row of the account before the reset.
		prefix := AccountRecordPrefix(a.did)
		if err := p.removeRange(prefix, prefixEnd(prefix), a.reset); err != nil {
			return err
		}
	}
	if err := p.removeUnnamed(); err != nil {
		return err
	}
	if err := p.removeNamed(); err != nil {
		return err
	}
	p.res.Accounts++
	p.res.Tombstones += a.tombstones
	return nil
}

// removeUnnamed removes what p.acct's unnamed tombstones supersede, found
// in rec/, listing the rows in p.removed (the named tombstones may name
// them too).
func (p *compactPass) removeUnnamed() error {
	a := &p.acct
	clear(p.removed)
	if len(a.recs) == 0 {
		return nil
	}
	if p.removed == nil {
		p.removed = make(map[uint64]struct{})
	}
	p.lookup = true
	defer func() { p.lookup = false }()
	for id, r := range a.recs {
		if r.seq <= a.reset {
			continue // the reset covered it, its own entry included
		}
		collection, rkey, _ := strings.Cut(id, "\x00")
		prefix := AppendRecordPrefix(nil, a.did, collection, rkey)
		lo := binary.BigEndian.AppendUint64(append([]byte(nil), prefix...), a.reset)
		hi := binary.BigEndian.AppendUint64(prefix, r.seq)
		if err := p.removeRange(lo, hi, r.seq); err != nil {
			return err
		}
		if r.kind == KindDelete {
			// Nothing older is left: no entry means the record is absent.
			p.delete(hi, 1)
		}
	}
	return nil
}

// removeNamed reads p.acct's tombstones below W again, from its first:
// it deletes each (with one range deletion from rangeTombs of them), and
// removes the rows each named one names.
func (p *compactPass) removeNamed() error {
	a := &p.acct
	var err error
	if a.spilled {
		err = p.rereadTombs()
	} else {
		err = p.heldTombs()
	}
	if err != nil {
		return err
	}
	if a.tombstones >= rangeTombs {
		// Exactly the tombstones read: the writer adds none below W.
		_ = p.b.DeleteRange(TombKey(a.did, 0), TombKey(a.did, p.W), nil)
	}
	return nil
}

// heldTombs applies the tombstones the first read kept in p.acct.held.
func (p *compactPass) heldTombs() error {
	for b := p.acct.held; len(b) > 0; {
		n, w := binary.Uvarint(b)
		k := b[w : w+int(n)]
		b = b[w+int(n):]
		n, w = binary.Uvarint(b)
		v := b[w : w+int(n)]
		b = b[w+int(n):]
		if err := p.applyTomb(k, v); err != nil {
			return err
		}
	}
	return nil
}

// rereadTombs reads p.acct's tombstones below W again from its first and
// applies them. It leaves the tomb/ iterator past them: on the next
// account's first tombstone, or on the account's first at or above W,
// which the next readAccount skips (it applies none of them).
func (p *compactPass) rereadTombs() error {
	a := &p.acct
	it := p.tombIt
	valid := it.SeekGE(a.start)
	for ; valid; valid = it.Next() {
		k := it.Key()
		d, seq, err := ParseTombKey(k)
		if err != nil {
			return badState(k, err, "")
		}
		if d != a.did || seq >= p.W {
			break
		}
		if err := p.applyTomb(k, it.Value()); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return p.readErr(PrefixTomb, err)
	}
	return nil
}

// applyTomb deletes p.acct's tombstone k, v (unless a range deletion
// will) and, for a named one, removes what it names.
func (p *compactPass) applyTomb(k, v []byte) error {
	_, seq, err := ParseTombKey(k)
	if err != nil {
		return badState(k, err, "")
	}
	if p.acct.tombstones < rangeTombs {
		p.delete(k, len(v))
	}
	if v[0] == tombNamed {
		if err := p.removeNamedTomb(k, v, seq); err != nil {
			return err
		}
	}
	return p.checkSize()
}

// removeNamedTomb removes the rows the named tombstone v (key k, at seq)
// names that neither p.acct's reset nor its unnamed tombstones removed,
// and a delete's own rec/ entry.
func (p *compactPass) removeNamedTomb(k, v []byte, seq uint64) error {
	a := &p.acct
	t, err := DecodeTomb(v)
	if err != nil {
		return badState(k, err, "")
	}
	if len(t.Superseded) > 0 && t.Superseded[0].Seq >= seq {
		return badState(k, nil, "tombstone names row %d, not older than itself", t.Superseded[0].Seq)
	}
	if seq < a.reset {
		return nil // the reset covered it, its own entry included
	}
	for _, row := range t.Superseded {
		if _, done := p.removed[row.Seq]; done || row.Seq < a.reset {
			continue // an unnamed tombstone's lookup or the reset removed it
		}
		p.kbuf = AppendRecordKey(p.kbuf[:0], a.did, t.Collection, t.RKey, row.Seq)
		p.delete(p.kbuf, recordValueLen(row.Size))
		p.removeRow(a.did, t.Collection, row.Seq, row.Size)
	}
	if t.Kind == KindDelete {
		p.kbuf = AppendRecordKey(p.kbuf[:0], a.did, t.Collection, t.RKey, seq)
		p.delete(p.kbuf, len(recValueDelete))
	}
	return nil
}

// checkSize fails the pass when the account's removal has grown past
// MaxAccountBatch: its removal must be one batch, and Pebble cannot
// commit (nor this process hold) one without bound.
func (p *compactPass) checkSize() error {
	if n := p.b.Len() - p.acctStart; n > p.opts.MaxAccountBatch {
		return fmt.Errorf("archive: compaction: account %s: %w: its removal below watermark %d passed %d bytes (MaxAccountBatch %d)",
			p.acct.did, ErrCompactionTooLarge, p.W, n, p.opts.MaxAccountBatch)
	}
	return nil
}

// removeRange removes the rec/ entries in [lo, hi) whose seq is below
// before, with their ev/ rows (a delete's entry alone: delete rows are
// kept).
func (p *compactPass) removeRange(lo, hi []byte, before uint64) error {
	it := p.recIt
	for valid := it.SeekGE(lo); valid && bytes.Compare(it.Key(), hi) < 0; valid = it.Next() {
		k := it.Key()
		if did, collection, first, ok := splitRunKey(k); ok {
			if err := p.removeRun(k, it.Value(), string(did), string(collection), first, before); err != nil {
				return err
			}
			if err := p.checkSize(); err != nil {
				return err
			}
			continue
		}
		f, err := ParseRecordKey(k)
		if err != nil {
			return badState(k, err, "")
		}
		if f.Seq >= before {
			continue
		}
		if err := p.remove(k, it.Value(), f); err != nil {
			return err
		}
		if err := p.checkSize(); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return p.readErr(PrefixRecord, err)
	}
	return nil
}

// removeRun removes the members of a run (recrun.go) below before, with
// the run's entry when that is all of them. The run holds its rows' bytes
// only in all: a run removed in part counts its rows, not their bytes
// (CompactResult.Bytes). A member a named tombstone removed already is
// deleted again, harmlessly.
func (p *compactPass) removeRun(k, v []byte, did, collection string, first, before uint64) error {
	run, err := decodeRun(v)
	if err != nil {
		return badState(k, err, "")
	}
	whole := first+uint64(run.n) <= before
	for i := range run.n {
		if seq := first + uint64(i); seq < before {
			p.removeRow(did, collection, seq, 0)
			p.evBytes.add(seq, run.bytes/int64(run.n)) // the members' bytes, on average
		}
	}
	if whole {
		p.delete(k, len(v))
		p.res.Bytes += run.bytes
	}
	return nil
}

// remove removes one superseded rec/ entry and, for a create or update, its
// ev/ row, whose size the entry holds, with the row's replay index entries
// (xd/, xc/): the pass never reads ev/.
func (p *compactPass) remove(k, v []byte, f RecordKeyFields) error {
	deleted, size, err := DecodeRecordValue(v)
	if err != nil {
		return badState(k, err, "")
	}
	p.delete(k, len(v))
	if !deleted {
		p.removeRow(f.DID, f.Collection, f.Seq, size)
	}
	return nil
}

// removeRow removes the create or update row seq of did's collection, whose
// ev/ value has size bytes, with its replay index entries (xd/, xc/).
func (p *compactPass) removeRow(did, collection string, seq uint64, size int) {
	p.delete(EventKey(seq), size)
	p.xbuf = deleteReplayIndex(p.b, p.xbuf, did, collection, seq)
	p.res.Rows++
	p.res.Bytes += int64(size)
	p.evBytes.add(seq, int64(size))
	if seq >= p.liveFloor {
		p.forgotten = append(p.forgotten, seq)
	}
	p.lowest = min(p.lowest, seq)
	if p.lookup {
		p.removed[seq] = struct{}{}
	}
}

// delete adds the deletion of key, whose value has size bytes, to the open
// batch: a sized delete (it helps Pebble's space-reclaim heuristics) when
// the store's format has them (FormatDeleteSizedAndObsolete), a plain one
// otherwise: the store's format version is never raised here.
func (p *compactPass) delete(key []byte, size int) {
	if p.sized {
		_ = p.b.DeleteSized(key, uint32(size), nil)
	} else {
		_ = p.b.Delete(key, nil)
	}
}

// commit commits the open removal batch (not synced: see Compact), moves
// the compaction generation and forgets the removed rows in the live log.
func (p *compactPass) commit() error {
	if p.b.Empty() {
		return nil
	}
	p.res.LargestBatch = max(p.res.LargestBatch, p.b.Len())
	err := p.s.checkCommit("commit a compaction batch", p.b)
	if err == nil {
		err = commitWith(p.b, pebble.NoSync)
	}
	if err != nil {
		return p.s.persistErr("commit a compaction batch", err)
	}
	p.s.compactGen.Add(1)
	p.w.live.forget(p.forgotten)
	p.forgotten = p.forgotten[:0]
	p.liveFloor = p.w.live.floor()
	p.res.Batches++
	_ = p.b.Close()
	p.b = p.s.db.NewBatch()
	p.opts.Crash.Hit(crashpoint.CompactionBatch)
	return nil
}

// finish moves the watermark and clears the intent in one synced batch.
func (p *compactPass) finish() error {
	v, err := EncodeWatermark(p.W)
	if err != nil {
		return fmt.Errorf("archive: compaction watermark: %w", err)
	}
	b := p.s.db.NewBatch()
	defer b.Close()
	_ = b.Set(KeyCompaction, v, nil)
	_ = b.Delete(KeyCompactIntent, nil)
	if err := p.s.commit("commit the compaction watermark", b); err != nil {
		return err
	}
	p.opts.Crash.Hit(crashpoint.CompactionDone)
	return nil
}

// reclaim asks Pebble to compact the chunks of ev/ the pass removed much
// of (ReclaimShare) once it removed more than ReclaimBytes, adjacent ones
// together. The index entries it deleted (rec/, tomb/: no record bytes,
// a few percent of the store) are left to Pebble's own compactions, as
// are the ev/ rows it removed here and there; a manual compaction of the
// accounts' ranges rewrote the whole index at every pass. A cancelled ctx
// stops it between ranges (each compaction cannot be interrupted).
func (p *compactPass) reclaim(ctx context.Context) error {
	if p.opts.ReclaimBytes < 0 || p.res.Bytes <= p.opts.ReclaimBytes {
		return nil
	}
	var ranges [][2][]byte
	for _, c := range p.evBytes.sorted() {
		lo, hi := EventKey(max(c.lo, p.lowest)), EventKey(min(c.hi, p.W))
		if dense, err := p.dense(lo, hi, c.bytes); err != nil {
			return err
		} else if !dense {
			continue
		}
		if n := len(ranges); n > 0 && bytes.Equal(ranges[n-1][1], lo) {
			ranges[n-1][1] = hi
			continue
		}
		ranges = append(ranges, [2][]byte{lo, hi})
	}
	for _, r := range ranges {
		if ctx.Err() != nil {
			break // the pass is done: what is left leaves the disk as Pebble compacts
		}
		if err := p.s.db.Compact(r[0], r[1], true); err != nil {
			return p.s.persistErr("compaction: reclaim the removed range", err)
		}
		p.res.Reclaimed = true
	}
	return nil
}

// dense reports whether removed bytes are at least 1/ReclaimShare of the
// range [lo, hi)'s size on disk, as Pebble estimates it from its tables.
// A range with nothing on disk has nothing to reclaim: its rows are in
// the memtables, whose flush drops them.
func (p *compactPass) dense(lo, hi []byte, removed int64) (bool, error) {
	if bytes.Compare(lo, hi) >= 0 {
		return false, nil
	}
	if p.opts.ReclaimShare < 0 {
		return true, nil
	}
	n, err := p.s.db.EstimateDiskUsage(lo, hi)
	if err != nil {
		return false, p.s.persistErr("compaction: estimate the removed range's size", err)
	}
	return n > 0 && uint64(removed)*uint64(p.opts.ReclaimShare) >= n, nil
}

// seqChunks adds up bytes by seq chunk: the chunks are
// 1<<minChunkShift seqs wide (about one 64 MiB table of rows), and twice
// as wide each time more than maxSeqChunks are held, so a pass removing
// rows all over the archive holds a bounded map.
type seqChunks struct {
	shift uint
	bytes map[uint64]int64
}

const (
	minChunkShift = 16
	maxSeqChunks  = 1 << 14
)

// seqChunk is one chunk's seqs [lo, hi) and the bytes added in them.
type seqChunk struct {
	lo, hi uint64
	bytes  int64
}

func (c *seqChunks) add(seq uint64, n int64) {
	if c.bytes == nil {
		c.shift, c.bytes = minChunkShift, map[uint64]int64{}
	}
	c.bytes[seq>>c.shift] += n
	for len(c.bytes) > maxSeqChunks {
		wider := make(map[uint64]int64, len(c.bytes)/2)
		for k, v := range c.bytes {
			wider[k>>1] += v
		}
		c.shift++
		c.bytes = wider
	}
}

// sorted returns the chunks in seq order.
func (c *seqChunks) sorted() []seqChunk {
	out := make([]seqChunk, 0, len(c.bytes))
	for k, v := range c.bytes {
		out = append(out, seqChunk{lo: k << c.shift, hi: (k + 1) << c.shift, bytes: v})
	}
	slices.SortFunc(out, func(a, b seqChunk) int { return cmpSeq(a.lo, b.lo) })
	return out
}
