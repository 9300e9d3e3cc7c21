package archive_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
)

// liveHeap is the live heap after two collections (the second frees
// what sync.Pools kept through the first).
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// coveredRareRows writes n record rows of recordBytes each, one in each of
// n collections (com.example.c<i>.record), and gives every one's xc/ entry
// a covering copy of its row, as the writer gives a rare collection's
// entry while its copy budget allows (a hostile account writing large
// records into many rare collections). It returns the collections' ranges
// (in the order of their rows), the record and the bound above the last
// row.
func coveredRareRows(t *testing.T, s *archive.Store, n, recordBytes int) ([]archive.IndexRange, []byte, uint64) {
	t.Helper()
	w := startWriter(t, s)
	defer w.Close()
	record := make([]byte, recordBytes) // incompressible: the row is as large
	r := rand.New(rand.NewPCG(1, 2))
	for i := range record {
		record[i] = byte(r.Uint32())
	}
	var ranges []archive.IndexRange
	var units [][]archive.Event
	for i := range n {
		c := fmt.Sprintf("com.example.c%05d.record", i)
		ranges = append(ranges, archive.IndexRange{Family: archive.PrefixByCollection, Name: c})
		units = append(units, []archive.Event{{Kind: archive.KindCreate, DID: fmt.Sprintf("did:plc:%06d", i), Collection: c,
			RKey: "3k0000000000", Rev: fmt.Sprintf("3l%011d", i+1), CID: []byte{1, 0x71, 0x12, 0x20, 1}, Record: record,
			Source: archive.SourceBackfill}})
	}
	rows := applyUnits(t, w, units)
	b := s.DB().NewBatch()
	for _, ev := range rows {
		v, closer, err := s.DB().Get(archive.EventKey(ev.Seq))
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Set(archive.AppendCollectionIndexKey(nil, ev.Collection, ev.Seq), v, nil)
		closer.Close()
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatal(err)
	}
	return ranges, record, rows[len(rows)-1].Seq + 1
}

// TestIndexIterHeapBounded: an IndexIter over N ranges holds at most
// 64 KiB per Pebble iterator it opens (N + 1 up to 32 ranges, else 2)
// and 128 bytes per range (names of 25 bytes; twice that under the race
// detector), whatever the size of the rows their current entries copy. Each
// range is a rare collection whose entry carries a covering copy of a
// 64 KiB row: a head that kept its entry's copy would hold N × 64 KiB.
// Over 1,000 and 33 ranges (one shared index iterator) and over 32 and 1
// (each its own), opened and after a row yielded; the rows yielded are
// the N rows in seq order, each its own, from their copies.
func TestIndexIterHeapBounded(t *testing.T) {
	const rowBytes = 64 << 10
	s, err := archive.Open(t.TempDir(), archive.Options{FS: vfs.Default, Logger: quiet, CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, record, to := coveredRareRows(t, s, 1000, rowBytes)
	for _, n := range []int{1000, 33, 32, 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ranges := all[:n]
			iters, per, perRange := 2, int64(64<<10), int64(128)
			if n <= 32 {
				iters = n + 1
			}
			if archive.RaceEnabled {
				per, perRange = 128<<10, 256
			}
			bound := int64(iters)*per + int64(n)*perRange
			// A first pass warms what Pebble keeps (its caches, pools).
			x, err := s.IndexedEvents(ranges, 0, to)
			if err != nil {
				t.Fatal(err)
			}
			var got int
			var last uint64
			for x.Next() {
				ev := x.Event()
				if ev.Seq <= last || ev.Collection != ranges[got].Name || !bytes.Equal(ev.Record, record) {
					t.Fatalf("row %d: seq %d after %d, collection %s, record %d bytes (its own: %v); want %s's row",
						got, ev.Seq, last, ev.Collection, len(ev.Record), bytes.Equal(ev.Record, record), ranges[got].Name)
				}
				last = ev.Seq
				got++
			}
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
			if got != n || x.Copies() != n {
				t.Fatalf("%d ranges of one row each: %d rows, %d from copies", n, got, x.Copies())
			}
			before := liveHeap()
			x, err = s.IndexedEvents(ranges, 0, to)
			if err != nil {
				t.Fatal(err)
			}
			defer x.Close()
			opened := liveHeap() - before
			if !x.Next() {
				t.Fatalf("no row: %v", x.Err())
			}
			stepped := liveHeap() - before
			runtime.KeepAlive(x)
			t.Logf("an IndexIter over %d ranges of %d-byte rows holds %d bytes opened, %d after a row (bound %d)", n, rowBytes, opened, stepped, bound)
			if opened > bound || stepped > bound {
				t.Errorf("an IndexIter over %d ranges whose entries copy %d-byte rows holds %d bytes of heap opened, %d after a row: over %d (%d iterators and %d ranges)",
					n, rowBytes, opened, stepped, bound, iters, n)
			}
		})
	}
}
