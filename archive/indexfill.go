package archive

// This file owns the index backfill: a store archived before the writer
// kept the compaction index (rec/, tomb/) holds ev/ rows without their
// entries. meta/index (KeyIndex) records which: the rows from Next up to
// End. FillIndex writes their entries, exactly as the writer would have
// (appendIndex), in bounded batches, each moving Next in the same synced
// batch, so a crash resumes where the last batch ended. Compaction does
// not run until the backfill is done (Compact): a tombstone above End can
// supersede a row below it, and a pass that applied it before that row's
// rec/ entry existed would delete the tombstone and leave the row for
// ever, under a watermark that says it is gone.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"
)

// DefaultIndexFillRows is the ev/ rows one index backfill batch reads.
const DefaultIndexFillRows = 4096

// IndexMarker is meta/index: the ev/ rows in [Next, End) lack their index
// entries.
type IndexMarker struct {
	Next uint64 // the first row not yet indexed
	End  uint64 // the first seq the writer indexed itself
}

// Done reports whether the index covers every ev/ row.
func (m IndexMarker) Done() bool { return m.Next >= m.End }

// EncodeIndexMarker encodes [0x01][uint64 LE next][uint64 LE end].
func EncodeIndexMarker(m IndexMarker) []byte {
	b := make([]byte, 17)
	b[0] = codecV1
	binary.LittleEndian.PutUint64(b[1:], m.Next)
	binary.LittleEndian.PutUint64(b[9:], m.End)
	return b
}

// DecodeIndexMarker accepts exactly what EncodeIndexMarker produces.
func DecodeIndexMarker(b []byte) (IndexMarker, error) {
	if len(b) != 17 || b[0] != codecV1 {
		return IndexMarker{}, malformed("index marker: %d bytes, want [0x01][next][end]", len(b))
	}
	return IndexMarker{Next: binary.LittleEndian.Uint64(b[1:]), End: binary.LittleEndian.Uint64(b[9:])}, nil
}

// ErrIndexPending: the index backfill has not finished (meta/index), so
// the record index lacks the entries of older rows and Store.AccountRecords
// cannot say which records an account holds. A whole-repo replacement is
// deferred until it has (its diff would miss the older records: no delete
// for a record the snapshot lacks, a create again for one it keeps).
var ErrIndexPending = errors.New("the record index is still being backfilled")

// IndexReady returns nil once the record index covers every ev/ row, and
// an error matching ErrIndexPending while the index backfill has rows left
// (or meta/index is absent or malformed: then it matches
// ErrCompactionState too, which the compaction owner reports); a read
// error otherwise.
func (s *Store) IndexReady() error { return indexReady(s.db) }

func indexReady(r pebble.Reader) error {
	m, err := get(r, KeyIndex, DecodeIndexMarker)
	switch {
	case errors.Is(err, ErrNotFound) || errors.Is(err, ErrMalformed):
		return fmt.Errorf("archive: %w: %w", ErrIndexPending, compactionErr(err))
	case err != nil:
		return fmt.Errorf("archive: read the index marker: %w", err)
	case !m.Done():
		return fmt.Errorf("archive: %w: rows %d to %d are not indexed yet", ErrIndexPending, m.Next, m.End-1)
	}
	return nil
}

// IndexMarker reads meta/index. A store without it (read-only, or opened
// before Open wrote it) reports every row from 1 to the tip unindexed, as
// Open then writes it.
func (s *Store) IndexMarker() (IndexMarker, error) { return s.indexMarker(KeyIndex) }

// ReplayIndexMarker reads meta/index_replay, the replay index's coverage,
// as IndexMarker reads meta/index.
func (s *Store) ReplayIndexMarker() (IndexMarker, error) { return s.indexMarker(KeyReplayIndex) }

func (s *Store) indexMarker(key []byte) (IndexMarker, error) {
	m, err := get(s.db, key, DecodeIndexMarker)
	if errors.Is(err, ErrNotFound) {
		tip, err := s.Tip()
		return IndexMarker{Next: 1, End: tip + 1}, err
	}
	if err != nil {
		return m, compactionErr(err)
	}
	return m, nil
}

