package archive

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestRatchet(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	m := NewMetrics(prometheus.NewRegistry())
	w := newWriter(t, s, WriterOptions{Metrics: m})
	defer w.Close()

	// A backfill snapshot at rev 05 sets the ratchet; its rows all pass.
	r := apply(t, w, &Unit{Events: []Event{
		commitEv(testDID, "05", KindCreate, SourceBackfill, "a"),
		commitEv(testDID, "05", KindCreate, SourceBackfill, "b"),
	}})
	if r.Kept != 2 || r.Stale != 0 {
		t.Fatalf("backfill: %+v", r)
	}
	if rev, _ := s.Rev(testDID); rev != "05" {
		t.Fatalf("ratchet after backfill: %q", rev)
	}
	// A second backfill chunk at the same snapshot rev still passes.
	if r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "05", KindCreate, SourceBackfill, "c")}}); r.Kept != 1 {
		t.Fatalf("second backfill chunk: %+v", r)
	}

	for _, tc := range []struct {
		name    string
		evs     []Event
		kept    int
		rowless int // upstream #syncs: they move the ratchet, no row
	}{
		{"live older than snapshot", []Event{commitEv(testDID, "03", KindCreate, SourceLive, "x")}, 0, 0},
		{"live at the snapshot rev", []Event{commitEv(testDID, "05", KindUpdate, SourceLive, "a")}, 0, 0},
		{"merged at the snapshot rev", []Event{commitEv(testDID, "05", KindDelete, SourceMerge, "a")}, 0, 0},
		{"sync at the snapshot rev", []Event{{Kind: KindSync, DID: testDID, Rev: "05", Source: SourceLive}}, 0, 0},
		{"live newer, three ops of one commit", []Event{
			commitEv(testDID, "07", KindCreate, SourceLive, "d"),
			commitEv(testDID, "07", KindUpdate, SourceLive, "a"),
			commitEv(testDID, "07", KindDelete, SourceLive, "b"),
		}, 3, 0},
		{"replayed frame of that commit", []Event{commitEv(testDID, "07", KindCreate, SourceLive, "d")}, 0, 0},
		{"identity and account always pass", []Event{
			{Kind: KindIdentity, DID: testDID, Handle: "a.test", Source: SourceLive},
			{Kind: KindAccount, DID: testDID, Active: false, Status: "deactivated", Source: SourceMerge},
		}, 2, 0},
		{"other account is independent", []Event{commitEv(didN(2), "01", KindCreate, SourceLive, "a")}, 1, 0},
		{"merged sync, newer: the ratchet moves, no row", []Event{{Kind: KindSync, DID: testDID, Rev: "09", Source: SourceMerge}}, 0, 1},
	} {
		r := apply(t, w, &Unit{Events: tc.evs})
		if r.Kept != tc.kept {
			t.Errorf("%s: receipt %+v, want %d kept", tc.name, r, tc.kept)
		}
		if r.Kept+r.Stale+tc.rowless != len(tc.evs) {
			t.Errorf("%s: kept %d + stale %d + rowless %d != %d", tc.name, r.Kept, r.Stale, tc.rowless, len(tc.evs))
		}
	}
	if rev, _ := s.Rev(testDID); rev != "09" {
		t.Fatalf("ratchet: %q, want 09", rev)
	}
	if got := testutil.ToFloat64(m.staleRows.WithLabelValues("live")); got != 4 {
		t.Errorf("stale live rows = %v, want 4", got)
	}
	if got := testutil.ToFloat64(m.staleRows.WithLabelValues("merge")); got != 1 {
		t.Errorf("stale merge rows = %v, want 1", got)
	}
	assertRevsNeverBackwards(t, s)
}

