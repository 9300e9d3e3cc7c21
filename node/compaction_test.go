package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
)

// fakeCompaction counts the passes the owner asks for and answers what the
// test set. The schedule is the owner's; the pass itself is the archive's
// (its own tests, and the process tests in oracle/crash, run the real one).
type fakeCompaction struct {
	mu     sync.Mutex
	passes []time.Time
	err    error // what Compact returns
	intent bool  // an interrupted pass is pending
	tombs  uint64
	block  chan struct{} // when set, Compact waits on it
	w      uint64
	state  error // what Compaction returns (a malformed watermark, say)
}

func (f *fakeCompaction) Compact(ctx context.Context) (archive.CompactResult, error) {
	f.mu.Lock()
	block := f.block
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return archive.CompactResult{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.passes = append(f.passes, time.Now())
	if f.err != nil {
		return archive.CompactResult{}, f.err
	}
	f.intent = false
	f.w += 10
	return archive.CompactResult{To: f.w, Rows: 3, Bytes: 300, Tombstones: 2, Duration: time.Second}, nil
}

func (f *fakeCompaction) Compaction() (archive.CompactionState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := archive.CompactionState{Watermark: f.w}
	if f.intent {
		st.Intent = &archive.CompactIntent{}
	}
	return st, f.state
}

func (f *fakeCompaction) TombstonesWritten() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tombs
}

func (f *fakeCompaction) IndexMarker() (archive.IndexMarker, error) {
	return archive.IndexMarker{}, nil
}

func (f *fakeCompaction) FillIndex(context.Context, func(archive.IndexMarker)) (archive.IndexFillResult, error) {
	return archive.IndexFillResult{}, nil
}

func (f *fakeCompaction) ReplayIndexMarker() (archive.IndexMarker, error) {
	return archive.IndexMarker{}, nil
}

func (f *fakeCompaction) FillReplayIndex(context.Context, func(archive.IndexMarker)) (archive.IndexFillResult, error) {
	return archive.IndexFillResult{}, nil
}

func (f *fakeCompaction) set(fn func(f *fakeCompaction)) {
	f.mu.Lock()
	fn(f)
	f.mu.Unlock()
}

func (f *fakeCompaction) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.passes)
}

type ownerRig struct {
	c    *compactor
	fake *fakeCompaction
	reg  *prometheus.Registry
	logs *bytes.Buffer
	errc chan error
	stop context.CancelFunc
}

// startOwner runs an owner over fake on the bubble's clock: a pass every
// hour, early at 100 pending tombstones, checked every second.
func startOwner(t *testing.T, fake *fakeCompaction) *ownerRig {
	r := runOwner(t, compactionConfig{store: fake, interval: time.Hour, tombstones: 100, check: time.Second, now: time.Now})
	r.fake = fake
	return r
}

// runOwner runs an owner of cfg, logging to the rig's buffer and counting
// on its registry, until the test ends or r.stop.
func runOwner(t *testing.T, cfg compactionConfig) *ownerRig {
	r := &ownerRig{reg: prometheus.NewRegistry(), logs: new(bytes.Buffer), errc: make(chan error, 1)}
	cfg.log, cfg.metrics = slog.New(slog.NewTextHandler(r.logs, nil)), newCompactionMetrics(r.reg)
	r.c = newCompactor(cfg)
	ctx, cancel := context.WithCancel(t.Context())
	r.stop = cancel
	go func() { r.errc <- r.c.Run(ctx) }()
	return r
}

// after lets the bubble's clock run d, then requires want passes so far.
func (r *ownerRig) after(t *testing.T, d time.Duration, want int, when string) {
	t.Helper()
	time.Sleep(d)
	synctest.Wait()
	if n := r.fake.count(); n != want {
		t.Fatalf("%d passes %s, want %d", n, when, want)
	}
}

