package archive_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/churn"
)

// indexOf returns every rec/ and tomb/ entry of s, key → value.
func indexOf(t testing.TB, s *archive.Store) map[string]string {
	t.Helper()
	out, _, err := archive.RecordEntries(s) // the backfill writes no runs
	if err != nil {
		t.Fatal(err)
	}
	maps.Copy(out, entriesUnder(t, s, archive.PrefixTomb))
	return out
}

// oldStore writes traffic, remembers the index the writer wrote, then
// removes it as an older store would lack it, and reopens the store (Open
// writes meta/index). It returns the rows and the writer's index.
func oldStore(t *testing.T, fs vfs.FS, tr *churn.Traffic, n int) ([]archive.Event, map[string]string) {
	t.Helper()
	s := openStore(t, fs, nil)
	w := startWriter(t, s)
	rows := applyUnits(t, w, tr.Units(n))
	want := indexOf(t, s)
	if err := check.ForgetIndex(s); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s.Close()
	return rows, want
}

// TestFillIndexOldStore: a store archived without the compaction index
// gets it back from the backfill — key for key, value for value what the
// writer wrote — while the writer indexes what it archives since; no pass
// runs before the backfill is done, and the pass after it removes exactly
// what the recomputation says is superseded.
func TestFillIndexOldStore(t *testing.T) {
	fs := vfs.NewMem()
	tr := churn.New(5, 16)
	rows, want := oldStore(t, fs, tr, 300)
	s := openStore(t, fs, nil)
	defer s.Close()
	m, err := s.IndexMarker()
	if err != nil {
		t.Fatal(err)
	}
	if tip := rows[len(rows)-1].Seq; m.Done() || m.End != tip+1 {
		t.Fatalf("marker %+v for an old store with tip %d", m, tip)
	}
	w := startWriter(t, s)
	defer w.Close()
	// The new rows supersede old ones: their tombstones name rows the
	// backfill has not indexed yet.
	newRows := applyUnits(t, w, tr.Units(300))
	maps.Copy(want, indexOf(t, s)) // the writer's own entries, above End
	rows = append(rows, newRows...)
	if res := compact(t, s, w, archive.CompactOptions{}); !res.IndexPending || res.Rows != 0 || res.To != 0 {
		t.Fatalf("a pass before the backfill: %+v", res)
	}
	var seen []archive.IndexMarker
	res, err := s.FillIndex(context.Background(), 64, func(m archive.IndexMarker) { seen = append(seen, m) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != len(rows)-len(newRows) || res.Batches != len(seen) || !res.Marker.Done() || res.Batches < 4 {
		t.Fatalf("backfill %+v (progress %v) over %d old rows", res, seen, len(rows)-len(newRows))
	}
	compareIndex(t, indexOf(t, s), want)
	pass := compact(t, s, w, archive.CompactOptions{})
	if pass.IndexPending || pass.Rows == 0 {
		t.Fatalf("the pass after the backfill: %+v", pass)
	}
	checkSurvivors(t, s, rows, pass.To)
}

func compareIndex(t testing.TB, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Fatalf("index entry %s: have %x (present %v), the writer wrote %x", archive.KeyString([]byte(k)), g, ok, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Fatalf("index entry %s the writer never wrote", archive.KeyString([]byte(k)))
		}
	}
}

// TestFillIndexNewStore: a new store's index covers everything from the
// start; the backfill has nothing to do.
func TestFillIndexNewStore(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	m, err := s.IndexMarker()
	if err != nil || !m.Done() {
		t.Fatalf("new store: marker %+v, %v", m, err)
	}
	w := startWriter(t, s)
	defer w.Close()
	applyUnits(t, w, churn.New(3, 4).Units(20))
	res, err := s.FillIndex(context.Background(), 0, nil)
	if err != nil || res.Rows != 0 || res.Batches != 0 {
		t.Fatalf("backfill of a new store: %+v, %v", res, err)
	}
}

// TestFillIndexPowerLoss cuts the power after k synced backfill batches
// (strict in-memory filesystem: what was not synced is lost): the store
// reopens with the marker at the k-th batch's end and the entries of those
// batches, the backfill resumes there and ends with the writer's index.
func TestFillIndexPowerLoss(t *testing.T) {
	const perBatch = 50
	for _, k := range []int{0, 1, 3} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			fs := vfs.NewStrictMem()
			rows, want := oldStore(t, fs, churn.New(9, 12), 300)
			var s *archive.Store
			batches := 0
			hook := func(op string, _ [][]byte) error {
				if op != "commit an index backfill batch" {
					return nil
				}
				if batches == k {
					fs.SetIgnoreSyncs(true) // from here on nothing is durable
				}
				batches++
				return nil
			}
			s = openStore(t, fs, hook)
			if _, err := s.FillIndex(context.Background(), perBatch, nil); err != nil {
				t.Fatal(err)
			}
			s.Close()
			fs.ResetToSyncedState()
			fs.SetIgnoreSyncs(false)

			s = openStore(t, fs, nil)
			defer s.Close()
			m, err := s.IndexMarker()
			if err != nil {
				t.Fatal(err)
			}
			if m.Done() || m.Next != rows[k*perBatch].Seq {
				t.Fatalf("after the cut at batch %d: marker %+v, want Next %d", k, m, rows[k*perBatch].Seq)
			}
			res, err := s.FillIndex(context.Background(), perBatch, nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Rows != len(rows)-k*perBatch {
				t.Fatalf("resumed backfill indexed %d rows, want %d", res.Rows, len(rows)-k*perBatch)
			}
			compareIndex(t, indexOf(t, s), want)
			w := startWriter(t, s)
			defer w.Close()
			checkSurvivors(t, s, rows, compact(t, s, w, archive.CompactOptions{}).To)
		})
	}
}

