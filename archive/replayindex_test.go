package archive_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
)

// TestEstimateIndex: below its limit the estimate is an exact count of the
// range's entries in [from, to); past it, never below the limit.
func TestEstimateIndex(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	defer w.Close()
	var units [][]archive.Event
	var unit []archive.Event
	for i := 0; i < 8000; i++ {
		c := "app.bsky.feed.like"
		if i%4 == 0 {
			c = "app.bsky.feed.post"
		}
		unit = append(unit, archive.Event{Kind: archive.KindCreate, DID: fmt.Sprintf("did:plc:%06d", i%97), Collection: c,
			RKey: fmt.Sprintf("3k%011d", i), Rev: fmt.Sprintf("3l%011d", i+1), CID: []byte{1, 0x71, 0x12, 0x20, 1}, Record: []byte{0xa0},
			Source: archive.SourceBackfill})
		if len(unit) == 500 {
			units, unit = append(units, unit), nil
		}
	}
	rows := applyUnits(t, w, units)
	posts := []archive.IndexRange{{Family: archive.PrefixByCollection, Name: "app.bsky.feed.post"}}
	mid := rows[len(rows)/2].Seq
	for _, tc := range []struct {
		from, to uint64
		want     uint64
	}{{0, mid, 1000}, {mid, rows[len(rows)-1].Seq + 1, 1000}, {0, 1, 0}, {mid, mid, 0}} {
		n, exact, err := s.EstimateIndex(posts, tc.from, tc.to, 5000)
		if err != nil || !exact || n != tc.want {
			t.Fatalf("[%d, %d): %d (exact %v), %v; want exactly %d", tc.from, tc.to, n, exact, err, tc.want)
		}
	}
	// Past the limit: never below it (a plan asking "fewer than limit?"
	// gets no), exact false, whether the entries are in memtables or, after
	// a flush, in sstables too small to extrapolate from.
	for _, flush := range []bool{false, true} {
		if flush {
			if err := s.DB().Flush(); err != nil {
				t.Fatal(err)
			}
			if err := s.DB().Compact([]byte{0}, bytes.Repeat([]byte{0xff}, 8), true); err != nil {
				t.Fatal(err)
			}
		}
		n, exact, err := s.EstimateIndex(posts, 0, rows[len(rows)-1].Seq+1, 200)
		if err != nil || exact || n < 200 {
			t.Fatalf("past the limit (flushed %v): %d (exact %v), %v", flush, n, exact, err)
		}
	}
}
