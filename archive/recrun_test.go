package archive_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
)

// runUnit is one unit of creates of dids[0], one op per record, as a
// repo's download archives them.
func runUnit(dids []string, rev *int, recs ...string) []archive.Event {
	var u []archive.Event
	for _, r := range recs {
		*rev++
		ev := cr(r).event(dids, *rev)
		ev.Source = archive.SourceBackfill
		u = append(u, ev)
	}
	return u
}

// memStore opens a store in memory with a writer, both closed with t.
func memStore(t *testing.T) (*archive.Store, *archive.Writer) {
	t.Helper()
	s := openStore(t, vfs.NewMem(), nil)
	t.Cleanup(func() { s.Close() })
	w := startWriter(t, s)
	t.Cleanup(func() { w.Close() })
	return s, w
}

// opUnit is one op as its own unit.
func opUnit(dids []string, rev *int, o op) []archive.Event {
	*rev++
	return []archive.Event{o.event(dids, *rev)}
}

// rowSize is the size of ev's ev/ value.
func rowSize(t *testing.T, ev *archive.Event) int {
	t.Helper()
	v, err := archive.AppendEvent(nil, ev)
	if err != nil {
		t.Fatal(err)
	}
	return len(v)
}

// tombOf decodes the tombstone of row ev.
func tombOf(t *testing.T, s *archive.Store, ev archive.Event) archive.Tomb {
	t.Helper()
	v, ok := entriesUnder(t, s, archive.PrefixTomb)[string(archive.TombKey(ev.DID, ev.Seq))]
	if !ok {
		t.Fatalf("no tombstone for seq %d", ev.Seq)
	}
	tb, err := archive.DecodeTomb([]byte(v))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// TestRecordRuns: a unit's stretch of at least four creates of one
// collection is indexed as one run entry, a shorter one entry per record;
// an update's and a delete's tombstones name a run member with its size,
// whether the run was written in an earlier batch or in the same; an
// account's current records read through runs; a pass removes the named
// members and, after a purge, whole runs; the index left is exactly what
// the survivors need.
func TestRecordRuns(t *testing.T) {
	dids := []string{"did:plc:aaaa", "did:plc:bbbb"}
	s, w := memStore(t)
	rev := 0
	var rkeys []string
	for i := range 10 {
		rkeys = append(rkeys, fmt.Sprintf("p/3l%011d", i))
	}
	units := [][]archive.Event{
		append(runUnit(dids, &rev, rkeys...), runUnit(dids, &rev, "q/a", "q/b", "q/c")...),
		opUnit(dids, &rev, del(rkeys[3])),
		opUnit(dids, &rev, up(rkeys[5])),
		opUnit(dids, &rev, up(rkeys[5])),
		opUnit(dids, &rev, del(rkeys[5])),
	}
	rows := applyEach(t, w, units)
	run, qs := rows[0], rows[10:13]

	have := keysUnder(t, s, archive.PrefixRecord)
	if !have[string(archive.RunKey(run.DID, "p", run.Seq))] {
		t.Fatalf("no run entry for the ten creates: %d rec/ keys", len(have))
	}
	for _, q := range qs {
		if !have[string(archive.RecordKey(q.DID, q.Collection, q.RKey, q.Seq))] {
			t.Fatalf("no entry of its own for %s, one of three creates", q.RKey)
		}
	}
	if _, runs, _ := archive.RecordEntries(s); runs != 1 || len(have) != 1+3+4 {
		t.Fatalf("%d runs and %d rec/ keys, want 1 run, 3 creates' entries and 4 of updates and deletes", runs, len(have))
	}
	want := map[int][]int{13: {3}, 14: {5}, 15: {14}, 16: {15}}
	for i, names := range want {
		var wantRows []archive.SupersededRow
		for _, j := range names {
			wantRows = append(wantRows, archive.SupersededRow{Seq: rows[j].Seq, Size: rowSize(t, &rows[j])})
		}
		if tb := tombOf(t, s, rows[i]); !tb.Named || !reflect.DeepEqual(tb.Superseded, wantRows) {
			t.Fatalf("row %d's tombstone names %+v, want %+v", i, tb.Superseded, wantRows)
		}
	}

	current := func() []string {
		var out []string
		err := s.AccountRecords(dids[0], func(r archive.CurrentRecord) error {
			out = append(out, fmt.Sprintf("%s/%s@%d", r.Collection, r.RKey, r.Seq))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	var wantCurrent []string
	for i, r := range rows[:13] {
		if i != 3 && i != 5 {
			wantCurrent = append(wantCurrent, fmt.Sprintf("%s/%s@%d", r.Collection, r.RKey, r.Seq))
		}
	}
	if got := current(); !reflect.DeepEqual(got, wantCurrent) {
		t.Fatalf("current records %v, want %v", got, wantCurrent)
	}
	res := compact(t, s, w, archive.CompactOptions{})
	if res.Rows != 4 {
		t.Fatalf("pass %+v, want the 4 superseded rows removed", res)
	}
	checkSurvivors(t, s, rows, res.To)
	if got := current(); !reflect.DeepEqual(got, wantCurrent) {
		t.Fatalf("after the pass: current records %v, want %v", got, wantCurrent)
	}

	// The same stretch and a delete in one batch, then a purge.
	more := applyUnits(t, w, [][]archive.Event{
		append(runUnit(dids, &rev, "r/1", "r/2", "r/3", "r/4", "r/5"), opUnit(dids, &rev, del("r/2"))...),
	})
	if tb := tombOf(t, s, more[5]); !reflect.DeepEqual(tb.Superseded, []archive.SupersededRow{{Seq: more[1].Seq, Size: rowSize(t, &more[1])}}) {
		t.Fatalf("a delete in the run's own batch names %+v, want row %d", tb.Superseded, more[1].Seq)
	}
	rows = append(rows, more...)
	rows = append(rows, applyEach(t, w, [][]archive.Event{opUnit(dids, &rev, acc("takendown"))})...)
	res = compact(t, s, w, archive.CompactOptions{})
	checkSurvivors(t, s, rows, res.To)
	if _, runs, _ := archive.RecordEntries(s); runs != 0 {
		t.Fatalf("%d run entries left after a purge of their account", runs)
	}
	if got := current(); len(got) != 0 {
		t.Fatalf("current records after a takedown: %v", got)
	}
}

// collidingRKeys returns the first two rkeys of the form 3l<11 digits>
// with one run hash; a < b.
func collidingRKeys() (a, b string) {
	seen := map[uint16]string{}
	for i := 0; ; i++ {
		rk := fmt.Sprintf("3l%011d", i)
		h := archive.RKeyHash(rk)
		if o, ok := seen[h]; ok {
			return o, rk
		}
		seen[h] = rk
	}
}

// TestRecordRunHashCollision: two rkeys of one run whose hashes collide;
// deleting one names and removes that one only (a member is taken only
// once its row is read and is the record's).
func TestRecordRunHashCollision(t *testing.T) {
	a, b := collidingRKeys()
	recs := []string{"p/" + a, "p/" + b, "p/3m000000000x", "p/3m000000000y", "p/3m000000000z"}
	sort.Strings(recs)
	dids := []string{"did:plc:aaaa"}
	s, w := memStore(t)
	rev := 0
	rows := applyEach(t, w, [][]archive.Event{runUnit(dids, &rev, recs...)})
	if _, runs, _ := archive.RecordEntries(s); runs != 1 {
		t.Fatalf("%d runs, want 1", runs)
	}
	var victim archive.Event
	for _, r := range rows {
		if r.RKey == b {
			victim = r
		}
	}
	rows = append(rows, applyEach(t, w, [][]archive.Event{opUnit(dids, &rev, del("p/"+b))})...)
	if tb := tombOf(t, s, rows[len(rows)-1]); len(tb.Superseded) != 1 || tb.Superseded[0].Seq != victim.Seq {
		t.Fatalf("the delete of %s names %+v, want only row %d (%s collides with it)", b, tb.Superseded, victim.Seq, a)
	}
	res := compact(t, s, w, archive.CompactOptions{})
	checkSurvivors(t, s, rows, res.To)
}

// TestRecordRunBounds: a run holds no rkey outside its lowest and highest
// member's, so the lookup of a record skips the runs whose bounds exclude
// it, hash collisions included: here the only member of the older run whose
// hash is the deleted rkey's has a row that cannot be read, and the delete
// never reads it. The bounds themselves are members: a delete of the lowest
// and of the highest names its create.
func TestRecordRunBounds(t *testing.T) {
	a, b := collidingRKeys() // a < b, one hash
	dids := []string{"did:plc:aaaa"}
	s, w := memStore(t)
	rev := 0
	older := runUnit(dids, &rev, "p/"+a, "p/"+a+"x1", "p/"+a+"x2", "p/"+a+"x3")
	newer := runUnit(dids, &rev, "p/"+b, "p/"+b+"x1", "p/"+b+"x2", "p/"+b+"x3")
	rows := applyEach(t, w, [][]archive.Event{older, newer})
	if _, runs, err := archive.RecordEntries(s); err != nil || runs != 2 {
		t.Fatalf("%d runs (%v), want 2", runs, err)
	}
	set(t, s, archive.EventKey(rows[0].Seq), []byte{0xff})     // a's row: malformed if read
	for _, victim := range []archive.Event{rows[4], rows[7]} { // the newer run's lowest and highest
		rows = append(rows, applyEach(t, w, [][]archive.Event{opUnit(dids, &rev, del("p/"+victim.RKey))})...)
		if tb := tombOf(t, s, rows[len(rows)-1]); len(tb.Superseded) != 1 || tb.Superseded[0].Seq != victim.Seq {
			t.Fatalf("the delete of %s names %+v, want only row %d", victim.RKey, tb.Superseded, victim.Seq)
		}
	}
}

// TestRecordRunMalformed: a run entry the writer cannot have written
// (its value, or hashes that are not its members' rkeys') stops an
// account's records with ErrMalformed naming its key.
func TestRecordRunMalformed(t *testing.T) {
	dids := []string{"did:plc:aaaa"}
	s, w := memStore(t)
	rev := 0
	rows := applyEach(t, w, [][]archive.Event{runUnit(dids, &rev, "p/1", "p/2", "p/3", "p/4")})
	key := archive.RunKey(dids[0], "p", rows[0].Seq)
	hashes, size := []byte{}, 0
	for _, r := range rows {
		hashes = binary.BigEndian.AppendUint16(hashes, archive.RKeyHash(r.RKey))
		size += rowSize(t, &r)
	}
	bounded := func(lo, hi string) []byte {
		v := binary.AppendUvarint([]byte{5, 4}, uint64(size))
		v = append(append(v, byte(len(lo))), lo...)
		v = append(append(v, byte(len(hi))), hi...)
		return append(v, hashes...)
	}
	if v, got := bounded("1", "4"), entriesUnder(t, s, archive.PrefixRecord)[string(key)]; !bytes.Equal(v, []byte(got)) {
		t.Fatalf("the run's value is %x, want %x", got, v)
	}
	// Short of hashes, a per-record value, too few members, hashes that
	// are not the members' rkeys'; bounds out of order, members outside
	// the bounds.
	for _, v := range [][]byte{{4, 4, 40, 0, 0}, {2, 10}, {4, 3, 40, 0, 0, 0, 0, 0, 0}, {4, 4, 40, 0, 0, 0, 0, 0, 0, 0, 0},
		bounded("4", "1"), bounded("1", "3"), bounded("2", "4"), bounded("1", "4")[:6]} {
		set(t, s, key, v)
		err := s.AccountRecords(dids[0], func(archive.CurrentRecord) error { return nil })
		if !errors.Is(err, archive.ErrMalformed) || !strings.Contains(err.Error(), archive.KeyString(key)) {
			t.Fatalf("run value %x: %v, want ErrMalformed naming the key", v, err)
		}
	}
	// A run naming another collection's row.
	set(t, s, archive.RunKey(dids[0], "q", rows[0].Seq), []byte{4, 4, 40, 0, 0, 0, 0, 0, 0, 0, 0})
	err := s.AccountRecords(dids[0], func(archive.CurrentRecord) error { return nil })
	if !errors.Is(err, archive.ErrMalformed) {
		t.Fatalf("a run naming rows of another collection: %v", err)
	}
}

// TestRecordRunBehindRecords: a run member's delete when records written
// one by one sort between the run and the member: a few (the walk steps
// back over them to the run) and many (it seeks); both name the member.
func TestRecordRunBehindRecords(t *testing.T) {
	for _, n := range []int{3, 40} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			dids := []string{"did:plc:aaaa"}
			s, w := memStore(t)
			rev := 0
			units := [][]archive.Event{runUnit(dids, &rev, "p/m0", "p/m1", "p/m2", "p/m3", "p/m4")}
			for i := range n {
				units = append(units, opUnit(dids, &rev, cr(fmt.Sprintf("p/a%02d", i))))
			}
			units = append(units, opUnit(dids, &rev, del("p/m2")))
			rows := applyEach(t, w, units)
			if tb := tombOf(t, s, rows[len(rows)-1]); len(tb.Superseded) != 1 || tb.Superseded[0].Seq != rows[2].Seq {
				t.Fatalf("the delete of m2 names %+v, want row %d", tb.Superseded, rows[2].Seq)
			}
			res := compact(t, s, w, archive.CompactOptions{})
			checkSurvivors(t, s, rows, res.To)
		})
	}
}

// TestRecordRunsOnlyOfDownloads: only a download's creates fold into runs.
// A live commit of many creates of one collection gets an entry per
// record: runs written live, four creates a commit, would be a run entry
// every four records, each one read by every later delete or update in the
// collection (runCreates visits every run back to the record's last
// per-record entry), so one account could hold the writer for milliseconds
// an event. A download's creates come in key order, one stretch a
// collection: few runs, none overlapping another of the same download.
func TestRecordRunsOnlyOfDownloads(t *testing.T) {
	dids := []string{"did:plc:aaaa"}
	s, w := memStore(t)
	rev := 0
	live := func(recs ...string) []archive.Event {
		u := runUnit(dids, &rev, recs...)
		for i := range u {
			u[i].Source, u[i].Rev = archive.SourceLive, u[0].Rev // one commit
		}
		return u
	}
	rows := applyEach(t, w, [][]archive.Event{
		runUnit(dids, &rev, "p/a", "p/b", "p/c", "p/d"),
		live("q/a", "q/b", "q/c", "q/d", "q/e"),
		runUnit(dids, &rev, "p/e", "p/f", "p/g", "p/h"),
	})
	have := keysUnder(t, s, archive.PrefixRecord)
	for _, i := range []int{0, 9} {
		if !have[string(archive.RunKey(dids[0], "p", rows[i].Seq))] {
			t.Fatalf("no run entry for the download's creates from seq %d", rows[i].Seq)
		}
	}
	for _, q := range rows[4:9] {
		if !have[string(archive.RecordKey(q.DID, q.Collection, q.RKey, q.Seq))] {
			t.Fatalf("no entry of its own for %s, one of a live commit's five creates", q.RKey)
		}
	}
	if _, runs, _ := archive.RecordEntries(s); runs != 2 || len(have) != 2+5 {
		t.Fatalf("%d runs and %d rec/ keys, want the downloads' 2 runs and the live commit's 5 entries", runs, len(have))
	}
}

// TestRecordRunsAcrossTakedownReversed: an account downloaded (a run),
// taken down, reactivated and downloaded again under the same rkeys (a
// second run), then deleting and updating records of the new download:
// whether a pass applies the takedown before the second download or after
// it, the new run's rows survive but the ones deleted or updated since,
// the old run is gone, the index is what the survivors need, and the
// current records are the new download's.
func TestRecordRunsAcrossTakedownReversed(t *testing.T) {
	rkeys := []string{"p/a", "p/b", "p/c", "p/d", "p/e", "p/f"}
	for _, between := range []bool{false, true} {
		t.Run(fmt.Sprintf("pass between %v", between), func(t *testing.T) {
			dids := []string{"did:plc:aaaa", "did:plc:bbbb"}
			s, w := memStore(t)
			rev := 0
			rows := applyEach(t, w, [][]archive.Event{
				runUnit(dids, &rev, rkeys...),
				opUnit(dids, &rev, acc("takendown")),
				opUnit(dids, &rev, acc("")),
			})
			if between {
				checkSurvivors(t, s, rows, compact(t, s, w, archive.CompactOptions{}).To)
			}
			rows = append(rows, applyEach(t, w, [][]archive.Event{
				runUnit(dids, &rev, rkeys...),
				opUnit(dids, &rev, del("p/c")),
			})...)
			res := compact(t, s, w, archive.CompactOptions{})
			checkSurvivors(t, s, rows, res.To)
			rows = append(rows, applyEach(t, w, [][]archive.Event{opUnit(dids, &rev, up("p/d"))})...)
			res = compact(t, s, w, archive.CompactOptions{})
			checkSurvivors(t, s, rows, res.To)
			var got []string
			err := s.AccountRecords(dids[0], func(r archive.CurrentRecord) error {
				got = append(got, fmt.Sprintf("%s/%s@%d", r.Collection, r.RKey, r.Seq))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			// a, b, e and f of the second download (rows 8 to 13), d as
			// updated (row 15); c deleted (row 14).
			for _, i := range []int{8, 9, 15, 12, 13} {
				want = append(want, fmt.Sprintf("%s/%s@%d", rows[i].Collection, rows[i].RKey, rows[i].Seq))
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("current records %v, want %v", got, want)
			}
			if _, runs, _ := archive.RecordEntries(s); runs != 1 {
				t.Fatalf("%d run entries, want the second download's only", runs)
			}
		})
	}
}