// The ratchet of an account the writer's cache does not hold is read from
// rev/ whenever the cache may not hold every row: after a restart on a store
// with rev/ rows, and after the cache was dropped for its size. (On a store
// that had none, a miss is "" without a read.)
func TestRatchetReadsTheStoreUnlessTheCacheHoldsEveryRow(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	if !w.revCache.all {
		t.Fatal("a writer on a new store does not know it holds every rev/ row")
	}
	if r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "05", KindCreate, SourceBackfill, "a")}}); r.Kept != 1 {
		t.Fatalf("backfill: %+v", r)
	}
	// The writer goroutine waits for a unit: the test may fill its cache
	// (the next Apply's send orders these writes before its reads).
	for i := range ratchetCacheMax {
		w.revCache.put(didN(i+10), "01")
	}
	if r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "03", KindCreate, SourceLive, "x")}}); r.Kept != 0 {
		t.Fatalf("a live row older than the archived rev after the cache was dropped: %+v, want stale", r)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = newWriter(t, s, WriterOptions{})
	defer w.Close()
	if r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "04", KindCreate, SourceLive, "y")}}); r.Kept != 0 {
		t.Fatalf("a live row older than the archived rev after a restart: %+v, want stale", r)
	}
	if r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "06", KindCreate, SourceLive, "z")}}); r.Kept != 1 {
		t.Fatalf("a newer live row after a restart: %+v, want kept", r)
	}
}

// A repo state the writer's cache does not hold is read from repo/
// whenever the cache may not hold every row: after a restart on a store
// with repo/ rows, and after the cache was dropped for its size. (On a
// store that had none, a miss is "no state" without a read.) The state a
// mutation sees is the last one committed either way.
func TestRepoStateReadsTheStoreUnlessTheCacheHoldsEveryRow(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	if !w.repoMem.all {
		t.Fatal("a writer on a new store does not know it holds every repo/ row")
	}
	seen := func(want uint32) func(RepoState, bool) (RepoState, bool) {
		return func(cur RepoState, exists bool) (RepoState, bool) {
			if !exists || cur.Attempts != want || cur.Status != StatusFailed {
				t.Errorf("mutation sees %+v (exists %v), want failed after %d attempts", cur, exists, want)
			}
			cur.Attempts++
			return cur, true
		}
	}
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: testDID, Fields: FieldStatus | FieldAttempts, State: RepoState{Status: StatusFailed, Attempts: 1}}}})
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: testDID, Func: seen(1)}}})
	// The writer goroutine waits for a unit: the test may fill its cache
	// (the next Apply's send orders these writes before its reads).
	for i := range RepoCacheStates {
		w.repoMem.put(didN(i+10), RepoState{Status: StatusNotStarted})
	}
	if w.repoMem.all {
		t.Fatal("the cache was dropped and still claims every repo/ row")
	}
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: testDID, Func: seen(2)}}})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w = newWriter(t, s, WriterOptions{})
	defer w.Close()
	if w.repoMem.all {
		t.Fatal("a writer on a store with repo/ rows claims to hold every one")
	}
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: testDID, Func: seen(3)}}})
	if st, err := s.RepoState(testDID); err != nil || st.Attempts != 4 {
		t.Fatalf("repo/ holds %+v %v, want 4 attempts", st, err)
	}
	if c := w.DurableCounts(); c.Get(StatusFailed) != 1 || c.Total() != 1 {
		t.Fatalf("counts %+v, want the one failed repo", c)
	}
}

// assertRevsNeverBackwards checks D3 over the whole archive.
func assertRevsNeverBackwards(t *testing.T, s *Store) {
	t.Helper()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	last := map[string]string{}
	var prevSeq uint64
	var prevUS int64
	for it.Next() {
		ev := it.Event()
		if ev.Seq <= prevSeq || ev.TimeUS < prevUS {
			t.Fatalf("seq %d after %d / time %d after %d", ev.Seq, prevSeq, ev.TimeUS, prevUS)
		}
		prevSeq, prevUS = ev.Seq, ev.TimeUS
		if ev.Rev != "" {
			if ev.Rev < last[ev.DID] {
				t.Fatalf("%s: rev %s after %s at seq %d", ev.DID, ev.Rev, last[ev.DID], ev.Seq)
			}
			last[ev.DID] = ev.Rev
		}
	}
	if it.Err() != nil {
		t.Fatal(it.Err())
	}
}

