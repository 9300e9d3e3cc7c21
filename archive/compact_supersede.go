package archive

// This file owns the resolution of what a record's tombstone supersedes,
// at the time its row is written: the writer (and the index backfill)
// names, in the tomb/ entry, the create and update rows of the record that
// the update or delete supersedes, so a compaction pass removes them blind
// and reads no rec/ block per tombstone.
//
// The rows a tombstone names: going back from it through the record's
// rows, every create and update row up to and including the first update
// (that update's own tombstone named what is older), stopping before a
// delete (its tombstone named what is older; its own rec/ entry goes with
// its tombstone). Usually that is the one current row; a create of a
// record that is still current (hostile or replayed upstream data) makes
// the next tombstone name both. A row written before updates had their own
// rec/ tag reads as a create: the walk goes on past it, and may name a row
// an older tombstone removes too (removing it twice is harmless, but
// counted twice: CompactResult.Bytes). The rows of the same batch (not in
// Pebble yet) are resolved from the batch's own sorted entries, the older
// ones by one seek in rec/ per record (recent records are in the memtable
// or the block cache).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble"
)

// tombResolver appends the record tombstones of a batch of index entries.
// Its buffers are reused from batch to batch (no allocation once grown).
type tombResolver struct {
	names  []SupersededRow
	runKey []byte          // runCreates' bound
	hits   []SupersededRow // runCreates' result
	runs   []idxEntry      // foldRuns' run entries
	spans  []span          // sortIndex's runs
	order  []idxEntry      // sortIndex's moved entries
}

// appendRecordTombs sorts idx (entries in buf) and appends a tombstone for
// each update and delete rec/ entry among them. With r nil the
// tombstones are unnamed (the pass looks the superseded rows up): the
// writer's choice while the index backfill has not covered the older rows,
// whose rec/ entries a walk would miss. With r, each is named: the batch's
// own older entries of the record, then r's (rows older than the batch's
// first of the record, so the backfill never sees the writer's newer rows).
func (t *tombResolver) appendRecordTombs(r pebble.Reader, buf []byte, idx []idxEntry) ([]byte, []idxEntry, error) {
	t.sortIndex(buf, idx)
	var it *pebble.Iterator
	defer func() {
		if it != nil {
			_ = it.Close()
		}
	}()
	n, end := len(idx), 0
	for end < n && hasPrefix(buf[idx[end].k0:idx[end].k1], PrefixRecord) {
		end++
	}
	for i := 0; i < end; {
		j := i + 1
		for j < end && sameRecord(buf[idx[i].k0:idx[i].k1], buf[idx[j].k0:idx[j].k1]) {
			j++
		}
		t.names = t.names[:0]
		based := r == nil // nothing to look up
		for e := i; e < j; e++ {
			kind, size, err := decodeRecordValue(buf[idx[e].k1:idx[e].v1])
			if err != nil {
				return buf, idx, fmt.Errorf("archive: record index entry %s: %w", keyString(buf[idx[e].k0:idx[e].k1]), err)
			}
			seq := binary.BigEndian.Uint64(buf[idx[e].k1-8 : idx[e].k1])
			if kind == KindCreate {
				t.names = slices.Insert(t.names, 0, SupersededRow{Seq: seq, Size: size})
				continue
			}
			if !based {
				if it == nil {
					if it, err = r.NewIter(nil); err != nil {
						return buf, idx, fmt.Errorf("archive: read rec/: %w", err)
					}
				}
				first := buf[idx[i].k0:idx[i].k1]
				if t.names, err = t.older(it, r, first, t.names); err != nil {
					return buf, idx, err
				}
				based = true
			}
			if buf, idx, err = t.appendTomb(buf, idx, e, kind, r != nil); err != nil {
				return buf, idx, err
			}
			t.names = t.names[:0]
			if kind == KindUpdate {
				t.names = append(t.names, SupersededRow{Seq: seq, Size: size})
			}
		}
		i = j
	}
	return buf, idx, nil
}

