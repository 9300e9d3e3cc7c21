package archive

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
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
	opts := testOptions(fs)
	opts.Now = func() time.Time { return at }
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

// BenchmarkOpenMarksOlderReplacements is the first open of a store from a
// build before the compaction index: one read of every ev/ row (b.N rows
// of 200-byte records, one account in 100 with a sync row) before Open
// returns. Reported per row.
func BenchmarkOpenMarksOlderReplacements(b *testing.B) {
	fs := vfs.NewMem()
	s := openMem(b, fs)
	batch := s.db.NewBatch()
	rec := make([]byte, 200)
	for i := 0; i < b.N; i++ {
		ev := commitEv(didN(i%1000), "3l00000000001", KindCreate, SourceBackfill, fmt.Sprintf("r%d", i))
		ev.Record = rec
		if i%100 == 0 {
			ev = Event{Kind: KindSync, DID: didN(i % 1000), Rev: "3l00000000002", Source: SourceRetry}
		}
		ev.Seq, ev.TimeUS = uint64(i+1), int64(i+1)
		v, err := AppendEvent(nil, &ev)
		if err != nil {
			b.Fatal(err)
		}
		_ = batch.Set(EventKey(ev.Seq), v, nil)
		if batch.Len() > 16<<20 {
			if err := batch.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			batch = s.db.NewBatch()
		}
	}
	_ = batch.Delete(KeyIndex, nil)
	if err := batch.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Compact([]byte("ev/"), []byte("ev0"), true); err != nil {
		b.Fatal(err)
	}
	s.Close()
	b.ResetTimer()
	s, err := Open("/data", testOptions(fs))
	if err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	s.Close()
}