// TestCompactionOwner_Schedule: a pass runs every interval (counted from
// the end of the last), early when the writer's tombstones since the last
// pass reach the threshold, on request at the end of merging, and not
// otherwise. Breaking the tombstone check (due always false) fails the
// early-pass step.
func TestCompactionOwner_Schedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		fake := &fakeCompaction{}
		r := startOwner(t, fake)
		r.after(t, 59*time.Minute, 0, "before the first interval")
		r.after(t, 2*time.Minute, 1, "after one interval")
		// 99 tombstones: not yet; 100: a pass within the check period.
		fake.set(func(f *fakeCompaction) { f.tombs = 99 })
		r.after(t, 5*time.Second, 1, "at 99 pending tombstones")
		if v := promtest.Value(t, r.reg, "backstream_compaction_tombstones_pending", nil); v != 99 {
			t.Fatalf("tombstones pending %v, want 99", v)
		}
		fake.set(func(f *fakeCompaction) { f.tombs = 199 })
		r.after(t, 2*time.Second, 2, "at 100 pending tombstones")
		// The early pass restarted the interval.
		r.after(t, 59*time.Minute, 2, "within an interval of the early pass")
		if err := r.c.MergingPass(t.Context()); err != nil {
			t.Fatal(err)
		}
		if n := fake.count(); n != 3 {
			t.Fatalf("%d passes after the merging pass, want 3", n)
		}
		st := r.c.Status()
		if st.Passes != 3 || st.Watermark != 30 || st.LastRows != 3 || st.LastBytes != 300 || st.LastTombstones != 2 || st.LastPassSeconds != 1 || st.Halted {
			t.Fatalf("status %+v", st)
		}
		for name, want := range map[string]float64{
			"backstream_compaction_rows_removed_total": 9, "backstream_compaction_bytes_removed_total": 900,
			"backstream_compaction_watermark": 30, "backstream_compaction_interval_seconds": 3600,
		} {
			if v := promtest.Value(t, r.reg, name, nil); v != want {
				t.Errorf("%s = %v, want %v", name, v, want)
			}
		}
		if v := promtest.Value(t, r.reg, "backstream_compaction_passes_total", map[string]string{"outcome": "ok"}); v != 3 {
			t.Errorf("ok passes %v, want 3", v)
		}
		r.stop()
		if err := <-r.errc; err != nil {
			t.Fatal(err)
		}
	})
}

// TestCompactionOwner_IntentAtStartup: an interrupted pass is finished at
// once by the owner's goroutine, without waiting for the interval, and a
// pass that takes long does not hold up anything but the owner (Run's
// caller is not blocked). Breaking it (no intent check) leaves the pass
// to the interval and fails.
func TestCompactionOwner_IntentAtStartup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		fake := &fakeCompaction{intent: true, block: release}
		r := startOwner(t, fake)
		synctest.Wait() // the owner is blocked inside the pass; the test goes on
		if n := fake.count(); n != 0 {
			t.Fatalf("%d passes before the release", n)
		}
		close(release)
		synctest.Wait()
		if n := fake.count(); n != 1 {
			t.Fatalf("%d passes after startup with an intent, want 1", n)
		}
		if st, _ := fake.Compaction(); st.Intent != nil {
			t.Fatal("the intent is still there")
		}
		r.stop()
		if err := <-r.errc; err != nil {
			t.Fatal(err)
		}
	})
}

// TestCompactionOwner_ShowsThePassItRuns: the pass a start finishes in the
// background (an interrupted pass's intent), like every pass, is logged when
// it starts and shown while it runs: /status compaction.running with its
// reason and start, and backstream_compaction_running at 1; both cleared
// when it ends. At the network's size such a pass may run for long after
// the start, with nothing else saying so.
func TestCompactionOwner_ShowsThePassItRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		fake := &fakeCompaction{intent: true, block: release}
		started := time.Now()
		r := startOwner(t, fake)
		synctest.Wait() // the owner is blocked inside the pass
		if !strings.Contains(r.logs.String(), `msg="compaction pass: start" reason=intent`) {
			t.Fatalf("no line says the pass started; the log:\n%s", r.logs)
		}
		st := r.c.Status()
		if st.Running == nil || st.Running.Reason != reasonIntent || !st.Running.Since.Equal(started) {
			t.Fatalf("status while the pass runs: running %+v, want reason %s since %v", st.Running, reasonIntent, started)
		}
		if v := promtest.Value(t, r.reg, "backstream_compaction_running", nil); v != 1 {
			t.Fatalf("backstream_compaction_running %v while the pass runs, want 1", v)
		}
		close(release)
		synctest.Wait()
		if st := r.c.Status(); st.Running != nil {
			t.Fatalf("status after the pass: running %+v, want none", st.Running)
		}
		if v := promtest.Value(t, r.reg, "backstream_compaction_running", nil); v != 0 {
			t.Fatalf("backstream_compaction_running %v after the pass, want 0", v)
		}
		r.stop()
		if err := <-r.errc; err != nil {
			t.Fatal(err)
		}
	})
}