func TestReplacement(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	apply(t, w, &Unit{Events: []Event{commitEv(testDID, "05", KindCreate, SourceLive, "a")}})

	// A snapshot older than the archive is refused whole: nothing applied.
	r := apply(t, w, &Unit{
		Replace: &Replacement{DID: testDID, Rev: "04", Final: true},
		Events:  []Event{{Kind: KindSync, DID: testDID, Rev: "04", Source: SourceRetry}, commitEv(testDID, "04", KindCreate, SourceRetry, "z")},
		Repos:   []RepoUpdate{{DID: testDID, Fields: FieldStatus, State: RepoState{Status: StatusComplete}}},
	})
	if !errors.Is(r.Refused, ErrStaleReplacement) || r.Kept != 0 {
		t.Fatalf("stale replacement: %+v", r)
	}
	if _, err := s.RepoState(testDID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused unit changed repo state: %v", err)
	}
	// At or above the ratchet it applies and moves the ratchet.
	r = apply(t, w, &Unit{
		Replace: &Replacement{DID: testDID, Rev: "08", Final: true},
		Events:  []Event{{Kind: KindSync, DID: testDID, Rev: "08", Source: SourceRetry}, commitEv(testDID, "08", KindCreate, SourceRetry, "z")},
	})
	if r.Refused != nil || r.Kept != 2 {
		t.Fatalf("replacement: %+v", r)
	}
	if rev, _ := s.Rev(testDID); rev != "08" {
		t.Fatalf("ratchet %q", rev)
	}
	// A live commit older than the replacement is now stale; a newer one passes.
	if r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "06", KindCreate, SourceLive, "q")}}); r.Kept != 0 {
		t.Fatalf("old live commit kept: %+v", r)
	}
	if r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "09", KindCreate, SourceLive, "q")}}); r.Kept != 1 {
		t.Fatalf("new live commit dropped: %+v", r)
	}
}

