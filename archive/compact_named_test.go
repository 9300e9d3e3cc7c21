package archive_test

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/churn"
)

// namedOps is one account's rows: r1 over separate units; r2 and r3 in
// one unit (one writer batch: the rows it supersedes are not in Pebble
// yet); r3 created twice (a create of a still-current record) before its
// update; r4's delete of a record the archive never held.
var namedOps = [][]op{
	{cr("r1")}, {up("r1")}, {del("r1")},
	{cr("r2"), up("r2"), del("r2"), cr("r3"), cr("r3"), up("r3"), cr("r2")},
	{del("r4")}, {up("r3")},
}

// namedUnits makes namedOps' units, with increasing revs.
func namedUnits() [][]archive.Event {
	dids := []string{"did:plc:aaaa"}
	var units [][]archive.Event
	rev := 0
	for _, ops := range namedOps {
		var u []archive.Event
		for _, o := range ops {
			rev++
			u = append(u, o.event(dids, rev))
		}
		units = append(units, u)
	}
	return units
}

// TestTombstonesNameSuperseded: each update's and delete's tombstone names
// the create and update rows it supersedes, with their sizes, whether they
// were written in an earlier batch or earlier in its own; and the pass
// removes them blind: it reads none of their rec/ entries (made
// unreadable here), while an unnamed tombstone (written before they were
// named) still makes it look them up, and fail closed on them.
func TestTombstonesNameSuperseded(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	defer w.Close()
	rows := applyEach(t, w, namedUnits())
	seq := func(i int) uint64 { return rows[i].Seq }
	// rows: 0 cr r1, 1 up r1, 2 del r1, 3 cr r2, 4 up r2, 5 del r2,
	// 6 cr r3, 7 cr r3, 8 up r3, 9 cr r2, 10 del r4, 11 up r3.
	want := map[int][]int{1: {0}, 2: {1}, 4: {3}, 5: {4}, 8: {7, 6}, 10: nil, 11: {8}}
	tombs := entriesUnder(t, s, archive.PrefixTomb)
	if len(tombs) != len(want) {
		t.Fatalf("%d tombstones, want %d", len(tombs), len(want))
	}
	for i, names := range want {
		v, ok := tombs[string(archive.TombKey(rows[i].DID, seq(i)))]
		if !ok {
			t.Fatalf("no tombstone for row %d", i)
		}
		tb, err := archive.DecodeTomb([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		var wantRows []archive.SupersededRow
		for _, j := range names {
			ev, err := archive.AppendEvent(nil, &rows[j])
			if err != nil {
				t.Fatal(err)
			}
			wantRows = append(wantRows, archive.SupersededRow{Seq: seq(j), Size: len(ev)})
		}
		if !tb.Named || !reflect.DeepEqual(tb.Superseded, wantRows) {
			t.Fatalf("row %d's tombstone names %+v (named %v), want %+v", i, tb.Superseded, tb.Named, wantRows)
		}
	}

	// Unreadable rec/ entries of every superseded row: a blind pass never
	// reads them, and deletes them.
	for _, i := range []int{0, 1, 3, 4, 6, 7, 8} {
		set(t, s, archive.RecordKey(rows[i].DID, rows[i].Collection, rows[i].RKey, seq(i)), []byte{7})
	}
	res := compact(t, s, w, archive.CompactOptions{})
	if res.Rows != 7 || res.Tombstones != len(want) {
		t.Fatalf("pass %+v, want 7 rows removed by %d tombstones", res, len(want))
	}
	checkSurvivors(t, s, rows, res.To)

	// The same store as a writer before named tombstones left it: the pass
	// looks the rows up, and fails closed on an unreadable entry.
	s2 := openStore(t, vfs.NewMem(), nil)
	defer s2.Close()
	w2 := startWriter(t, s2)
	defer w2.Close()
	rows = applyEach(t, w2, namedUnits())
	unname(t, s2)
	key := set(t, s2, archive.RecordKey(rows[0].DID, rows[0].Collection, rows[0].RKey, rows[0].Seq), []byte{7})
	if _, err := s2.Compact(t.Context(), w2, archive.CompactOptions{Logger: quiet}); !errors.Is(err, archive.ErrCompactionState) {
		t.Fatalf("a pass over unnamed tombstones and a malformed %s: %v", archive.KeyString(key), err)
	}
}

// applyEach applies units one by one, each in its own writer batch.
func applyEach(t testing.TB, w *archive.Writer, units [][]archive.Event) []archive.Event {
	t.Helper()
	var rows []archive.Event
	for _, u := range units {
		rows = append(rows, applyUnits(t, w, [][]archive.Event{u})...)
	}
	return rows
}

// unname rewrites every tombstone of s as a writer before named tombstones
// wrote it, and every update's rec/ entry as it did ([0x02]); that writer
// wrote no run entries either.
func unname(t *testing.T, s *archive.Store) {
	t.Helper()
	if err := archive.UnfoldRuns(s); err != nil {
		t.Fatal(err)
	}
	for k, v := range entriesUnder(t, s, archive.PrefixTomb) {
		tb, err := archive.DecodeTomb([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		tb.Named, tb.Superseded = false, nil
		nv, err := archive.AppendTomb(nil, tb)
		if err != nil {
			t.Fatal(err)
		}
		set(t, s, []byte(k), nv)
	}
	for k, v := range entriesUnder(t, s, archive.PrefixRecord) {
		if v[0] == 3 {
			set(t, s, []byte(k), append([]byte{2}, v[1:]...))
		}
	}
}

// TestCompactUnnamedTombstones: a store whose tombstones and rec/ entries a
// writer before named tombstones wrote, then a writer that names them: the
// passes over both kinds (and over records whose older rows carry the old
// rec/ tag) remove exactly what the recomputation says.
func TestCompactUnnamedTombstones(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			s := openStore(t, vfs.NewMem(), nil)
			defer s.Close()
			w := startWriter(t, s)
			defer w.Close()
			tr := churn.New(seed, 12)
			rows := applyUnits(t, w, tr.Units(300))
			unname(t, s)
			rows = append(rows, applyUnits(t, w, tr.Units(300))...)
			sort.Slice(rows, func(i, j int) bool { return rows[i].Seq < rows[j].Seq })
			res := compact(t, s, w, archive.CompactOptions{})
			if res.Rows == 0 {
				t.Fatal("the traffic superseded nothing")
			}
			checkSurvivors(t, s, rows, res.To)
			rows = append(rows, applyUnits(t, w, tr.Units(300))...)
			res = compact(t, s, w, archive.CompactOptions{})
			checkSurvivors(t, s, rows, res.To)
		})
	}
}
