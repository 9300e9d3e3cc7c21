package archive_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/churn"
)

// TestCompactPowerLoss cuts the power at every batch of a pass (Pebble's
// strict in-memory filesystem: what was not synced is lost): for k = 0…n,
// the intent and the first k removal batches are durable, nothing after.
// After reopening, the store holds a superset of the survivors (nothing
// that is not superseded was removed) with the intent still there and the
// watermark not moved back; the next pass rolls the intent forward and the
// store then equals the recomputation.
func TestCompactPowerLoss(t *testing.T) {
	build := func(t *testing.T, hook func(op string, keys [][]byte) error) (*vfs.MemFS, *archive.Store, *archive.Writer, []archive.Event, uint64) {
		fs := vfs.NewStrictMem()
		s := openStore(t, fs, hook)
		w := startWriter(t, s)
		tr := churn.New(7, 12)
		rows := applyUnits(t, w, tr.Units(300))
		first := compact(t, s, w, archive.CompactOptions{Logger: quiet}) // an earlier pass: W moves from it
		rows = append(rows, applyUnits(t, w, tr.Units(300))...)
		return fs, s, w, rows, first.To
	}
	// How many removal batches does the pass take?
	fs, s, w, _, _ := build(t, nil)
	opts := archive.CompactOptions{Logger: quiet}
	archive.SetCompactBatchBytes(&opts, 1)
	n := compact(t, s, w, opts).Batches
	w.Close()
	s.Close()
	_ = fs
	if n < 3 {
		t.Fatalf("the pass took %d batches; the sweep needs several", n)
	}
	for k := 0; k <= n; k++ {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			var s *archive.Store
			var fs *vfs.MemFS
			armed, batches := false, 0
			hook := func(op string, _ [][]byte) error {
				if !armed || (!strings.HasPrefix(op, "commit a compaction batch") && op != "commit the compaction watermark") {
					return nil
				}
				// Everything before this commit is durable (a WAL sync
				// by the writer's next batch, say); from here on, nothing.
				if batches == k {
					if err := s.DB().LogData(nil, pebble.Sync); err != nil {
						return err
					}
					fs.SetIgnoreSyncs(true)
				}
				batches++
				return nil
			}
			var w *archive.Writer
			var rows []archive.Event
			var oldW uint64
			fs, s, w, rows, oldW = build(t, hook)
			armed = true
			res := compact(t, s, w, opts)
			if res.Batches != n {
				t.Fatalf("%d batches, the sweep expected %d", res.Batches, n)
			}
			w.Close()
			s.Close()
			fs.ResetToSyncedState()
			fs.SetIgnoreSyncs(false)

			s = openStore(t, fs, nil)
			defer s.Close()
			st, err := s.Compaction()
			if err != nil {
				t.Fatal(err)
			}
			if st.Watermark != oldW || st.Intent == nil || st.Intent.W != res.To {
				t.Fatalf("after the cut: %+v (intent %v), want the watermark %d and an intent for %d", st, st.Intent, oldW, res.To)
			}
			want := check.Survivors(rows, res.To)
			got := storeRows(t, s)
			for _, ev := range rows {
				if _, ok := got[ev.Seq]; want[ev.Seq] && !ok {
					t.Fatalf("seq %d removed though it is not superseded", ev.Seq)
				}
			}
			// Per account, all or nothing: a reader never sees half of one
			// account's removal.
			before := check.Survivors(rows, oldW)
			pass, gone := map[string]int{}, map[string]int{}
			for _, ev := range rows {
				if before[ev.Seq] && !want[ev.Seq] {
					pass[ev.DID]++
					if _, ok := got[ev.Seq]; !ok {
						gone[ev.DID]++
					}
				}
			}
			for did, n := range gone {
				if n != pass[did] {
					t.Fatalf("%s: %d of the %d rows the pass removes are gone: half an account's removal is durable", did, n, pass[did])
				}
			}
			removed := len(rows) - len(got)
			w = startWriter(t, s)
			defer w.Close()
			again := compact(t, s, w, archive.CompactOptions{Logger: quiet})
			if !again.RolledOver || again.To != res.To || again.From != oldW {
				t.Fatalf("roll forward: %+v, want the intent's watermark %d from %d", again, res.To, oldW)
			}
			checkSurvivors(t, s, rows, res.To)
			t.Logf("cut after %d of %d batches: %d rows removed before the cut, %d by the roll forward", k, n, removed, again.Rows)
		})
	}
}