// markIndex writes meta/index and meta/index_replay when they are absent:
// for a new store (tip 0) covered, for an older store the rows up to its
// tip unindexed (the writer indexes every row after it). A store without
// meta/index first gets its older replacements' accounts marked for a new
// one (markResynced), in batches of their own: the markers are written
// after the last of them, so a crash before leaves meta/index absent and
// the next open marks again.
func (s *Store) markIndex(now func() time.Time) error {
	var absent [][]byte
	for _, k := range [][]byte{KeyIndex, KeyReplayIndex} {
		switch _, err := get(s.db, k, DecodeIndexMarker); {
		case isRead(err):
			return fmt.Errorf("archive: read the index marker %s: %w", k, err)
		case errors.Is(err, ErrNotFound):
			absent = append(absent, k)
		} // present (a malformed one is the backfill's to report)
	}
	if len(absent) == 0 {
		return nil
	}
	tip, err := s.Tip()
	if err != nil {
		return err
	}
	marked := 0
	if tip > 0 && bytes.Equal(absent[0], KeyIndex) {
		// Open waits for this read: say so before it, not after.
		p := s.startup.Begin(s.log, now, StepAnnouncement{Step: StepOlderReplacements,
			Line:  "reading every archived row once for the accounts resynced before the compaction index (a store from an older build; about a quarter of a CPU-microsecond a row, BenchmarkOpenMarksOlderReplacements)",
			Args:  []any{"rows", tip},
			Still: "still reading every archived row for the accounts resynced before the compaction index; the store opens when it ends", Total: int64(tip)})
		marked, err = s.markResynced(tip, p)
		p.End()
		if err != nil {
			return err
		}
	}
	m := IndexMarker{Next: 1, End: tip + 1}
	b := s.db.NewBatch()
	defer b.Close()
	for _, k := range absent {
		_ = b.Set(k, EncodeIndexMarker(m), nil)
	}
	if err := commitSynced(b); err != nil {
		return s.persistErr("write the index marker", err)
	}
	if marked > 0 {
		s.log.Info("marked for a replacement the accounts resynced before the compaction index (their older replacements reset the account)", "accounts", marked)
	}
	return nil
}

// ResetIndex drops the compaction index, every rec/ and tomb/ entry, and
// marks every ev/ row unindexed (meta/index = {1, tip+1}) in one synced
// batch, so that the next index backfill rebuilds it from the rows
// themselves, as for a store older than the index: the recovery of a
// malformed meta/index, rec/ or tomb/ value, which halts every pass until
// it is gone. Rows an earlier pass removed have no entries to rebuild, and
// their tombstones' entries come back without names, which the next pass
// applies by a rec/ lookup that finds nothing older. The store must have no
// writer: it would index its newer rows against the old marker.
func (s *Store) ResetIndex() (IndexMarker, error) {
	return s.resetIndex("reset the compaction index", KeyIndex, PrefixRecord, PrefixTomb)
}

// ResetReplayIndex is ResetIndex for the replay index (xc/, xd/, xm/) and
// meta/index_replay: the recovery of a malformed marker. The entries go
// with it: the backfill writes one entry per row, and a row the writer
// indexed in a run would then have two.
func (s *Store) ResetReplayIndex() (IndexMarker, error) {
	return s.resetIndex("reset the replay index", KeyReplayIndex, PrefixByCollection, PrefixByAccount, PrefixMarker)
}

func (s *Store) resetIndex(op string, marker []byte, families ...[]byte) (IndexMarker, error) {
	tip, err := s.Tip()
	if err != nil {
		return IndexMarker{}, err
	}
	m := IndexMarker{Next: 1, End: tip + 1}
	b := s.db.NewBatch()
	defer b.Close()
	for _, p := range families {
		_ = b.DeleteRange(p, prefixEnd(p), nil)
	}
	_ = b.Set(marker, EncodeIndexMarker(m), nil)
	if err := s.commit(op, b); err != nil {
		return IndexMarker{}, err
	}
	return m, nil
}

// IndexFillResult is what one FillIndex call did.
type IndexFillResult struct {
	Marker   IndexMarker // where it ended
	Rows     int         // ev/ rows indexed
	Batches  int         // synced batches committed
	Duration time.Duration
}