// TestFillIndexMalformed: an undecodable ev/ row stops the backfill with
// ErrCompactionState naming the row, the marker left at the last batch
// before it (nothing guessed); an undecodable marker is the same error
// naming meta/index.
func TestFillIndexMalformed(t *testing.T) {
	fs := vfs.NewMem()
	rows, _ := oldStore(t, fs, churn.New(2, 6), 100)
	s := openStore(t, fs, nil)
	defer s.Close()
	bad := rows[70].Seq
	if err := s.DB().Set(archive.EventKey(bad), []byte{0x01, 0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_, err := s.FillIndex(context.Background(), 50, nil)
	if !errors.Is(err, archive.ErrCompactionState) || !strings.Contains(err.Error(), fmt.Sprintf("ev/%d", bad)) {
		t.Fatalf("backfill over a malformed row: %v", err)
	}
	if m, err := s.IndexMarker(); err != nil || m.Next != rows[50].Seq {
		t.Fatalf("marker %+v (%v), want Next %d: the batch before the bad row, not past it", m, err, rows[50].Seq)
	}
	if err := s.DB().Set(archive.KeyIndex, []byte{0x01, 2}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FillIndex(context.Background(), 50, nil); !errors.Is(err, archive.ErrCompactionState) || !strings.Contains(err.Error(), "meta/index") {
		t.Fatalf("backfill with a malformed marker: %v", err)
	}
}

// TestWriterGoesOnOverMalformedIndexMarker (K3): a malformed meta/index
// that Open leaves for the compaction owner to report halts compaction,
// not ingest: the writer keeps archiving, writing the tombstones it writes
// during an index backfill (unnamed, which a pass can apply), and once the
// marker is repaired (ResetIndex, what `backstream compaction reset` runs,
// then the index backfill) a pass removes exactly what the recomputation
// says.
func TestWriterGoesOnOverMalformedIndexMarker(t *testing.T) {
	fs := vfs.NewMem()
	s := openStore(t, fs, nil)
	set(t, s, archive.KeyIndex, []byte{0x01, 2})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, fs, nil)
	defer s.Close()
	w := startWriter(t, s)
	defer w.Close()
	rows := applyUnits(t, w, churn.New(5, 8).Units(300))
	if _, err := s.Compact(context.Background(), w, archive.CompactOptions{Logger: quiet}); !errors.Is(err, archive.ErrCompactionState) {
		t.Fatalf("a pass over a malformed meta/index: %v, want ErrCompactionState", err)
	}
	w = reindex(t, s, w)
	res := compact(t, s, w, archive.CompactOptions{Logger: quiet})
	if res.Rows == 0 {
		t.Fatalf("the pass after the repair removed nothing: %+v", res)
	}
	checkSurvivors(t, s, rows, res.To)
}

// reindex stops w, rebuilds s's compaction index as the reset does
// (ResetIndex, then the backfill the next start runs) and returns a new
// writer.
func reindex(t *testing.T, s *archive.Store, w *archive.Writer) *archive.Writer {
	t.Helper()
	w.Close()
	if _, err := s.ResetIndex(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.FillIndex(context.Background(), 0, nil); err != nil {
		t.Fatalf("index backfill after the reset: %v", err)
	}
	return startWriter(t, s)
}

// TestMalformedIndexMarkerOverRuns (K1, K3): a store whose writer folded
// creates into run entries, then whose meta/index turns malformed: the
// writer goes on with unnamed tombstones, which a pass's rec/ lookup
// cannot resolve against a run (a run member has no entry of its own).
// The repair drops the runs with the rest of the index and rebuilds it
// from the rows, so the pass then removes what the recomputation says,
// the run members an update or a delete superseded included.
func TestMalformedIndexMarkerOverRuns(t *testing.T) {
	fs := vfs.NewMem()
	dids := []string{"did:plc:aaaa", "did:plc:bbbb"}
	var rkeys []string
	for i := range 8 {
		rkeys = append(rkeys, fmt.Sprintf("p/3l%011d", i))
	}
	rev := 0
	s := openStore(t, fs, nil)
	w := startWriter(t, s)
	rows := applyEach(t, w, [][]archive.Event{runUnit(dids, &rev, rkeys...)})
	if _, runs, err := archive.RecordEntries(s); err != nil || runs != 1 {
		t.Fatalf("%d run entries (%v), want the eight creates as one", runs, err)
	}
	w.Close()
	set(t, s, archive.KeyIndex, []byte{0x01, 2})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, fs, nil)
	defer s.Close()
	w = startWriter(t, s)
	rows = append(rows, applyEach(t, w, [][]archive.Event{
		opUnit(dids, &rev, del(rkeys[2])),
		opUnit(dids, &rev, up(rkeys[5])),
		opUnit(dids, &rev, up(rkeys[5])),
	})...)
	w = reindex(t, s, w)
	defer w.Close()
	checkSurvivors(t, s, rows, compact(t, s, w, archive.CompactOptions{Logger: quiet}).To)
}

// TestAccountRecordsIndexPending: while the index backfill has not reached
// an account's rows, the index holds part of its records (or none), and a
// whole-repo replacement diffed against that would archive creates again
// and miss the deletes. AccountRecords (and IndexReady) answer
// ErrIndexPending instead of a partial account; after the backfill they
// give exactly what the writer's own index gave.
func TestAccountRecordsIndexPending(t *testing.T) {
	fs := vfs.NewMem()
	tr := churn.New(7, 6)
	s := openStore(t, fs, nil)
	w := startWriter(t, s)
	dids := map[string]bool{}
	for _, ev := range applyUnits(t, w, tr.Units(200)) {
		dids[ev.DID] = true
	}
	records := func(s *archive.Store) (map[string][]archive.CurrentRecord, error) {
		out := map[string][]archive.CurrentRecord{}
		for did := range dids {
			err := s.AccountRecords(did, func(r archive.CurrentRecord) error {
				out[did] = append(out[did], r)
				return nil
			})
			if err != nil {
				return out, err
			}
		}
		return out, nil
	}
	want, err := records(s)
	if err != nil || len(want) == 0 {
		t.Fatalf("records of a new store: %d accounts, %v", len(want), err)
	}
	if err := check.ForgetIndex(s); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s.Close()

	s = openStore(t, fs, nil)
	defer s.Close()
	if err := s.IndexReady(); !errors.Is(err, archive.ErrIndexPending) {
		t.Fatalf("IndexReady of a store being backfilled: %v", err)
	}
	// Half the rows indexed: still pending.
	m, err := s.IndexMarker()
	if err != nil {
		t.Fatal(err)
	}
	during := 0
	if _, err := s.FillIndex(context.Background(), int(m.End/2), func(m archive.IndexMarker) {
		if m.Done() {
			return
		}
		during++
		if got, err := records(s); !errors.Is(err, archive.ErrIndexPending) {
			t.Fatalf("records during the backfill: %d accounts, %v; want ErrIndexPending", len(got), err)
		}
	}); err != nil || during == 0 {
		t.Fatalf("backfill: %v (%d batches before its end)", err, during)
	}
	if err := s.IndexReady(); err != nil {
		t.Fatalf("IndexReady after the backfill: %v", err)
	}
	got, err := records(s)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records after the backfill differ from the writer's index:\n%v\n%v", got, want)
	}
}

// forgetReplayIndex makes s a store archived before the replay index: no
// xc/, xd/, xm/, no meta/index_replay (synced).
func forgetReplayIndex(t testing.TB, s *archive.Store) {
	t.Helper()
	b := s.DB().NewBatch()
	for _, p := range [][]byte{archive.PrefixByCollection, archive.PrefixByAccount, archive.PrefixMarker} {
		end := append(append([]byte(nil), p[:len(p)-1]...), p[len(p)-1]+1)
		_ = b.DeleteRange(p, end, nil)
	}
	_ = b.Delete(archive.KeyReplayIndex, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// TestFillReplayIndexOldStore: a store archived before the replay index
// reopens with meta/index_replay covering its rows; the writer indexes
// what it archives since; a compaction pass may run before the backfill
// (it removes rows the backfill then never sees); the backfill, stopped
// after two batches and resumed, ends with the index matching ev/ exactly
// (CheckReplayIndex, which honours the unfilled span meanwhile).
func TestFillReplayIndexOldStore(t *testing.T) {
	fs := vfs.NewMem()
	tr := churn.New(7, 16)
	s := openStore(t, fs, nil)
	w := startWriter(t, s)
	rows := applyUnits(t, w, tr.Units(300))
	forgetReplayIndex(t, s)
	w.Close()
	s.Close()

	s = openStore(t, fs, nil)
	defer s.Close()
	m, err := s.ReplayIndexMarker()
	if err != nil {
		t.Fatal(err)
	}
	if tip := rows[len(rows)-1].Seq; m.Done() || m.Next != 1 || m.End != tip+1 {
		t.Fatalf("marker %+v for a store with tip %d and no replay index", m, tip)
	}
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatalf("the unfilled span is not the checker's to report: %v", err)
	}
	w = startWriter(t, s)
	defer w.Close()
	applyUnits(t, w, tr.Units(300))
	if pass := compact(t, s, w, archive.CompactOptions{}); pass.IndexPending || pass.Rows == 0 {
		t.Fatalf("a pass before the replay backfill: %+v", pass)
	}
	ctx, cancel := context.WithCancel(context.Background())
	batches := 0
	r0, err := s.FillReplayIndex(ctx, 16, func(archive.IndexMarker) {
		if batches++; batches == 2 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stopped backfill: %+v, %v (%d rows)", r0, err, len(rows))
	}
	if m, _ = s.ReplayIndexMarker(); m.Done() || m.Next <= 1 {
		t.Fatalf("marker %+v after two batches", m)
	}
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatalf("half filled: %v", err)
	}
	res, err := s.FillReplayIndex(context.Background(), 16, nil)
	if err != nil || !res.Marker.Done() || res.Batches < 2 {
		t.Fatalf("resumed backfill %+v, %v", res, err)
	}
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatal(err)
	}
	// Break the backfill's work: one entry gone is a row without it.
	k := append(append([]byte(nil), archive.PrefixMarker...), 0xff)
	it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: archive.PrefixByAccount, UpperBound: k})
	if err != nil {
		t.Fatal(err)
	}
	it.First()
	first := append([]byte(nil), it.Key()...)
	it.Close()
	if err := s.DB().Delete(first, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckReplayIndex(); err == nil || !strings.Contains(err.Error(), "has no entry") {
		t.Fatalf("an entry deleted: %v", err)
	}
}
