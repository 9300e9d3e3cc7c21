package node

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/churn"
)

// legacyStore archives churn units (seed) in a fresh in-memory store, then
// strips what an older backstream did not write (strip's batch), and
// reopens it with a writer, as that backstream's upgrade would. It returns
// the archived rows.
func legacyStore(t *testing.T, seed uint64, strip func(b *pebble.Batch)) (*archive.Store, *archive.Writer, []archive.Event) {
	t.Helper()
	opts := archive.Options{FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)}
	s, err := archive.Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: opts.Logger})
	if err != nil {
		t.Fatal(err)
	}
	var rows []archive.Event
	for _, u := range churn.New(seed, 12).Units(400) {
		if r, err := w.Apply(t.Context(), &archive.Unit{Events: u}); err != nil || r.Refused != nil || r.Kept != len(u) {
			t.Fatalf("apply: %v %+v", err, r)
		}
		rows = append(rows, u...)
	}
	w.Close()
	b := s.DB().NewBatch()
	strip(b)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s, err = archive.Open("/data", opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if w, err = archive.NewWriter(s, archive.WriterOptions{Logger: opts.Logger}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return s, w, rows
}

// stopOwner stops r and requires each line logged exactly once.
func stopOwner(t *testing.T, r *ownerRig, lines ...string) {
	t.Helper()
	r.stop()
	if err := <-r.errc; err != nil {
		t.Fatal(err)
	}
	for _, line := range lines {
		if n := strings.Count(r.logs.String(), line); n != 1 {
			t.Fatalf("%q logged %d times:\n%s", line, n, r.logs)
		}
	}
}

// legacyOwner runs an owner over a legacyStore's s and w, checking every
// check.
func legacyOwner(t *testing.T, s *archive.Store, w *archive.Writer, check time.Duration) *ownerRig {
	return runOwner(t, compactionConfig{store: storeCompaction{s: s, w: w, opts: archive.CompactOptions{Logger: slog.New(slog.DiscardHandler)}},
		archive: s, interval: -1, check: check, now: time.Now})
}

// TestCompactionOwner_IndexBackfill: over a store archived without the
// compaction index, the owner runs the index backfill before any pass
// (logging its start and end once, showing it on /status and in the
// gauge); the merging pass waits for it and then removes exactly what the
// recomputation says is superseded. Without the backfill (fillIndex
// returning at once) the pass reports the index pending and removes
// nothing, which fails the survivor check.
func TestCompactionOwner_IndexBackfill(t *testing.T) {
	// An older backstream's store: no index, no marker.
	s, w, rows := legacyStore(t, 11, func(b *pebble.Batch) {
		_ = b.DeleteRange(archive.PrefixRecord, []byte("rec0"), nil)
		_ = b.DeleteRange(archive.PrefixTomb, []byte("tomb0"), nil)
		_ = b.Delete(archive.KeyIndex, nil)
	})
	o := legacyOwner(t, s, w, DefaultCompactionCheck)
	c, reg := o.c, o.reg
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
	stopOwner(t, o, "index backfill: start", "index backfill: done")
}

// TestCompactionOwner_ReplayIndexBackfill: over a store archived without
// the replay index, the owner fills it between passes, a slice of each
// check tick, until the index matches ev/ (CheckReplayIndex); /status and
// the gauge follow it, and its start and end are logged once each.
func TestCompactionOwner_ReplayIndexBackfill(t *testing.T) {
	// A store archived before the replay index: none of it, no marker.
	s, w, _ := legacyStore(t, 12, func(b *pebble.Batch) {
		_ = b.DeleteRange(archive.PrefixByCollection, []byte("xn"), nil) // xc/, xd/, xm/
		_ = b.Delete(archive.KeyReplayIndex, nil)
	})
	if m, err := s.ReplayIndexMarker(); err != nil || m.Done() {
		t.Fatalf("marker %+v, %v on reopening", m, err)
	}
	o := legacyOwner(t, s, w, 5*time.Millisecond)
	c, reg := o.c, o.reg
	deadline := time.Now().Add(20 * time.Second)
	for st := c.Status(); st.ReplayIndex == nil || !st.ReplayIndex.Done; st = c.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("replay index backfill not done: %+v", st.ReplayIndex)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopOwner(t, o, "replay index backfill: start", "replay index backfill: done")
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatal(err)
	}
	if v := promtest.Value(t, reg, "backstream_replay_index_backfill_remaining_seqs", nil); v != 0 {
		t.Fatalf("remaining seqs %v after the backfill", v)
	}
}

// busyTombstones is a store whose writer has written a tombstone more at
// every look: a pass is due at every check tick, as on a network deleting
// faster than the threshold.
type busyTombstones struct {
	storeCompaction
	n atomic.Uint64
}

func (b *busyTombstones) TombstonesWritten() uint64 { return b.n.Add(1) }

// TestCompactionOwner_ReplayIndexBackfillBesidePasses: a pass due at every
// check tick does not starve the replay index backfill; it still gets its
// slice of each tick and ends.
func TestCompactionOwner_ReplayIndexBackfillBesidePasses(t *testing.T) {
	s, w, _ := legacyStore(t, 12, func(b *pebble.Batch) {
		_ = b.DeleteRange(archive.PrefixByCollection, []byte("xn"), nil) // xc/, xd/, xm/
		_ = b.Delete(archive.KeyReplayIndex, nil)
	})
	store := &busyTombstones{storeCompaction: storeCompaction{s: s, w: w, opts: archive.CompactOptions{Logger: slog.New(slog.DiscardHandler)}}}
	o := runOwner(t, compactionConfig{store: store, archive: s, interval: -1, tombstones: 1, check: 5 * time.Millisecond, now: time.Now})
	c := o.c
	deadline := time.Now().Add(20 * time.Second)
	for st := c.Status(); st.ReplayIndex == nil || !st.ReplayIndex.Done; st = c.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("replay index backfill not done after %d passes, one due at every tick: %+v", st.Passes, st.ReplayIndex)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// A small store's backfill may end within the first tick's slice: at
	// least that tick's pass ran first.
	if st := c.Status(); st.Passes < 1 {
		t.Fatalf("%d passes ran: want one at every tick, the backfill beside them", st.Passes)
	}
	stopOwner(t, o, "replay index backfill: start", "replay index backfill: done")
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatal(err)
	}
}
