package archive_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
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

// coverWorld writes n rows: two common collections, a rare one (one row
// in 250, each rewritten by an update later on, so compaction removes the
// create) and identity rows (one in 300); it returns the rows as archived.
func coverWorld(t *testing.T, w *archive.Writer, n int) []archive.Event {
	t.Helper()
	const rare = "com.whtwnd.blog.entry"
	var units [][]archive.Event
	var unit []archive.Event
	var rareKeys []archive.Event
	for i := 0; i < n; i++ {
		did := fmt.Sprintf("did:plc:%06d", i%97)
		ev := archive.Event{Kind: archive.KindCreate, DID: did, Collection: "app.bsky.feed.like", RKey: fmt.Sprintf("3k%011d", i),
			Rev: fmt.Sprintf("3l%011d", i+1), CID: []byte{1, 0x71, 0x12, 0x20, 1}, Record: bytes.Repeat([]byte{0xa0}, 1+i%40),
			Source: archive.SourceBackfill}
		switch {
		case i%300 == 7:
			ev = archive.Event{Kind: archive.KindIdentity, DID: did, Handle: "u.test", Source: archive.SourceLive}
		case i%250 == 3:
			ev.Collection = rare
			rareKeys = append(rareKeys, ev)
		case i%250 == 200 && len(rareKeys) > 0:
			ev.Kind, ev.Collection, ev.RKey, ev.DID = archive.KindUpdate, rare, rareKeys[0].RKey, rareKeys[0].DID
			ev.Rev = fmt.Sprintf("3l%011d", i+1)
			rareKeys = rareKeys[1:]
		case i%2 == 0:
			ev.Collection = "app.bsky.feed.post"
		}
		unit = append(unit, ev)
		if len(unit) == 500 {
			units, unit = append(units, unit), nil
		}
	}
	return applyUnits(t, w, append(units, unit))
}

// TestIndexedEventsCoveringCopies: the writer gives the entries of a rare
// collection and of the markers a covering copy of their row, so a replay
// of them reads (nearly) no ev/ row, and yields exactly the rows a scan
// with the same filter yields; compaction removes a copy with its row
// (CheckReplayIndex compares every copy with its row and finds none
// without one); the common collection's entries carry none.
func TestIndexedEventsCoveringCopies(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	defer w.Close()
	rows := coverWorld(t, w, 30_000)
	tip := rows[len(rows)-1].Seq
	ranges := []archive.IndexRange{{Family: archive.PrefixByCollection, Name: "com.whtwnd.blog.entry"},
		{Family: archive.PrefixMarker, Name: archive.MarkerName(archive.KindIdentity)}}
	replay := func(stage string) {
		t.Helper()
		var want []string
		it, err := s.Events(0)
		if err != nil {
			t.Fatal(err)
		}
		for it.Next() {
			if ev := it.Event(); ev.Kind == archive.KindIdentity || ev.Collection == "com.whtwnd.blog.entry" {
				want = append(want, fmt.Sprintf("%d %s %s %s %s %x", ev.Seq, ev.Kind, ev.DID, ev.RKey, ev.Handle, ev.Record))
			}
		}
		if err := errors.Join(it.Err(), it.Close()); err != nil {
			t.Fatal(err)
		}
		x, err := s.IndexedEvents(ranges, 0, tip+1)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for x.Next() {
			ev := x.Event()
			got = append(got, fmt.Sprintf("%d %s %s %s %s %x", ev.Seq, ev.Kind, ev.DID, ev.RKey, ev.Handle, ev.Record))
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Fatalf("%s: the index yields %d rows, the scan %d", stage, len(got), len(want))
		}
		if x.Copies()+x.Rows() != len(got) || x.Rows() > len(got)/20 {
			t.Fatalf("%s: %d rows, %d from copies, %d point-read from ev/: want nearly all from copies", stage, len(got), x.Copies(), x.Rows())
		}
		t.Logf("%s: %d rows, %d from copies, %d from ev/", stage, len(got), x.Copies(), x.Rows())
		if err := s.CheckReplayIndex(); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
	}
	replay("written")
	// The common collections' entries carry no copy.
	for k, v := range entriesUnder(t, s, archive.AppendIndexPrefix(nil, archive.PrefixByCollection, "app.bsky.feed.like")) {
		if v != "" {
			t.Fatalf("%q, of a common collection, carries a copy", k)
		}
	}
	if res := compact(t, s, w, archive.CompactOptions{}); res.Rows == 0 {
		t.Fatalf("compaction removed no row: %+v", res)
	}
	replay("compacted")
}

