package archive_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
)

// reclaimWorld archives 40 accounts' live creates interleaved (each
// account's rows spread over the whole seq range, 100 bytes of record
// each) and one account's downloaded repo of 4,000 records of 1 KiB in
// one stretch, incompressible, then compacts the store whole: every row in
// the bottom level, as on a store that has run for months. It returns the
// store, its writer, a delete of an old record of each live account and
// the downloaded account's takedown.
func reclaimWorld(t *testing.T) (*archive.Store, *archive.Writer, []archive.Event, []archive.Event) {
	t.Helper()
	s := openStore(t, vfs.NewMem(), nil)
	w := startWriter(t, s)
	rng := rand.New(rand.NewPCG(7, 7))
	rev := 0
	ev := func(kind archive.Kind, did, rkey string, src archive.Source) archive.Event {
		rev++
		e := archive.Event{Kind: kind, DID: did, Collection: "app.bsky.feed.post", RKey: rkey,
			Rev: fmt.Sprintf("3m%011d", rev), Source: src}
		if kind != archive.KindDelete {
			body := make([]byte, 100)
			if src == archive.SourceBackfill {
				body = make([]byte, 1024)
			}
			for i := range body {
				body[i] = byte(rng.Uint32())
			}
			e.Record = append([]byte{0xa1, 0x61, 'b', 0x59, byte(len(body) >> 8), byte(len(body))}, body...)
			e.CID = []byte{1, 0x71, 0x12, 0x20, byte(rev), byte(rev >> 8), byte(rev >> 16)}
		}
		return e
	}
	var units [][]archive.Event
	for i := range 500 {
		var u []archive.Event
		for a := range 40 {
			u = append(u, ev(archive.KindCreate, fmt.Sprintf("did:plc:live%02d", a), fmt.Sprintf("3l%011d", i), archive.SourceLive))
		}
		units = append(units, u)
		if i == 250 {
			var dl []archive.Event
			for r := range 4000 {
				dl = append(dl, ev(archive.KindCreate, "did:plc:download", fmt.Sprintf("3l%011d", r), archive.SourceBackfill))
			}
			units = append(units, dl)
		}
	}
	applyUnits(t, w, units)
	if err := s.DB().Compact([]byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	var scattered, later []archive.Event
	for a := range 40 {
		// An old record of every live account deleted: the rows the pass
		// removes are spread over the whole archive.
		scattered = append(scattered, ev(archive.KindDelete, fmt.Sprintf("did:plc:live%02d", a), fmt.Sprintf("3l%011d", a*12), archive.SourceLive))
	}
	later = append(later, archive.Event{Kind: archive.KindAccount, DID: "did:plc:download", Status: "takendown", Source: archive.SourceLive})
	return s, w, scattered, later
}

// compactedBytes is what Pebble's compactions have written so far.
func compactedBytes(s *archive.Store) uint64 {
	m := s.DB().Metrics()
	var n uint64
	for _, l := range m.Levels {
		n += l.BytesCompacted
	}
	return n
}

// TestCompactReclaimCostsWhatItRemoves: the pass's manual compaction (past
// ReclaimBytes) rewrites what its removal makes worth rewriting, not the
// archive. Scattered deletes of old records (40 of them over the archive)
// are left to Pebble's own compactions, which the sized
// deletes point at; a taken-down downloaded account (4 MiB of consecutive
// rows) leaves the disk at once.
func TestCompactReclaimCostsWhatItRemoves(t *testing.T) {
	s, w, scattered, takedown := reclaimWorld(t)
	defer s.Close()
	defer w.Close()

	applyUnits(t, w, [][]archive.Event{scattered})
	before := compactedBytes(s)
	res := compact(t, s, w, archive.CompactOptions{ReclaimBytes: 1})
	if res.Rows != len(scattered) {
		t.Fatalf("the pass removed %d rows, want the %d deleted records' creates", res.Rows, len(scattered))
	}
	if got := compactedBytes(s) - before; got > 8*uint64(res.Bytes) {
		t.Fatalf("a pass removing %d rows (%d bytes) spread over the archive had Pebble's compactions write %d bytes: want at most %d (8 × what it removed), not a rewrite of the archive",
			res.Rows, res.Bytes, got, 8*res.Bytes)
	}

	applyUnits(t, w, [][]archive.Event{takedown})
	lo, hi := archive.EventKey(0), archive.EventKey(1<<40)
	disk := func() uint64 {
		n, err := s.DB().EstimateDiskUsage(lo, hi)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	held := disk()
	before = compactedBytes(s)
	res = compact(t, s, w, archive.CompactOptions{ReclaimBytes: 1})
	if res.Rows != 4000 || !res.Reclaimed {
		t.Fatalf("the takedown's pass: %+v, want 4000 rows removed and the disk reclaimed", res)
	}
	if left := disk(); held-left < uint64(res.Bytes)*3/4 {
		t.Fatalf("the takedown's pass removed %d bytes of rows and ev/ takes %d bytes on disk, was %d: want them gone from the disk at once",
			res.Bytes, left, held)
	}
	if got := compactedBytes(s) - before; got > 8*uint64(res.Bytes) {
		t.Fatalf("the takedown's pass removing %d bytes had Pebble's compactions write %d bytes: want at most %d",
			res.Bytes, got, 8*res.Bytes)
	}
}