func TestRepoUpdatesAndCounts(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	w := newWriter(t, s, WriterOptions{Metrics: m})

	// New repos need a status.
	r := apply(t, w, &Unit{Repos: []RepoUpdate{{DID: testDID, Fields: FieldActive, State: RepoState{Active: true}}}})
	if r.Refused == nil {
		t.Fatal("status-less new repo accepted")
	}
	var ups []RepoUpdate
	for i := 0; i < 5; i++ {
		ups = append(ups, RepoUpdate{DID: didN(i), Fields: FieldStatus | FieldActive, State: RepoState{Status: StatusNotStarted, Active: i != 4}})
	}
	apply(t, w, &Unit{Repos: ups})
	// Field-level: completing didN(0) keeps its Active flag.
	apply(t, w, &Unit{Repos: []RepoUpdate{
		{DID: didN(0), Fields: FieldStatus | FieldBackfillRev | FieldHost, State: RepoState{Status: StatusComplete, BackfillRev: "05", Host: "pds1:443"}},
		{DID: didN(1), Fields: FieldStatus | FieldError | FieldAttempts, State: RepoState{Status: StatusFailed, ErrClass: "transient", LastError: "503", Attempts: 4}},
		{DID: didN(1), Fields: FieldNextAttempt, State: RepoState{NextAttemptUS: 77}},
	}})
	st, err := s.RepoState(didN(0))
	if err != nil || st.Status != StatusComplete || !st.Active || st.BackfillRev != "05" || st.Host != "pds1:443" {
		t.Fatalf("repo 0: %+v %v", st, err)
	}
	st, _ = s.RepoState(didN(1))
	if st.Status != StatusFailed || st.Attempts != 4 || st.NextAttemptUS != 77 || st.LastError != "503" || !st.Active {
		t.Fatalf("repo 1: %+v", st)
	}
	want := Counts{Inactive: 1}
	want.ByStatus[StatusNotStarted] = 3
	want.ByStatus[StatusComplete] = 1
	want.ByStatus[StatusFailed] = 1
	want.FailedByClass = map[string]int64{"transient": 1}
	if c, err := s.Counts(); err != nil || !reflect.DeepEqual(c, want) {
		t.Fatalf("counts %+v %v, want %+v", c, err, want)
	}
	if got := testutil.ToFloat64(m.repos.WithLabelValues("complete")); got != 1 {
		t.Errorf("backstream_repos{complete} = %v", got)
	}
	// Func updates decide against the current state, atomically.
	reactivate := func(cur RepoState, exists bool) (RepoState, bool) {
		if !exists || cur.Active {
			return cur, false
		}
		cur.Active, cur.Refetch = true, RefetchReactivated
		return cur, true
	}
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: didN(4), Func: reactivate}, {DID: didN(3), Func: reactivate}, {DID: didN(99), Func: reactivate}}})
	if st, _ := s.RepoState(didN(4)); !st.Active || st.Refetch != RefetchReactivated || st.Status != StatusNotStarted {
		t.Fatalf("func update: %+v", st)
	}
	if st, _ := s.RepoState(didN(3)); st.Refetch != RefetchNone {
		t.Fatalf("func update wrote when it said not to: %+v", st)
	}
	if _, err := s.RepoState(didN(99)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("func update created a repo: %v", err)
	}
	want.Inactive = 0
	if c, _ := s.Counts(); !reflect.DeepEqual(c, want) {
		t.Fatalf("counts after reactivation %+v, want %+v", c, want)
	}
	// Puts: cursors yes, writer-owned keys no.
	cur, _ := EncodeListCursor(ListCursor{Cursor: "p2"})
	if r := apply(t, w, &Unit{Puts: []KV{{Key: KeyCursorListRepos, Value: cur}}}); r.Refused != nil {
		t.Fatal(r.Refused)
	}
	// Repo updates without a DID, or naming no (or unknown) fields.
	for _, up := range []RepoUpdate{
		{Fields: FieldActive, State: RepoState{Active: true, Status: StatusComplete}},
		{DID: didN(4), State: RepoState{Active: true, Status: StatusComplete}},
		{DID: didN(4), Fields: 1 << 30, State: RepoState{Active: true, Status: StatusComplete}},
	} {
		if r := apply(t, w, &Unit{Repos: []RepoUpdate{up}}); !errors.Is(r.Refused, errInvalidUnit) {
			t.Errorf("repo update %+v: refusal %v, want invalid", up, r.Refused)
		}
	}
	for _, k := range [][]byte{KeyCounts, KeyInstance, KeyCompaction, KeyDueIndex, KeyIndex, KeyReplayIndex, RevKey(testDID), RepoKey(testDID), EventKey(1), CaptureKey(1), []byte("zzz")} {
		if r := apply(t, w, &Unit{Puts: []KV{{Key: k, Value: []byte{1}}}}); r.Refused == nil {
			t.Errorf("put of %q accepted", k)
		}
	}
	w.Close()
	s.Close()
	// Counts survive a restart and keep being maintained from there.
	s = openMem(t, fs)
	defer s.Close()
	w = newWriter(t, s, WriterOptions{})
	defer w.Close()
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: didN(4), Fields: FieldActive | FieldStatus, State: RepoState{Active: true, Status: StatusComplete}}}})
	want.ByStatus[StatusNotStarted] = 2
	want.ByStatus[StatusComplete] = 2
	if c, _ := s.Counts(); !reflect.DeepEqual(c, want) {
		t.Fatalf("counts after restart %+v, want %+v", c, want)
	}
}

