package archive

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/internal/cputime"
)

// TestOpenMarksOlderReplacements: the first open of a store without
// meta/index (archived before the compaction index, when a replacement's
// sync row reset the account) marks each active account with a sync row in
// ev/ for a replacement, due at the open, in the batch that writes the
// marker; the due index follows (an entry moved for a repo that was
// already due). An inactive account, one without a sync row and one
// without a repo/ state are left alone, and a later open marks nothing.
func TestOpenMarksOlderReplacements(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	resynced, inactive, untouched, stateless, failed := didN(1), didN(2), didN(3), didN(4), didN(5)
	w := newWriter(t, s, WriterOptions{})
	fields := FieldStatus | FieldActive | FieldHost | FieldNextAttempt | FieldError
	apply(t, w, &Unit{Repos: []RepoUpdate{
		{DID: resynced, Fields: fields, State: RepoState{Status: StatusComplete, Active: true, Host: "a.test"}},
		{DID: inactive, Fields: fields, State: RepoState{Status: StatusComplete, Host: "a.test"}},
		{DID: untouched, Fields: fields, State: RepoState{Status: StatusComplete, Active: true, Host: "a.test"}},
		{DID: failed, Fields: fields, State: RepoState{Status: StatusFailed, Active: true, Host: "b.test", NextAttemptUS: 5, ErrClass: "transient"}},
	}})
	w.Close()
	// An older build's rows: creates, then replacements' sync rows.
	b := s.db.NewBatch()
	rows := []Event{commitEv(resynced, "3l00000000001", KindCreate, SourceBackfill, "a"), commitEv(untouched, "3l00000000001", KindCreate, SourceBackfill, "a")}
	for _, did := range []string{resynced, inactive, stateless, failed} {
		rows = append(rows, Event{Kind: KindSync, DID: did, Rev: "3l00000000002", Source: SourceRetry})
	}
	for i := range rows {
		rows[i].Seq, rows[i].TimeUS = uint64(i+1), int64(i+1)
		v, err := AppendEvent(nil, &rows[i])
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Set(EventKey(rows[i].Seq), v, nil)
	}
	_ = b.Delete(KeyIndex, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.Close()

	at := time.UnixMicro(1_000_000)
	opts := optionsAt(fs, &at)
	if s, err := Open("/data", opts); err != nil {
		t.Fatal(err)
	} else {
		want := map[string]RepoState{
			resynced:  {Status: StatusComplete, Active: true, Host: "a.test", Refetch: RefetchSync, NextAttemptUS: at.UnixMicro()},
			inactive:  {Status: StatusComplete, Host: "a.test"},
			untouched: {Status: StatusComplete, Active: true, Host: "a.test"},
			failed:    {Status: StatusFailed, Active: true, Host: "b.test", ErrClass: "transient", Refetch: RefetchSync, NextAttemptUS: at.UnixMicro()},
		}
		for did, st := range want {
			if got, err := s.RepoState(did); err != nil || got != st {
				t.Errorf("%s after the open: %+v (%v), want %+v", did, got, err, st)
			}
		}
		if _, err := s.RepoState(stateless); !errors.Is(err, ErrNotFound) {
			t.Errorf("an account without a repo/ state: %v, want ErrNotFound", err)
		}
		checkDueIndex(t, s, "after the open")
		if m, err := s.IndexMarker(); err != nil || m != (IndexMarker{Next: 1, End: uint64(len(rows) + 1)}) {
			t.Fatalf("meta/index %+v (%v)", m, err)
		}
		s.Close()
	}
	at = at.Add(time.Hour)
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.RepoState(resynced); err != nil || got.NextAttemptUS != 1_000_000 {
		t.Fatalf("a later open marked again: %+v (%v)", got, err)
	}
}

// olderStoreOfMany writes a store as a build before the compaction index
// left it: n active accounts (every third one failed, due at 5, with its
// due/ entry), each with three sync rows in ev/: two in a row (an account
// met again in the batch that marks it) and one after every account's
// first (met again after its mark is committed); and no meta/index.
func olderStoreOfMany(t *testing.T, fs vfs.FS, n int) map[string]RepoState {
	t.Helper()
	s := openMem(t, fs)
	defer s.Close()
	b := s.db.NewBatch()
	defer b.Close()
	states := map[string]RepoState{}
	for i := range n {
		did := didN(i)
		st := RepoState{Status: StatusComplete, Active: true, Host: "a.test", BackfillRev: "3l00000000001", Records: 7, Bytes: 900, CompletedUS: 3}
		if i%3 == 0 {
			st = RepoState{Status: StatusFailed, Active: true, Host: "b.test", ErrClass: "transient", Attempts: 2, LastError: "timeout", NextAttemptUS: 5}
			_ = b.Set(DueKey(st.NextAttemptUS, did), []byte(st.Host), nil)
		}
		v, err := EncodeRepoState(st)
		if err != nil {
			t.Fatal(err)
		}
		_ = b.Set(RepoKey(did), v, nil)
		states[did] = st
		for _, seq := range []uint64{uint64(2*i + 1), uint64(2*i + 2), uint64(2*n + i + 1)} {
			ev := Event{Kind: KindSync, DID: did, Rev: "3l00000000002", Source: SourceRetry, Seq: seq, TimeUS: int64(seq)}
			v, err := AppendEvent(nil, &ev)
			if err != nil {
				t.Fatal(err)
			}
			_ = b.Set(EventKey(seq), v, nil)
		}
	}
	_ = b.Delete(KeyIndex, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return states
}

// checkMarked checks that every account of states (a store of
// olderStoreOfMany) is marked for a replacement due at atUS, its other
// fields as they were, with one due/ entry each, and meta/index set.
func checkMarked(t *testing.T, s *Store, states map[string]RepoState, atUS int64) {
	t.Helper()
	if m, err := s.IndexMarker(); err != nil || m != (IndexMarker{Next: 1, End: uint64(3*len(states) + 1)}) {
		t.Fatalf("meta/index %+v (%v)", m, err)
	}
	for did, st := range states {
		st.Refetch, st.NextAttemptUS = RefetchSync, atUS
		if got, err := s.RepoState(did); err != nil || got != st {
			t.Fatalf("%s: %+v (%v), want %+v", did, got, err, st)
		}
	}
	checkDueIndex(t, s, "after the marks")
}

// optionsAt is testOptions with the clock reading *at.
func optionsAt(fs vfs.FS, at *time.Time) Options {
	opts := testOptions(fs)
	opts.Now = func() time.Time { return *at }
	return opts
}

// TestOpenMarksOlderReplacementsInBatches: the marks of an older store's
// first open are committed in synced batches of at most resyncedBatch
// accounts, none holding meta/index (written after them); every account is
// marked once, whichever of its sync rows comes first.
func TestOpenMarksOlderReplacementsInBatches(t *testing.T) {
	fs := vfs.NewMem()
	n := 2*resyncedBatch + 100
	states := olderStoreOfMany(t, fs, n)
	var batches []int // repo/ keys in each batch of marks
	at := time.UnixMicro(1_000_000)
	opts := optionsAt(fs, &at)
	opts.CommitHook = func(op string, keys [][]byte) error {
		if op != opMarkResynced {
			return nil
		}
		repos := 0
		for _, k := range keys {
			if bytes.Equal(k, KeyIndex) {
				t.Errorf("a batch of marks holds meta/index")
			}
			if bytes.HasPrefix(k, PrefixRepo) {
				repos++
			}
		}
		batches = append(batches, repos)
		return nil
	}
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := []int{resyncedBatch, resyncedBatch, 100}
	if !slices.Equal(batches, want) {
		t.Fatalf("the marks of %d accounts were committed in batches of %v repo/ keys, want %v", n, batches, want)
	}
	checkMarked(t, s, states, at.UnixMicro())
}

// TestOpenMarksOlderReplacementsPowerLoss cuts the power after the first
// batch of marks (strict in-memory filesystem: what was not synced is
// lost): the store reopens without meta/index, and that open marks every
// account again, each once, due at the new open, its other fields kept.
func TestOpenMarksOlderReplacementsPowerLoss(t *testing.T) {
	fs := vfs.NewStrictMem()
	n := resyncedBatch + 100
	states := olderStoreOfMany(t, fs, n)
	batches := 0
	at := time.UnixMicro(1_000_000)
	opts := optionsAt(fs, &at)
	opts.CommitHook = func(op string, _ [][]byte) error {
		if op != opMarkResynced {
			return nil
		}
		if batches++; batches == 2 {
			fs.SetIgnoreSyncs(true) // from here on nothing is durable
		}
		return nil
	}
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
	if batches < 2 {
		t.Fatalf("the marks of %d accounts were committed in %d batches: no cut between two", n, batches)
	}
	if marked, err := markedAt(fs, at.UnixMicro()); err != nil || marked != resyncedBatch {
		t.Fatalf("after the cut: %d accounts marked (%v), want the first batch's %d and no meta/index", marked, err, resyncedBatch)
	}

	opts.CommitHook = nil
	at = at.Add(time.Hour)
	s, err = Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	checkMarked(t, s, states, at.UnixMicro())
}

// markedAt opens the store at /data read-only and counts the accounts
// marked for a replacement due at atUS; a meta/index present is an error.
func markedAt(fs vfs.FS, atUS int64) (int, error) {
	opts := testOptions(fs)
	opts.ReadOnly = true
	s, err := Open("/data", opts)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	if _, err := get(s.db, KeyIndex, DecodeIndexMarker); !errors.Is(err, ErrNotFound) {
		return 0, fmt.Errorf("meta/index: %v, want absent", err)
	}
	n := 0
	err = s.ScanRepos(func(_ string, st RepoState) error {
		if st.Refetch == RefetchSync && st.NextAttemptUS == atUS {
			n++
		}
		return nil
	})
	return n, err
}

// BenchmarkOpenMarksOlderReplacements is the first open of a store from a
// build before the compaction index: one read of every ev/ row (b.N rows
// of 200-byte records, one in 100 a sync row of one of 10 accounts without
// a repo/ state) before Open returns. Reported per row, in CPU.
func BenchmarkOpenMarksOlderReplacements(b *testing.B) {
	benchOpenOlder(b, func(i int) string { return didN(i % 1000) }, false)
}

// BenchmarkOpenMarksOlderReplacementsManyAccounts is that open with every
// sync row an active account of its own: b.N/100 accounts marked.
func BenchmarkOpenMarksOlderReplacementsManyAccounts(b *testing.B) {
	benchOpenOlder(b, didN, true)
}

// benchOpenOlder writes b.N ev/ rows of did(i) (every hundredth a sync
// row; with repos, each sync row's account active and complete), drops
// meta/index and times the open that marks them.
func benchOpenOlder(b *testing.B, did func(i int) string, repos bool) {
	fs := vfs.NewMem()
	s := openMem(b, fs)
	rows := newRawRows(b, s)
	rec := make([]byte, 200)
	st, err := EncodeRepoState(RepoState{Status: StatusComplete, Active: true, Host: "a.test"})
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		ev := commitEv(did(i), "3l00000000001", KindCreate, SourceBackfill, fmt.Sprintf("r%d", i))
		ev.Record = rec
		if i%100 == 0 {
			ev = Event{Kind: KindSync, DID: did(i), Rev: "3l00000000002", Source: SourceRetry}
			if repos {
				rows.set(RepoKey(ev.DID), st)
			}
		}
		rows.event(i, ev)
	}
	rows.done()
	if err := s.db.Delete(KeyIndex, pebble.Sync); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Compact([]byte("ev/"), []byte("ev0"), true); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Compact([]byte("repo/"), []byte("repo0"), true); err != nil {
		b.Fatal(err)
	}
	s.Close()
	b.ResetTimer()
	cpu0 := cputime.Process(b)
	s, err = Open("/data", testOptions(fs))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/row")
	b.StopTimer()
	s.Close()
}