// FillIndex runs the index backfill to its end: batches of at most rows
// ev/ rows (≤ 0: DefaultIndexFillRows) from meta/index's Next, each
// committed synced with Next moved past it; progress (may be nil) sees the
// marker after each batch. A malformed ev/ row or marker stops it with an
// error matching ErrCompactionState naming the key; a cancelled ctx stops
// it between batches.
func (s *Store) FillIndex(ctx context.Context, rows int, progress func(IndexMarker)) (IndexFillResult, error) {
	return s.fill(ctx, KeyIndex, rows, progress, func(buf []byte, idx []idxEntry, ev *Event, size int) ([]byte, []idxEntry, error) {
		buf, idx, _, err := appendIndex(buf, idx, ev, size)
		return buf, idx, err
	})
}

// FillReplayIndex is FillIndex for the replay index (xc/, xd/, xm/) and
// its marker, meta/index_replay: a store archived before the writer kept
// it. Until it is done a filtered replay scans. It must not run
// concurrently with a compaction pass (the node's compaction owner runs
// both in its one goroutine): a pass removing a row between this reading
// it and committing its entries would leave them dangling.
func (s *Store) FillReplayIndex(ctx context.Context, rows int, progress func(IndexMarker)) (IndexFillResult, error) {
	return s.fill(ctx, KeyReplayIndex, rows, progress, func(buf []byte, idx []idxEntry, ev *Event, _ int) ([]byte, []idxEntry, error) {
		buf, idx = appendReplayIndex(buf, idx, ev)
		return buf, idx, nil
	})
}

// indexer appends one row's entries of an index.
type indexer func(buf []byte, idx []idxEntry, ev *Event, size int) ([]byte, []idxEntry, error)

func (s *Store) fill(ctx context.Context, key []byte, rows int, progress func(IndexMarker), add indexer) (IndexFillResult, error) {
	start := time.Now()
	if rows <= 0 {
		rows = DefaultIndexFillRows
	}
	var res IndexFillResult
	m, err := s.indexMarker(key)
	if err != nil {
		return res, fmt.Errorf("archive: index backfill: %w", err)
	}
	var buf []byte
	var idx []idxEntry
	for !m.Done() {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		var n int
		if m, n, err = s.fillBatch(key, m, rows, buf[:0], idx[:0], add); err != nil {
			return res, err
		}
		res.Rows += n
		res.Batches++
		if progress != nil {
			progress(m)
		}
	}
	res.Marker, res.Duration = m, time.Since(start)
	return res, nil
}

// fillBatch indexes up to rows ev/ rows from m.Next and commits them with
// the marker key moved past them, synced.
func (s *Store) fillBatch(key []byte, m IndexMarker, rows int, buf []byte, idx []idxEntry, add indexer) (IndexMarker, int, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: EventKey(m.Next), UpperBound: EventKey(m.End)})
	if err != nil {
		return m, 0, s.persistErr("index backfill: read ev/", err)
	}
	defer it.Close()
	next, n := m.End, 0
	var ev Event
	for ok := it.First(); ok; ok = it.Next() {
		seq, err := ParseSeqKey(PrefixEvent, it.Key())
		if err != nil {
			return m, 0, badState(it.Key(), err, "")
		}
		if n == rows {
			next = seq
			break
		}
		if err := DecodeEvent(it.Value(), seq, &ev); err != nil {
			return m, 0, badState(it.Key(), err, "")
		}
		if buf, idx, err = add(buf, idx, &ev, len(it.Value())); err != nil {
			return m, 0, badState(it.Key(), err, "")
		}
		n++
	}
	if err := it.Error(); err != nil {
		return m, 0, s.persistErr("index backfill: read ev/", err)
	}
	m.Next = next
	var t tombResolver // a record's tombstone names what it supersedes, as the writer's
	if buf, idx, err = t.appendRecordTombs(s.db, buf, idx); err != nil {
		return m, 0, s.resolveErr(err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	t.setIndex(b, buf, idx)
	_ = b.Set(key, EncodeIndexMarker(m), nil)
	if err := s.commit("commit an index backfill batch", b); err != nil {
		return m, 0, err
	}
	return m, n, nil
}