func TestSeqAndTimeAcrossRestart(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	clock := time.UnixMicro(1_700_000_000_000_000)
	var now atomic.Int64
	now.Store(clock.UnixMicro())
	nowf := func() time.Time { return time.UnixMicro(now.Load()) }
	w := newWriter(t, s, WriterOptions{Now: nowf})
	r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "01", KindCreate, SourceLive, "a"), commitEv(testDID, "01", KindCreate, SourceLive, "b")}})
	if r.FirstSeq != 1 || r.LastSeq != 2 {
		t.Fatalf("first receipt %+v", r)
	}
	now.Add(-5_000_000) // the wall clock steps back 5 s
	r = apply(t, w, &Unit{Events: []Event{{Kind: KindIdentity, DID: testDID, Source: SourceLive}}})
	if r.FirstSeq != 3 {
		t.Fatalf("second receipt %+v", r)
	}
	w.Close()
	s.Close()

	s = openMem(t, fs)
	defer s.Close()
	now.Add(-60_000_000) // and further back across the restart
	w = newWriter(t, s, WriterOptions{Now: nowf})
	defer w.Close()
	r = apply(t, w, &Unit{Events: []Event{{Kind: KindIdentity, DID: testDID, Source: SourceLive}}})
	if r.FirstSeq != 4 {
		t.Fatalf("seq after restart %+v", r)
	}
	it, _ := s.Events(0)
	defer it.Close()
	var times []int64
	for it.Next() {
		times = append(times, it.Event().TimeUS)
	}
	if len(times) != 4 {
		t.Fatalf("%d events", len(times))
	}
	// One microsecond apart along seqs, the clock's steps back ignored; the
	// restart seeds from the tip's time, not from the earlier clock.
	c := clock.UnixMicro()
	if want := []int64{c, c + 1, c + 2, c + 3}; !reflect.DeepEqual(times, want) {
		t.Fatalf("times %v, want %v", times, want)
	}
}

// TestTimeStrictlyIncreasesPerEvent: a frozen clock and big units (one unit
// of 300 rows, then several units in one batch) still give every event its
// own time_us, and SeqAtTime maps each event's time back to exactly its seq
// — a client resuming by time_us lands on the one event it named, not on
// the first of a batch sharing its time.
func TestTimeStrictlyIncreasesPerEvent(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	const c = 1_700_000_000_000_000
	w := newWriter(t, s, WriterOptions{Now: func() time.Time { return time.UnixMicro(c) }})
	defer w.Close()
	big := make([]Event, 300)
	for i := range big {
		big[i] = commitEv(didN(i), "01", KindCreate, SourceLive, "a")
	}
	apply(t, w, &Unit{Events: big})
	// Units submitted together share a batch (group commit).
	acks := make(chan struct{}, 8)
	for i := 0; i < 8; i++ {
		go func() {
			apply(t, w, &Unit{Events: []Event{{Kind: KindIdentity, DID: didN(1000 + i), Source: SourceLive}, {Kind: KindIdentity, DID: didN(2000 + i), Source: SourceLive}}})
			acks <- struct{}{}
		}()
	}
	for i := 0; i < 8; i++ {
		<-acks
	}
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for it.Next() {
		ev := it.Event()
		if want := int64(c) + int64(ev.Seq) - 1; ev.TimeUS != want {
			t.Fatalf("seq %d time %d, want %d", ev.Seq, ev.TimeUS, want)
		}
		got, err := s.SeqAtTime(ev.TimeUS)
		if err != nil || got != ev.Seq {
			t.Fatalf("SeqAtTime(%d) = %d, %v; want seq %d", ev.TimeUS, got, err, ev.Seq)
		}
		n++
	}
	if it.Err() != nil || n != 316 {
		t.Fatalf("%d events, err %v", n, it.Err())
	}
}

func TestCaptureWriter(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	cw := newWriter(t, s, WriterOptions{Capture: true})
	defer cw.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	r := apply(t, cw, &Unit{
		Events: []Event{commitEv(testDID, "01", KindCreate, SourceLive, "a"), commitEv(testDID, "01", KindCreate, SourceLive, "a")},
		Cursor: SeqCursor{Key: KeyCursorRelay, Seq: 1234},
	})
	if r.Kept != 2 || r.FirstSeq != 1 {
		t.Fatalf("capture receipt %+v", r)
	}
	if c, err := s.RelayCursor(); err != nil || c != 1234 {
		t.Fatalf("relay cursor %d %v", c, err)
	}
	if _, err := s.Rev(testDID); !errors.Is(err, ErrNotFound) {
		t.Fatal("capture moved the ratchet")
	}
	if r := apply(t, w, &Unit{Events: []Event{commitEv(testDID, "01", KindCreate, SourceLive, "a")}}); r.FirstSeq != 1 {
		t.Fatalf("ev/ does not have its own seq space: %+v", r)
	}
	if tip, _ := s.CaptureTip(); tip != 2 {
		t.Fatalf("capture tip %d", tip)
	}
	if r := apply(t, cw, &Unit{Repos: []RepoUpdate{{DID: testDID, Fields: FieldStatus, State: RepoState{Status: StatusPending}}}}); r.Refused == nil {
		t.Fatal("capture writer accepted a repo mutation")
	}
}

