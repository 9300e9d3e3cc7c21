package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/churn"
)

// TestCompactionOwner_IndexBackfill: over a store archived without the
// compaction index, the owner runs the index backfill before any pass
// (logging its start and end once, showing it on /status and in the
// gauge); the merging pass waits for it and then removes exactly what the
// recomputation says is superseded. Without the backfill (fillIndex
// returning at once) the pass reports the index pending and removes
// nothing, which fails the survivor check.
func TestCompactionOwner_IndexBackfill(t *testing.T) {
	fs := vfs.NewMem()
	opts := archive.Options{FS: fs, Logger: slog.New(slog.DiscardHandler)}
	s, err := archive.Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	var rows []archive.Event
	for _, u := range churn.New(11, 12).Units(400) {
		if r, err := w.Apply(t.Context(), &archive.Unit{Events: u}); err != nil || r.Refused != nil || r.Kept != len(u) {
			t.Fatalf("apply: %v %+v", err, r)
		}
		rows = append(rows, u...)
	}
	w.Close()
	// An older backstream's store: no index, no marker.
	b := s.DB().NewBatch()
	_ = b.DeleteRange(archive.PrefixRecord, []byte("rec0"), nil)
	_ = b.DeleteRange(archive.PrefixTomb, []byte("tomb0"), nil)
	_ = b.Delete(archive.KeyIndex, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.Close()

	if s, err = archive.Open("/data", opts); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if w, err = archive.NewWriter(s, archive.WriterOptions{Logger: opts.Logger}); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	reg, logs := prometheus.NewRegistry(), new(bytes.Buffer)
	c := newCompactor(compactionConfig{store: storeCompaction{s: s, w: w, opts: archive.CompactOptions{Logger: opts.Logger}},
		archive: s, interval: -1, check: DefaultCompactionCheck, now: time.Now,
		log: slog.New(slog.NewTextHandler(logs, nil)), metrics: newCompactionMetrics(reg)})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	if err := c.MergingPass(t.Context()); err != nil {
		t.Fatal(err)
	}
	st := c.Status()
	tip := rows[len(rows)-1].Seq
	if st.Index == nil || !st.Index.Done || st.Index.End != tip+1 || st.Passes != 1 {
		t.Fatalf("status after the merging pass: %+v (index %+v)", st, st.Index)
	}
	if v := promtest.Value(t, reg, "backstream_compaction_index_backfill_remaining_seqs", nil); v != 0 {
		t.Fatalf("remaining seqs %v after the backfill", v)
	}
	want := check.Survivors(rows, st.Watermark)
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for it.Next() {
		if !want[it.Event().Seq] {
			t.Fatalf("seq %d survived the pass though it is superseded", it.Event().Seq)
		}
		got++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if got != len(want) || got == len(rows) {
		t.Fatalf("%d rows survive, the recomputation keeps %d of %d", got, len(want), len(rows))
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"index backfill: start", "index backfill: done"} {
		if n := strings.Count(logs.String(), line); n != 1 {
			t.Fatalf("%q logged %d times:\n%s", line, n, logs)
		}
	}
}

// TestCompactionOwner_ReplayIndexBackfill: over a store archived without
// the replay index, the owner fills it between passes, a slice of each
// check tick, until the index matches ev/ (CheckReplayIndex); /status and
// the gauge follow it, and its start and end are logged once each.
func TestCompactionOwner_ReplayIndexBackfill(t *testing.T) {
	fs := vfs.NewMem()
	opts := archive.Options{FS: fs, Logger: slog.New(slog.DiscardHandler)}
	s, err := archive.Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range churn.New(12, 12).Units(400) {
		if r, err := w.Apply(t.Context(), &archive.Unit{Events: u}); err != nil || r.Refused != nil || r.Kept != len(u) {
			t.Fatalf("apply: %v %+v", err, r)
		}
	}
	w.Close()
	// A store archived before the replay index: none of it, no marker.
	b := s.DB().NewBatch()
	_ = b.DeleteRange(archive.PrefixByCollection, []byte("xn"), nil) // xc/, xd/, xm/
	_ = b.Delete(archive.KeyReplayIndex, nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = archive.Open("/data", opts); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m, err := s.ReplayIndexMarker(); err != nil || m.Done() {
		t.Fatalf("marker %+v, %v on reopening", m, err)
	}
	if w, err = archive.NewWriter(s, archive.WriterOptions{Logger: opts.Logger}); err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	reg, logs := prometheus.NewRegistry(), new(bytes.Buffer)
	c := newCompactor(compactionConfig{store: storeCompaction{s: s, w: w, opts: archive.CompactOptions{Logger: opts.Logger}},
		archive: s, interval: -1, check: 5 * time.Millisecond, now: time.Now,
		log: slog.New(slog.NewTextHandler(logs, nil)), metrics: newCompactionMetrics(reg)})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- c.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for st := c.Status(); st.ReplayIndex == nil || !st.ReplayIndex.Done; st = c.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("replay index backfill not done: %+v", st.ReplayIndex)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatal(err)
	}
	if v := promtest.Value(t, reg, "backstream_replay_index_backfill_remaining_seqs", nil); v != 0 {
		t.Fatalf("remaining seqs %v after the backfill", v)
	}
	for _, line := range []string{"replay index backfill: start", "replay index backfill: done"} {
		if n := strings.Count(logs.String(), line); n != 1 {
			t.Fatalf("%q logged %d times:\n%s", line, n, logs)
		}
	}
}
