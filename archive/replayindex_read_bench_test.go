package archive_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
)

// BenchmarkIndexedEvents measures the replay index's reads (an IndexIter
// over the whole span, drained) on a store of 300,000 rows written by the
// writer, flushed and compacted: 80 % in four common collections, 19 % in
// 200 rare ones (each one row in 1,000: their entries carry covering
// copies while the writer's budget allows), 1 % identity rows, 300
// accounts. Cases: one rare collection and the identity markers (two
// ranges, each its own iterator), 200 rare collections and the markers
// (one shared iterator), 10 accounts (their own iterators), 100 accounts
// (shared). rows/s is the rows yielded per second.
func BenchmarkIndexedEvents(b *testing.B) {
	const n = 300_000
	s, err := archive.Open(b.TempDir(), archive.Options{FS: vfs.Default, Logger: quiet, CacheSize: 64 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w := startWriter(b, s)
	r := rand.New(rand.NewPCG(3, 4))
	rare := func(i int) string { return fmt.Sprintf("com.example.rare%03d.entry", i) }
	did := func(i int) string { return fmt.Sprintf("did:plc:%06d", i) }
	var units [][]archive.Event
	unit := make([]archive.Event, 0, 1000)
	for i := range n {
		ev := archive.Event{Kind: archive.KindCreate, DID: did(r.IntN(300)), Collection: benchColls[r.IntN(4)],
			RKey: fmt.Sprintf("3k%011d", i), Rev: fmt.Sprintf("3l%011d", i+1), CID: []byte{1, 0x71, 0x12, 0x20, 1},
			Record: make([]byte, 20+r.IntN(200)), Source: archive.SourceBackfill}
		switch x := r.IntN(100); {
		case x < 1:
			ev = archive.Event{Kind: archive.KindIdentity, DID: ev.DID, Handle: "u.test", Source: archive.SourceLive}
		case x < 20:
			ev.Collection = rare(r.IntN(200))
		}
		if unit = append(unit, ev); len(unit) == cap(unit) {
			units, unit = append(units, unit), make([]archive.Event, 0, 1000)
		}
	}
	rows := applyUnits(b, w, units)
	w.Close()
	if err := s.DB().Flush(); err != nil {
		b.Fatal(err)
	}
	if err := s.DB().Compact([]byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	to := rows[len(rows)-1].Seq + 1
	ident := archive.IndexRange{Family: archive.PrefixMarker, Name: archive.MarkerName(archive.KindIdentity)}
	acct := archive.IndexRange{Family: archive.PrefixMarker, Name: archive.MarkerName(archive.KindAccount)}
	colls := func(k int) []archive.IndexRange {
		var out []archive.IndexRange
		for i := range k {
			out = append(out, archive.IndexRange{Family: archive.PrefixByCollection, Name: rare(i)})
		}
		return append(out, ident, acct)
	}
	dids := func(k int) []archive.IndexRange {
		var out []archive.IndexRange
		for i := range k {
			out = append(out, archive.IndexRange{Family: archive.PrefixByAccount, Name: did(i)})
		}
		return out
	}
	for _, c := range []struct {
		name   string
		ranges []archive.IndexRange
	}{{"rare1", colls(1)}, {"rare200", colls(200)}, {"dids10", dids(10)}, {"dids100", dids(100)}} {
		b.Run(c.name, func(b *testing.B) {
			var got, copies int
			for b.Loop() {
				x, err := s.IndexedEvents(c.ranges, 0, to)
				if err != nil {
					b.Fatal(err)
				}
				got = 0
				for x.Next() {
					got++
				}
				copies = x.Copies()
				if err := x.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(got)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
			b.ReportMetric(float64(got), "rows")
			b.ReportMetric(float64(copies), "copies")
		})
	}
}

// benchColls are four common collections.
var benchColls = [4]string{"app.bsky.feed.like", "app.bsky.feed.post", "app.bsky.feed.repost", "app.bsky.graph.follow"}