func TestReceiptsOnlyAfterDurableAndLiveLog(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	wake := w.Live().Wait()
	acks := NewAcks()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		if err := w.Submit(ctx, &Unit{Token: i, Acks: acks, Events: []Event{{Kind: KindIdentity, DID: didN(i), Source: SourceLive}}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []Receipt
	for len(got) < 100 {
		select {
		case <-acks.Ready():
			for _, r := range acks.Drain(nil) {
				// A receipt means durable: the row is readable from the store.
				it, _ := s.Events(r.FirstSeq)
				if !it.Next() || it.Event().Seq != r.FirstSeq {
					t.Fatalf("receipt for seq %d before the row is in the store", r.FirstSeq)
				}
				it.Close()
				got = append(got, r)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("receipts did not arrive")
		}
	}
	for i, r := range got {
		if r.Token != i || r.FirstSeq != uint64(i+1) {
			t.Fatalf("receipt %d out of order: %+v", i, r)
		}
	}
	<-wake
	evs, floor := w.Live().Read(1, nil, 1000)
	if floor != 1 || len(evs) != 100 || evs[99].Seq != 100 || w.Live().Tip() != 100 {
		t.Fatalf("live log: floor %d, %d events, tip %d", floor, len(evs), w.Live().Tip())
	}
	if evs, _ := w.Live().Read(95, nil, 2); len(evs) != 2 || evs[0].Seq != 95 {
		t.Fatalf("live read from 95: %v", evs)
	}
}

func TestLiveLogBound(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{LiveLogBytes: 10 << 10})
	defer w.Close()
	for i := 0; i < 200; i++ {
		apply(t, w, &Unit{Events: []Event{realisticEvent(i)}})
	}
	evs, floor := w.Live().Read(0, nil, 1000)
	if floor <= 1 || len(evs) == 0 || evs[len(evs)-1].Seq != 200 || uint64(len(evs)) != 200-floor+1 {
		t.Fatalf("bounded live log: floor %d, %d events", floor, len(evs))
	}
}

// TestWriterFatalOnWriteError: a failed WAL write stops the writer with an
// error naming the data dir; Submit fails afterwards; nothing is published.
func TestWriterFatalOnWriteError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"EIO", errors.New("injected EIO"), "check the disk and restart"},
		{"ENOSPC", syscall.ENOSPC, "disk full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var armed atomic.Bool
			fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if armed.Load() && (op == errorfs.OpFileWrite || op == errorfs.OpFileSync) && strings.HasSuffix(path, ".log") {
					return tc.err
				}
				return nil
			}))
			s := openMem(t, fs)
			w := newWriter(t, s, WriterOptions{})
			apply(t, w, &Unit{Events: []Event{{Kind: KindIdentity, DID: testDID, Source: SourceLive}}})
			armed.Store(true)
			acks := NewAcks()
			_ = w.Submit(context.Background(), &Unit{Acks: acks, Events: []Event{{Kind: KindIdentity, DID: testDID, Source: SourceLive}}})
			select {
			case <-w.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("writer did not stop")
			}
			err := w.Err()
			if err == nil || !strings.Contains(err.Error(), "/data") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("fatal error %q lacks the data dir or %q", err, tc.want)
			}
			if len(acks.Drain(nil)) != 0 {
				t.Fatal("a receipt was sent for a failed batch")
			}
			if w.Live().Tip() != 1 {
				t.Fatalf("live tip %d after failed batch", w.Live().Tip())
			}
			if err := w.Submit(context.Background(), &Unit{}); err == nil {
				t.Fatal("submit succeeded after a fatal error")
			}
			// Pebble v1.1.5 panics on the next write after a WAL failure;
			// the writer made none. Closing may report the same error.
			func() {
				defer func() { recover() }()
				s.Close()
			}()
		})
	}
}