// TestCompactMalformedState: a malformed tombstone, index entry, intent or
// watermark stops the pass with ErrCompactionState naming the key; the
// watermark does not move and nothing that is not superseded is removed.
func TestCompactMalformedState(t *testing.T) {
	for _, tc := range malformedStates {
		t.Run(tc.name, func(t *testing.T) {
			s := openStore(t, vfs.NewMem(), nil)
			defer s.Close()
			w := startWriter(t, s)
			defer w.Close()
			rows := applyUnits(t, w, churn.New(3, 8).Units(400))
			key := tc.corrupt(t, s, rows)
			before, _ := s.Compaction()
			_, err := s.Compact(context.Background(), w, archive.CompactOptions{Logger: quiet})
			if !errors.Is(err, archive.ErrCompactionState) || !errors.Is(err, archive.ErrMalformed) {
				t.Fatalf("pass over a malformed %s: %v, want ErrCompactionState", tc.name, err)
			}
			if !strings.Contains(err.Error(), archive.KeyString(key)) {
				t.Fatalf("the error does not name %q: %v", key, err)
			}
			// Nothing that is not superseded was removed.
			want := check.Survivors(rows, 1<<62)
			got := storeRows(t, s)
			for _, ev := range rows {
				if _, ok := got[ev.Seq]; want[ev.Seq] && !ok {
					t.Fatalf("seq %d removed though it is not superseded", ev.Seq)
				}
			}
			if after, err := s.Compaction(); err == nil && after.Watermark != before.Watermark {
				t.Fatalf("the watermark moved %d → %d over a malformed state", before.Watermark, after.Watermark)
			}
			t.Logf("%v", err)
		})
	}
}

// malformedStates are the compaction state's malformations, each made on a
// store holding rows: index says which a rebuilt index repairs (rec/,
// tomb/, meta/index), as against the pass's own state (the intent, the
// watermark), which the reset deletes.
var malformedStates = []struct {
	name    string
	index   bool
	corrupt func(t *testing.T, s *archive.Store, rows []archive.Event) []byte // returns the key
}{
	{"tombstone value", true, func(t *testing.T, s *archive.Store, rows []archive.Event) []byte {
		for _, ev := range rows {
			if ev.Kind == archive.KindDelete {
				return set(t, s, archive.TombKey(ev.DID, ev.Seq), []byte{1, 9, 0, 0})
			}
		}
		t.Fatal("no delete row")
		return nil
	}},
	{"tombstone naming a row not older than itself", true, func(t *testing.T, s *archive.Store, rows []archive.Event) []byte {
		for _, ev := range rows {
			if ev.Kind == archive.KindDelete {
				v, err := archive.AppendTomb(nil, archive.Tomb{Kind: archive.KindDelete, Collection: ev.Collection, RKey: ev.RKey,
					Named: true, Superseded: []archive.SupersededRow{{Seq: ev.Seq, Size: 100}}})
				if err != nil {
					t.Fatal(err)
				}
				return set(t, s, archive.TombKey(ev.DID, ev.Seq), v)
			}
		}
		t.Fatal("no delete row")
		return nil
	}},
	{"tombstone at a create's seq", true, func(t *testing.T, s *archive.Store, rows []archive.Event) []byte {
		// No row's index entries would write this key again.
		for _, ev := range rows {
			if ev.Kind == archive.KindCreate {
				return set(t, s, archive.TombKey(ev.DID, ev.Seq), []byte{1, 9, 0, 0})
			}
		}
		t.Fatal("no create row")
		return nil
	}},
	{"index value", true, func(t *testing.T, s *archive.Store, rows []archive.Event) []byte {
		// A create entry a purge supersedes: the pass reads every entry of the account.
		have := keysUnder(t, s, archive.PrefixRecord)
		for _, ev := range rows {
			k := archive.RecordKey(ev.DID, ev.Collection, ev.RKey, ev.Seq)
			if ev.Kind == archive.KindCreate && have[string(k)] && purgedAfter(rows, ev) {
				return set(t, s, k, []byte{7})
			}
		}
		t.Fatal("no create entry a purge supersedes")
		return nil
	}},
	{"run value", true, func(t *testing.T, s *archive.Store, rows []archive.Event) []byte {
		have := keysUnder(t, s, archive.PrefixRecord)
		for _, ev := range rows {
			k := archive.RunKey(ev.DID, ev.Collection, ev.Seq)
			if ev.Kind == archive.KindCreate && have[string(k)] && purgedAfter(rows, ev) {
				return set(t, s, k, []byte{4, 1, 1, 0, 0})
			}
		}
		t.Fatal("no run entry a purge supersedes")
		return nil
	}},
	{"index value without a size", true, func(t *testing.T, s *archive.Store, rows []archive.Event) []byte {
		for _, ev := range rows {
			if ev.Kind == archive.KindCreate && !check.Survivors(rows, 1<<62)[ev.Seq] {
				return set(t, s, archive.RecordKey(ev.DID, ev.Collection, ev.RKey, ev.Seq), []byte{2, 0})
			}
		}
		t.Fatal("no superseded create")
		return nil
	}},
	{"intent", false, func(t *testing.T, s *archive.Store, _ []archive.Event) []byte {
		return set(t, s, archive.KeyCompactIntent, []byte{1, 2, 3})
	}},
	{"watermark", false, func(t *testing.T, s *archive.Store, _ []archive.Event) []byte {
		return set(t, s, archive.KeyCompaction, []byte{2, 0, 0, 0, 0, 0, 0, 0, 0})
	}},
	{"index marker", true, func(t *testing.T, s *archive.Store, _ []archive.Event) []byte {
		return set(t, s, archive.KeyIndex, []byte{0x01, 2})
	}},
}