// TestCompactionOwner_HaltsOnMalformedState: a pass that meets a malformed
// compaction state halts compaction — one ERROR line naming the key and the
// recovery command, the halted gauge, /status — and the owner keeps
// running without passing again (no loop), the merging pass is skipped
// rather than failing merging; a store I/O error instead ends Run with the
// error (fatal like every persistence error). Breaking it (treating the
// state error like any other) makes Run return it and fails.
// TestCompactionOwner_HaltsOnTooLargeAccount: a pass that fails with
// archive.ErrCompactionTooLarge halts compaction (one pass, no retry),
// naming the account, with the larger bound as the recovery; Run goes on.
func TestCompactionOwner_HaltsOnTooLargeAccount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tooLarge := fmt.Errorf("archive: compaction: account did:plc:big: %w: passed 1073741900 bytes", archive.ErrCompactionTooLarge)
		fake := &fakeCompaction{err: tooLarge}
		r := startOwner(t, fake)
		time.Sleep(61 * time.Minute)
		synctest.Wait()
		fake.set(func(f *fakeCompaction) { f.tombs = 1000 })
		time.Sleep(5 * time.Hour)
		synctest.Wait()
		if n := fake.count(); n != 1 {
			t.Fatalf("%d passes, want 1", n)
		}
		st := r.c.Status()
		if !st.Halted || !strings.Contains(st.HaltReason, "did:plc:big") || !strings.Contains(st.HaltRecovery, "larger --compaction-max-account-batch") {
			t.Fatalf("status %+v, want halted naming the account and the larger bound", st)
		}
		if v := promtest.Value(t, r.reg, "backstream_compaction_passes_total", map[string]string{"outcome": "halted"}); v != 1 {
			t.Fatalf("halted passes %v", v)
		}
		r.stopHalted(t)
	})
}

// stopHalted checks that Run goes on while compaction is halted, then
// stops it.
func (r *ownerRig) stopHalted(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.errc:
		t.Fatalf("Run returned %v while halted", err)
	default:
	}
	r.stop()
	if err := <-r.errc; err != nil {
		t.Fatal(err)
	}
}

func TestCompactionOwner_HaltsOnMalformedState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := fmt.Errorf("archive: tomb/did:plc:x: %w (%w)", archive.ErrCompactionState, archive.ErrMalformed)
		fake := &fakeCompaction{err: bad}
		r := startOwner(t, fake)
		time.Sleep(61 * time.Minute)
		synctest.Wait()
		if n := fake.count(); n != 1 {
			t.Fatalf("%d passes, want 1", n)
		}
		st := r.c.Status()
		if !st.Halted || !strings.Contains(st.HaltReason, "tomb/did:plc:x") {
			t.Fatalf("status %+v, want halted naming the key", st)
		}
		if v := promtest.Value(t, r.reg, "backstream_compaction_halted", nil); v != 1 {
			t.Fatalf("halted gauge %v", v)
		}
		if v := promtest.Value(t, r.reg, "backstream_compaction_passes_total", map[string]string{"outcome": "halted"}); v != 1 {
			t.Fatalf("halted passes %v", v)
		}
		time.Sleep(5 * time.Hour)
		fake.set(func(f *fakeCompaction) { f.tombs = 1000 })
		r.after(t, time.Minute, 1, "after the halt")
		if err := r.c.MergingPass(t.Context()); err != nil {
			t.Fatalf("merging pass while halted: %v", err)
		}
		logs := r.logs.String()
		if n := strings.Count(logs, "level=ERROR"); n != 1 || !strings.Contains(logs, "backstream compaction reset --data-dir") {
			t.Fatalf("%d ERROR lines, want 1 with the recovery path:\n%s", n, logs)
		}
		r.stopHalted(t)

		// A store I/O error is fatal.
		ioErr := &archive.KeyError{Key: "ev/…", Kind: archive.ErrRead, Err: errors.New("input/output error")}
		r = startOwner(t, &fakeCompaction{err: ioErr})
		time.Sleep(61 * time.Minute)
		synctest.Wait()
		select {
		case err := <-r.errc:
			if !errors.Is(err, archive.ErrRead) {
				t.Fatalf("Run returned %v, want the read error", err)
			}
		default:
			t.Fatal("Run goes on after a store I/O error")
		}
		if r.c.Status().Halted {
			t.Fatal("an I/O error halted compaction instead of stopping the process")
		}
		r.stop()
	})
}