// sameRecord reports whether the rec/ keys a and b are of one record.
func sameRecord(a, b []byte) bool {
	return len(a) == len(b) && bytes.Equal(a[:len(a)-8], b[:len(b)-8])
}

// older appends to names the rows of key's record older than key that a
// tombstone at key supersedes (the walk the file comment describes),
// newest first: it steps back from key and stops at the first delete or
// after the first update, so it reads what it names and one entry more,
// however many versions the record has kept (compaction off, or a pass
// not yet run). The record's creates that runs hold (recrun.go) between
// where the walk stopped and key are named too, read through r
// (runCreates).
func (t *tombResolver) older(it *pebble.Iterator, r pebble.Reader, key []byte, names []SupersededRow) ([]SupersededRow, error) {
	prefix := key[:len(key)-8]
	inRecord := func(k []byte) bool { return len(k) == len(key) && bytes.HasPrefix(k, prefix) }
	var stop uint64 // the delete or update the walk stopped at
	valid := it.SeekLT(key)
	for ; valid && inRecord(it.Key()); valid = it.Prev() {
		k := it.Key()
		kind, size, err := decodeRecordValue(it.Value())
		if err != nil {
			return names, &KeyError{Key: keyString(k), Kind: ErrMalformed, Err: err}
		}
		seq := binary.BigEndian.Uint64(k[len(k)-8:])
		if kind == KindDelete {
			stop = seq
			break
		}
		names = append(names, SupersededRow{Seq: seq, Size: size})
		if kind == KindUpdate {
			stop = seq
			break
		}
	}
	// Step back to the entry before the record's, unless the record keeps
	// many versions (then runCreates seeks).
	for i := 0; valid && inRecord(it.Key()) && i < maxVersionSteps; i++ {
		valid = it.Prev()
	}
	if err := it.Error(); err != nil {
		return names, &KeyError{Key: keyString(prefix), Kind: ErrRead, Err: err}
	}
	did, collection, rkey, seq, err := splitRecordKey(key)
	if err != nil {
		return names, &KeyError{Key: keyString(key), Kind: ErrMalformed, Err: err}
	}
	hits, err := t.runCreates(it, valid && !inRecord(it.Key()), valid, r, did, collection, rkey, stop, seq)
	if err != nil || len(hits) == 0 {
		return names, err
	}
	names = append(names, hits...)
	slices.SortFunc(names, func(a, b SupersededRow) int { return -cmpSeq(a.Seq, b.Seq) })
	return names, nil
}

// maxVersionSteps bounds the entries older steps over to reach the entry
// before a record's.
const maxVersionSteps = 16

// appendTomb appends the tombstone of the update or delete rec/ entry
// idx[e], naming t.names when named.
func (t *tombResolver) appendTomb(buf []byte, idx []idxEntry, e int, kind Kind, named bool) ([]byte, []idxEntry, error) {
	did, collection, rkey, seq, err := splitRecordKey(buf[idx[e].k0:idx[e].k1])
	if err != nil {
		return buf, idx, err
	}
	// did, collection and rkey alias buf's entries below len(buf): an
	// append that moves buf copies from them.
	k0 := len(buf)
	buf = appendTombKey(buf, did, seq)
	k1 := len(buf)
	buf = appendTomb(buf, kind, collection, rkey, named, t.names)
	return buf, append(idx, idxEntry{k0: k0, k1: k1, v1: len(buf)}), nil
}

// resolveErr classifies an appendRecordTombs error: a malformed rec/ entry
// is ErrCompactionState naming the key (the caller stops: it cannot say
// what the tombstone supersedes), a read failure our persistence error.
func (s *Store) resolveErr(err error) error {
	if errors.Is(err, ErrMalformed) {
		return fmt.Errorf("archive: name the superseded rows: %w", compactionErr(err))
	}
	return s.persistErr("name the superseded rows: read rec/", err)
}