func set(t *testing.T, s *archive.Store, key, value []byte) []byte {
	t.Helper()
	if err := s.DB().Set(key, value, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return key
}

// purgedAfter reports whether a later row of rows purges ev's account.
func purgedAfter(rows []archive.Event, ev archive.Event) bool {
	for _, r := range rows {
		if r.Seq > ev.Seq && r.DID == ev.DID && r.Kind == archive.KindAccount && archive.AccountStatusPurges(r.Status) {
			return true
		}
	}
	return false
}

// TestCompactResetIntent: a malformed intent halts compaction until
// ResetCompactionIntent removes it; the next pass then computes everything
// from tomb/ and the watermark.
func TestCompactResetIntent(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	defer w.Close()
	rows := applyUnits(t, w, churn.New(5, 8).Units(300))
	set(t, s, archive.KeyCompactIntent, []byte{1})
	if _, err := s.Compact(context.Background(), w, archive.CompactOptions{Logger: quiet}); !errors.Is(err, archive.ErrCompactionState) {
		t.Fatalf("pass over a malformed intent: %v", err)
	}
	if _, _, err := s.ResetCompactionIntent(); err != nil {
		t.Fatal(err)
	}
	res := compact(t, s, w, archive.CompactOptions{Logger: quiet})
	checkSurvivors(t, s, rows, res.To)
}

// TestCompactResetMalformedWatermark: a malformed meta/compaction halts
// compaction, and the halt names `backstream compaction reset` as the
// recovery; the reset drops the watermark too (absent is 0), so the next
// pass recomputes from tomb/ and removes exactly what is superseded.
func TestCompactResetMalformedWatermark(t *testing.T) {
	s := openStore(t, vfs.NewMem(), nil)
	defer s.Close()
	w := startWriter(t, s)
	defer w.Close()
	tr := churn.New(5, 8)
	rows := applyUnits(t, w, tr.Units(150))
	compact(t, s, w, archive.CompactOptions{Logger: quiet})
	rows = append(rows, applyUnits(t, w, tr.Units(150))...)
	set(t, s, archive.KeyCompaction, []byte{0x01, 0x02})
	if _, err := s.Compact(context.Background(), w, archive.CompactOptions{Logger: quiet}); !errors.Is(err, archive.ErrCompactionState) {
		t.Fatalf("pass over a malformed watermark: %v", err)
	}
	if _, _, err := s.ResetCompactionIntent(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Compaction(); err != nil {
		t.Fatalf("the compaction state after the reset: %v", err)
	}
	res := compact(t, s, w, archive.CompactOptions{Logger: quiet})
	checkSurvivors(t, s, rows, res.To)
}

// TestCompactCrashPoints: the pass passes compaction-intent once after its
// intent batch, compaction-batch after each removal batch, and
// compaction-done once after the watermark batch; a pass that rolls an
// intent forward writes no intent and passes no compaction-intent.
func TestCompactCrashPoints(t *testing.T) {
	// pass runs a pass over fresh traffic with point armed far past its
	// passes (it counts, never fires) and reports how often it was passed.
	pass := func(roll bool, point string) (int64, archive.CompactResult) {
		s := openStore(t, vfs.NewMem(), nil)
		defer s.Close()
		w := startWriter(t, s)
		defer w.Close()
		applyUnits(t, w, churn.New(9, 10).Units(300))
		if roll {
			v, err := archive.EncodeCompactIntent(archive.CompactIntent{W: w.Live().Tip() + 1, Started: time.Unix(1, 0)})
			if err != nil {
				t.Fatal(err)
			}
			set(t, s, archive.KeyCompactIntent, v)
		}
		cp, err := crashpoint.Parse(point + ":1000000")
		if err != nil {
			t.Fatal(err)
		}
		opts := archive.CompactOptions{Logger: quiet, Crash: cp}
		archive.SetCompactBatchBytes(&opts, 1)
		res := compact(t, s, w, opts)
		return cp.Seen(), res
	}
	for _, roll := range []bool{false, true} {
		intent, _ := pass(roll, crashpoint.CompactionIntent)
		batches, res := pass(roll, crashpoint.CompactionBatch)
		done, _ := pass(roll, crashpoint.CompactionDone)
		wantIntent := int64(1)
		if roll {
			wantIntent = 0
		}
		if intent != wantIntent || res.Batches < 2 || batches != int64(res.Batches) || done != 1 || res.RolledOver != roll {
			t.Fatalf("rolled over %v (%v): intent passed %d (want %d), batch %d (want %d), done %d (want 1)",
				roll, res.RolledOver, intent, wantIntent, batches, res.Batches, done)
		}
	}
}

// TestCompactReindexRepairsTheIndex: a malformed rec/, tomb/ or meta/index
// value halts every pass, and deleting the intent does not repair it (the
// next pass reads the same value). ResetIndex drops the compaction index and
// marks every row unindexed; after the index backfill, with the writer
// archiving before and after it, the next pass removes exactly what is
// superseded, the rows an earlier pass removed staying removed.
func TestCompactReindexRepairsTheIndex(t *testing.T) {
	for _, tc := range malformedStates {
		if !tc.index {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			opts := archive.CompactOptions{Logger: quiet}
			s := openStore(t, vfs.NewMem(), nil)
			defer s.Close()
			w := startWriter(t, s)
			tr := churn.New(3, 8)
			rows := applyUnits(t, w, tr.Units(200))
			compact(t, s, w, opts)
			rows = append(rows, applyUnits(t, w, tr.Units(200))...)
			tc.corrupt(t, s, rows)
			if _, _, err := s.ResetCompactionIntent(); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Compact(ctx, w, opts); !errors.Is(err, archive.ErrCompactionState) {
				t.Fatalf("a pass after the intent's reset: %v, want it still halted", err)
			}
			w.Close()
			m, err := s.ResetIndex()
			if err != nil {
				t.Fatal(err)
			}
			if tip := rows[len(rows)-1].Seq; m != (archive.IndexMarker{Next: 1, End: tip + 1}) {
				t.Fatalf("marker after the reset %+v, want every row from 1 to %d unindexed", m, tip)
			}
			if err := s.IndexReady(); !errors.Is(err, archive.ErrIndexPending) || errors.Is(err, archive.ErrCompactionState) {
				t.Fatalf("index after the reset: %v, want pending and well-formed", err)
			}
			w = startWriter(t, s)
			defer w.Close()
			rows = append(rows, applyUnits(t, w, tr.Units(100))...) // archived while the backfill is pending
			if _, err := s.FillIndex(ctx, 64, nil); err != nil {
				t.Fatalf("index backfill after the reset: %v", err)
			}
			rows = append(rows, applyUnits(t, w, tr.Units(100))...)
			res := compact(t, s, w, opts)
			checkSurvivors(t, s, rows, res.To)
		})
	}
}