// TestCheckReplayIndexCopies: a copy that is not its row's ev/ value and a
// value on an account entry are each reported; an IndexIter over a copy
// that does not decode stops with ErrMalformed.
func TestCheckReplayIndexCopies(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	rows := coverWorld(t, w, 3000)
	w.Close()
	var covered []byte
	for k, v := range entriesUnder(t, s, archive.PrefixMarker) {
		if v != "" {
			covered = []byte(k)
			break
		}
	}
	if covered == nil {
		t.Fatal("no marker entry carries a copy")
	}
	acct := archive.AppendAccountIndexKey(nil, rows[0].DID, rows[0].Seq)
	// A run of rows[0]'s account over the next rows, of other accounts.
	foreign := archive.AppendIndexRunKey(nil, archive.AppendIndexPrefix(nil, archive.PrefixByAccount, rows[0].DID), rows[0].Seq, rows[5].Seq)
	for _, tc := range []struct {
		key, value []byte
		want       string
	}{
		{covered, []byte{0xff, 0xff}, "carries a copy that is not its row's ev/ value"},
		{acct, []byte{1}, "malformed entry"},
		{foreign, nil, fmt.Sprintf("spans ev/%d, which is not of its name", rows[1].Seq)},
	} {
		old, closer, err := s.DB().Get(tc.key)
		existed := !errors.Is(err, pebble.ErrNotFound) // else a new entry: deleted after
		if existed {
			if err != nil {
				t.Fatal(err)
			}
			old = bytes.Clone(old)
			closer.Close()
		}
		if err := s.DB().Set(tc.key, tc.value, pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := s.CheckReplayIndex(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%q = %x: CheckReplayIndex says %v, want %q", tc.key, tc.value, err, tc.want)
		}
		if bytes.Equal(tc.key, covered) {
			_, _, seq, _ := archive.ParseIndexKey(covered)
			x, err := s.IndexedEvents([]archive.IndexRange{{Family: archive.PrefixMarker, Name: archive.MarkerName(archive.KindIdentity)}}, seq, seq+1)
			if err != nil {
				t.Fatal(err)
			}
			for x.Next() {
			}
			if err := x.Close(); !errors.Is(err, archive.ErrMalformed) {
				t.Fatalf("an IndexIter over a copy that does not decode: %v, want ErrMalformed", err)
			}
		}
		if !existed {
			err = s.DB().Delete(tc.key, pebble.Sync)
		} else {
			err = s.DB().Set(tc.key, old, pebble.Sync)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatal(err)
	}
}

// TestIndexedEventsRuns: a bootstrap writes each repo's records as one
// unit, consecutive seqs of one account and, within it, of one collection:
// their entries are runs (one xd/ entry per repo, one xc/ per collection
// in it). From any seq to any bound (inside a run too) the index yields
// exactly the rows a filtered scan yields and EstimateIndex counts them
// exactly; after compaction removed rows from the runs (their first and
// last among them) the index still yields exactly the scan's rows and
// CheckReplayIndex accepts the runs.
func TestIndexedEventsRuns(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	defer w.Close()
	colls := []string{"app.bsky.feed.like", "app.bsky.feed.post", "app.bsky.graph.follow"}
	var units [][]archive.Event
	var recs []archive.Event
	rev := 0
	for a := 0; a < 40; a++ {
		did := fmt.Sprintf("did:plc:repo%04d", a)
		var unit []archive.Event
		for c, coll := range colls {
			for i := 0; i < 5+(a*7+c*3)%30; i++ {
				rev++
				ev := archive.Event{Kind: archive.KindCreate, DID: did, Collection: coll, RKey: fmt.Sprintf("3k%04d%07d", c, i),
					Rev: fmt.Sprintf("3l%011d", a), CID: []byte{1, 0x71, 0x12, 0x20, 1}, Record: []byte{0xa0}, Source: archive.SourceBackfill}
				unit = append(unit, ev)
			}
		}
		recs = append(recs, unit...)
		units = append(units, unit)
		if a%5 == 4 {
			units = append(units, []archive.Event{{Kind: archive.KindIdentity, DID: did, Handle: "u.test", Source: archive.SourceLive}})
		}
	}
	// Live updates and deletes of some bootstrap records, the first and
	// the last of some runs among them: compaction removes those rows.
	var live []archive.Event
	for i, r := range recs {
		if i%7 == 0 || i%11 == 3 {
			ev := r
			ev.Rev, ev.Source = fmt.Sprintf("3m%011d", i), archive.SourceLive
			if i%2 == 0 {
				ev.Kind = archive.KindUpdate
			} else {
				ev.Kind, ev.Record, ev.CID = archive.KindDelete, nil, nil
			}
			live = append(live, ev)
		}
	}
	for len(live) > 0 {
		n := min(len(live), 3)
		units, live = append(units, live[:n]), live[n:]
	}
	rows := applyUnits(t, w, units)
	tip := rows[len(rows)-1].Seq
	runs := 0
	for k := range entriesUnder(t, s, archive.PrefixByAccount) {
		if len(k) == len(archive.PrefixByAccount)+18 {
			runs++
		}
	}
	if runs < 40 {
		t.Fatalf("%d xd/ run entries for 40 repos written as one unit each", runs)
	}
	acct := func(d string) archive.IndexRange { return archive.IndexRange{Family: archive.PrefixByAccount, Name: d} }
	coll := func(c string) archive.IndexRange {
		return archive.IndexRange{Family: archive.PrefixByCollection, Name: c}
	}
	ident := archive.IndexRange{Family: archive.PrefixMarker, Name: archive.MarkerName(archive.KindIdentity)}
	cases := []struct {
		name   string
		ranges []archive.IndexRange
		admit  func(ev *archive.Event) bool
	}{
		{"one account", []archive.IndexRange{acct("did:plc:repo0007")}, func(ev *archive.Event) bool { return ev.DID == "did:plc:repo0007" }},
		{"two accounts", []archive.IndexRange{acct("did:plc:repo0007"), acct("did:plc:repo0031")}, func(ev *archive.Event) bool {
			return ev.DID == "did:plc:repo0007" || ev.DID == "did:plc:repo0031"
		}},
		{"a collection and the markers", []archive.IndexRange{coll("app.bsky.feed.post"), ident}, func(ev *archive.Event) bool {
			return ev.Collection == "app.bsky.feed.post" || ev.Kind == archive.KindIdentity
		}},
	}
	check := func(stage string, counts bool) {
		t.Helper()
		for _, tc := range cases {
			for _, span := range [][2]uint64{{0, tip + 1}, {rows[100].Seq + 3, tip + 1}, {rows[41].Seq, rows[377].Seq}, {rows[250].Seq, rows[251].Seq + 1}} {
				from, to := span[0], span[1]
				var want []uint64
				it, err := s.Events(from)
				if err != nil {
					t.Fatal(err)
				}
				for it.Next() && it.Event().Seq < to {
					if tc.admit(it.Event()) {
						want = append(want, it.Event().Seq)
					}
				}
				if err := errors.Join(it.Err(), it.Close()); err != nil {
					t.Fatal(err)
				}
				x, err := s.IndexedEvents(tc.ranges, from, to)
				if err != nil {
					t.Fatal(err)
				}
				var got []uint64
				for x.Next() {
					if !tc.admit(x.Event()) {
						t.Fatalf("%s, %s [%d, %d): the index yields ev/%d, not of its ranges", stage, tc.name, from, to, x.Event().Seq)
					}
					got = append(got, x.Event().Seq)
				}
				if err := x.Close(); err != nil {
					t.Fatalf("%s, %s [%d, %d): %v", stage, tc.name, from, to, err)
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("%s, %s [%d, %d): the index yields %d rows %v, the scan %d %v", stage, tc.name, from, to, len(got), head(got), len(want), head(want))
				}
				if n, exact, err := s.EstimateIndex(tc.ranges, from, to, 1<<20); counts && from == 0 && (err != nil || !exact || n != uint64(len(want))) {
					t.Fatalf("%s, %s: EstimateIndex %d (exact %v, %v), want %d", stage, tc.name, n, exact, err, len(want))
				}
			}
		}
		if err := s.CheckReplayIndex(); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
	}
	check("written", true)
	if res := compact(t, s, w, archive.CompactOptions{}); res.Rows == 0 {
		t.Fatalf("compaction removed no row: %+v", res)
	}
	check("compacted", false)
}