// TestCompactionOwner_HaltAtStartCounts: a malformed compaction state the
// start reads (the watermark), before any pass, halts compaction as a
// pass's would, and counts the halt once in
// backstream_compaction_passes_total{outcome="halted"}: the operator the
// lagging alert sends to the passes by outcome sees why none ran. No pass
// runs after it, and the count stays at one.
func TestCompactionOwner_HaltAtStartCounts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bad := fmt.Errorf("archive: meta/compaction: %w (%w)", archive.ErrCompactionState, archive.ErrMalformed)
		fake := &fakeCompaction{state: bad}
		r := startOwner(t, fake)
		fake.set(func(f *fakeCompaction) { f.tombs = 1000 })
		r.after(t, 3*time.Hour, 0, "after a halt at start")
		if v := promtest.Value(t, r.reg, "backstream_compaction_halted", nil); v != 1 {
			t.Fatalf("halted gauge %v, want 1", v)
		}
		if v := promtest.Value(t, r.reg, "backstream_compaction_passes_total", map[string]string{"outcome": "halted"}); v != 1 {
			t.Fatalf("backstream_compaction_passes_total{outcome=\"halted\"} %v after a halt at start, want 1", v)
		}
		r.stopHalted(t)
	})
}

// TestHaltRecoveryNamesWhatRepairsIt: the halt's ERROR line sends the
// operator to `backstream compaction reset` for the pass's own state, to
// the reset with --reindex for the compaction index (a malformed rec/ or
// tomb/ entry or meta/index, which the plain reset leaves for the next
// pass to halt on again), and to a checkpoint for a malformed archived row.
func TestHaltRecoveryNamesWhatRepairsIt(t *testing.T) {
	malformed := func(key []byte) error {
		return fmt.Errorf("archive: %w: %w", archive.ErrCompactionState,
			&archive.KeyError{Key: string(key), Kind: archive.ErrMalformed, Err: errors.New("2 bytes")})
	}
	for _, tc := range []struct {
		key            []byte
		want, unwanted string
	}{
		{archive.KeyCompaction, "compaction reset --data-dir /d", "--reindex"},
		{archive.KeyCompactIntent, "compaction reset --data-dir /d", "--reindex"},
		{archive.TombKey("did:plc:x", 7), "compaction reset --reindex --data-dir /d", "checkpoint"},
		{archive.RecordKey("did:plc:x", "app.bsky.feed.post", "3l", 7), "compaction reset --reindex --data-dir /d", "checkpoint"},
		{archive.EventKey(7), "checkpoint", "--data-dir"},
	} {
		if got := HaltRecovery(malformed(tc.key), "/d"); !strings.Contains(got, tc.want) || strings.Contains(got, tc.unwanted) {
			t.Errorf("%q: recovery %q, want %q and not %q", tc.key, got, tc.want, tc.unwanted)
		}
	}
	// The store's own error for a malformed marker.
	s, err := archive.Open("/d", archive.Options{FS: vfs.NewMem(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.DB().Set(archive.KeyIndex, []byte{0x01, 2}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	_, err = s.IndexMarker()
	if got := HaltRecovery(err, "/d"); !errors.Is(err, archive.ErrCompactionState) || !strings.Contains(got, "compaction reset --reindex --data-dir /d") {
		t.Errorf("meta/index (%v): recovery %q, want the reset with --reindex", err, got)
	}
}
