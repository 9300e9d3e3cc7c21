package node

// compaction.go owns the node's compaction owner: the one goroutine that
// runs the archive's compaction passes (the store's Compact) on a schedule,
// early when enough tombstones are pending, once at startup to finish an
// interrupted pass, and on request at the end of merging; and that halts
// compaction, not the process, on a malformed compaction state.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/crashpoint"
)

// Defaults of the compaction schedule (serve's --compaction-interval and
// --compaction-tombstones).
const (
	// DefaultCompactionInterval is the time between the end of one pass
	// and the start of the next.
	DefaultCompactionInterval = time.Hour
	// DefaultCompactionTombstones starts a pass early once the writer has
	// written this many tombstones since the last pass started.
	DefaultCompactionTombstones = 1_000_000
	// DefaultCompactionCheck is how often the owner reads the writer's
	// tombstone count and refreshes the lag figures: two seeks and a
	// counter read.
	DefaultCompactionCheck = time.Second
)

// Pass outcomes, the label of backstream_compaction_passes_total.
const (
	passOK     = "ok"
	passHalted = "halted"
	passFailed = "failed"
)

// Why a pass ran (its log line says).
const (
	reasonIntent     = "intent"
	reasonInterval   = "interval"
	reasonTombstones = "tombstones"
	reasonMerging    = "merging"
)

// compactionStore is the part of the archive the owner drives (the store
// and its writer; tests give a fake to drive the schedule).
type compactionStore interface {
	Compact(ctx context.Context) (archive.CompactResult, error)
	Compaction() (archive.CompactionState, error)
	TombstonesWritten() uint64
	IndexMarker() (archive.IndexMarker, error)
	FillIndex(ctx context.Context, progress func(archive.IndexMarker)) (archive.IndexFillResult, error)
	ReplayIndexMarker() (archive.IndexMarker, error)
	FillReplayIndex(ctx context.Context, progress func(archive.IndexMarker)) (archive.IndexFillResult, error)
}

// storeCompaction is the real one.
type storeCompaction struct {
	s    *archive.Store
	w    *archive.Writer
	opts archive.CompactOptions
}

func (a storeCompaction) Compact(ctx context.Context) (archive.CompactResult, error) {
	return a.s.Compact(ctx, a.w, a.opts)
}
func (a storeCompaction) Compaction() (archive.CompactionState, error) { return a.s.Compaction() }
func (a storeCompaction) TombstonesWritten() uint64                    { return a.w.TombstonesWritten() }
func (a storeCompaction) IndexMarker() (archive.IndexMarker, error)    { return a.s.IndexMarker() }
func (a storeCompaction) FillIndex(ctx context.Context, progress func(archive.IndexMarker)) (archive.IndexFillResult, error) {
	return a.s.FillIndex(ctx, 0, a.batchDone(progress))
}
func (a storeCompaction) ReplayIndexMarker() (archive.IndexMarker, error) {
	return a.s.ReplayIndexMarker()
}
func (a storeCompaction) FillReplayIndex(ctx context.Context, progress func(archive.IndexMarker)) (archive.IndexFillResult, error) {
	return a.s.FillReplayIndex(ctx, 0, a.batchDone(progress))
}

// batchDone is progress, then the crash point of a backfill batch: the
// progress callback runs after each batch's synced commit.
func (a storeCompaction) batchDone(progress func(archive.IndexMarker)) func(archive.IndexMarker) {
	return func(m archive.IndexMarker) {
		if progress != nil {
			progress(m)
		}
		a.opts.Crash.Hit(crashpoint.IndexFillBatch)
	}
}

// CompactionStatus is the compaction section of /status. Watermark and
// the lags come from the store; the rest is this process's.
type CompactionStatus struct {
	Watermark  uint64  `json:"watermark"`
	LagSeqs    uint64  `json:"lag_seqs"`
	LagSeconds float64 `json:"lag_seconds"`
	// Interval is the schedule in seconds (0: periodic passes are off).
	Interval          float64    `json:"interval_seconds"`
	TombstonesPending uint64     `json:"tombstones_pending"`
	Passes            int64      `json:"passes"`
	LastPassAt        *time.Time `json:"last_pass_at,omitempty"`
	LastPassSeconds   float64    `json:"last_pass_seconds"`
	LastRows          int64      `json:"last_rows_removed"`
	LastBytes         int64      `json:"last_bytes_removed"`
	LastTombstones    int64      `json:"last_tombstones"`
	Halted            bool       `json:"halted"`
	HaltReason        string     `json:"halt_reason,omitempty"`
	HaltRecovery      string     `json:"halt_recovery,omitempty"` // what the operator does about it (HaltRecovery)
	// Running is the pass in progress (absent between passes): why it runs
	// and since when. A start finishes an interrupted pass in the
	// background, and at the network's size a pass may run for long.
	Running *CompactionRun `json:"running,omitempty"`
	// Intent is the watermark of an interrupted pass's intent
	// (`backstream status` only: a running node finishes it).
	Intent *uint64 `json:"intent_watermark,omitempty"`
	// Index is the index backfill of a store archived before the writer
	// kept the compaction index (absent when the store never needed one).
	Index *IndexBackfillStatus `json:"index_backfill,omitempty"`
	// ReplayIndex is the replay index's backfill of a store archived
	// before the writer kept it (absent when the store never needed one):
	// filtered replays scan until it is done.
	ReplayIndex *IndexBackfillStatus `json:"replay_index_backfill,omitempty"`
}

// CompactionRun is the pass in progress: the reason it runs (intent,
// interval, tombstones, merging) and when it started.
type CompactionRun struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// IndexBackfillStatus is the index backfill's progress: the ev/ rows from
// Next up to End are not indexed yet; no pass runs until Done.
type IndexBackfillStatus struct {
	Next uint64 `json:"next_seq"`
	End  uint64 `json:"end_seq"`
	Done bool   `json:"done"`
}

// CompactionLag reads how far the watermark w is behind the archive's tip:
// in seqs (w to the tip), and in seconds as the tip's time minus the time
// of the first row at or after w (two seeks). Both are 0 when no row is at
// or after w.
func CompactionLag(s *archive.Store, w uint64) (lagSeqs uint64, lagSeconds float64, err error) {
	tip, tipUS, err := rowAtOrAfter(s, max(w, 1), true)
	if err != nil || tip == 0 {
		return 0, 0, err
	}
	_, firstUS, err := rowAtOrAfter(s, max(w, 1), false)
	if err != nil {
		return 0, 0, err
	}
	// Seqs below W are all compacted, so the rows from W to the tip are
	// the ones a pass has not looked at yet.
	first := max(w, 1)
	return tip - first + 1, float64(tipUS-firstUS) / 1e6, nil
}

// rowAtOrAfter returns the seq and time of the first row at or after from,
// or with last the archive's tip (0, 0 when there is no such row).
func rowAtOrAfter(s *archive.Store, from uint64, last bool) (uint64, int64, error) {
	if last {
		tip, err := s.Tip()
		if err != nil || tip < from {
			return 0, 0, err
		}
		from = tip
	}
	it, err := s.Events(from)
	if err != nil {
		return 0, 0, err
	}
	defer it.Close()
	if !it.Next() {
		return 0, 0, it.Err()
	}
	ev := it.Event()
	return ev.Seq, ev.TimeUS, nil
}

// compactionConfig is the owner's schedule and dependencies.
type compactionConfig struct {
	store    compactionStore
	archive  *archive.Store // for the lag figures
	interval time.Duration  // ≤ 0: no periodic passes
	// tombstones: ≤ 0, no early passes.
	tombstones int64
	check      time.Duration
	now        func() time.Time
	log        *slog.Logger
	metrics    *compactionMetrics
}

// compactor is the owner. Run is its one goroutine; MergingPass asks it
// for a pass and waits for the outcome; Status is safe from any goroutine.
type compactor struct {
	cfg compactionConfig
	req chan chan error

	mu       sync.Mutex
	st       CompactionStatus
	lastTomb uint64 // the writer's tombstone count when the last pass started
}

func newCompactor(cfg compactionConfig) *compactor {
	c := &compactor{cfg: cfg, req: make(chan chan error)}
	c.st.Interval = max(cfg.interval, 0).Seconds()
	cfg.metrics.interval.Set(c.st.Interval)
	return c
}

// Run runs passes until ctx is done (nil) or a pass meets an error that
// must stop the process (a store I/O error). A pending intent is finished
// first, in this goroutine: startup never waits for it.
func (c *compactor) Run(ctx context.Context) error {
	if err := c.refresh(); err != nil {
		return err
	}
	if err := c.fillIndex(ctx); err != nil {
		return err
	}
	st, err := c.cfg.store.Compaction()
	if err != nil && !c.halted(err) {
		return fmt.Errorf("node: compaction: read the state: %w", err)
	}
	if st.Intent != nil {
		if err := c.pass(ctx, reasonIntent); err != nil {
			return err
		}
	}
	var timer <-chan time.Time
	var t *time.Timer
	if c.cfg.interval > 0 {
		t = time.NewTimer(c.cfg.interval)
		defer t.Stop()
		timer = t.C
	}
	tick := time.NewTicker(c.cfg.check)
	defer tick.Stop()
	for {
		var err error
		passed := true
		select {
		case <-ctx.Done():
			return nil
		case reply := <-c.req:
			err = c.pass(ctx, reasonMerging)
			reply <- err
		case <-timer:
			err = c.pass(ctx, reasonInterval)
		case <-tick.C:
			if err = c.refresh(); err == nil {
				if passed = c.due(); passed {
					err = c.pass(ctx, reasonTombstones)
				}
				// After a pass too: one due at every tick (deletes
				// arriving faster than the threshold) must not starve it.
				if err == nil {
					err = c.fillReplayIndex(ctx)
				}
			}
		}
		if err != nil {
			return err
		}
		if passed && t != nil { // the interval counts from the end of the last pass
			resetTimer(t, c.cfg.interval)
		}
	}
}

func resetTimer(t *time.Timer, d time.Duration) {
	t.Stop()
	select {
	case <-t.C:
	default:
	}
	t.Reset(d)
}

// fillIndex runs the index backfill to its end when the store needs one
// (no pass could run before: the merging pass waits for it). A malformed
// ev/ row or marker halts compaction; a store error stops the process.
func (c *compactor) fillIndex(ctx context.Context) error {
	m, err := c.cfg.store.IndexMarker()
	if err != nil {
		if c.halted(err) {
			return nil
		}
		return fmt.Errorf("node: index backfill: read the marker: %w", err)
	}
	if m.Done() {
		return nil
	}
	c.showIndex(m)
	c.cfg.log.Info("index backfill: start: rows archived before the compaction index are indexed; no compaction pass runs until it ends",
		"from", m.Next, "to", m.End)
	res, err := c.cfg.store.FillIndex(ctx, c.showIndex)
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, archive.ErrCompactionState):
		c.halt(err)
		return nil
	default:
		return fmt.Errorf("node: index backfill: %w", err)
	}
	c.showIndex(res.Marker)
	c.cfg.log.Info("index backfill: done", "rows", res.Rows, "batches", res.Batches, "took", res.Duration,
		"rows_per_second", int64(float64(res.Rows)/max(res.Duration.Seconds(), 1e-9)))
	return nil
}

// ReplayFillSlice is how long the replay index backfill runs per check
// tick (DefaultCompactionCheck, a second): at most a quarter of one CPU
// and of the store's write bandwidth, so live ingest keeps its rate. Its
// batches are the compaction backfill's (DefaultIndexFillRows) and never
// overlap a pass: both run on the owner's goroutine.
const ReplayFillSlice = 250 * time.Millisecond

// fillReplayIndex runs the replay index backfill of a store archived
// before the writer kept it for at most ReplayFillSlice (a batch begun
// finishes), leaving the rest to the next tick. A malformed ev/ row or
// marker halts compaction like the compaction backfill's; a store error
// stops the process.
func (c *compactor) fillReplayIndex(ctx context.Context) error {
	c.mu.Lock()
	done := c.st.ReplayIndex != nil && c.st.ReplayIndex.Done || c.st.Halted
	c.mu.Unlock()
	if done {
		return nil
	}
	m, err := c.cfg.store.ReplayIndexMarker()
	if err != nil {
		if c.halted(err) {
			return nil
		}
		return fmt.Errorf("node: replay index backfill: read the marker: %w", err)
	}
	if m.Done() {
		c.showReplayIndex(m)
		return nil
	}
	if c.st.ReplayIndex == nil {
		c.cfg.log.Info("replay index backfill: start: rows archived before the replay index are indexed; filtered replays scan until it ends",
			"from", m.Next, "to", m.End)
	}
	sctx, cancel := context.WithTimeout(ctx, ReplayFillSlice)
	defer cancel()
	res, err := c.cfg.store.FillReplayIndex(sctx, c.showReplayIndex)
	switch {
	case err == nil:
		c.showReplayIndex(res.Marker)
		c.cfg.log.Info("replay index backfill: done", "end", res.Marker.End)
	case sctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
	case errors.Is(err, archive.ErrCompactionState):
		c.halt(err)
	default:
		return fmt.Errorf("node: replay index backfill: %w", err)
	}
	return nil
}

// showReplayIndex puts the replay index backfill's progress in /status
// and its gauge.
func (c *compactor) showReplayIndex(m archive.IndexMarker) {
	c.cfg.metrics.replayIndexLeft.Set(float64(m.End - min(m.Next, m.End)))
	c.mu.Lock()
	c.st.ReplayIndex = &IndexBackfillStatus{Next: m.Next, End: m.End, Done: m.Done()}
	c.mu.Unlock()
}

// showIndex puts the index backfill's progress in /status and the gauge.
func (c *compactor) showIndex(m archive.IndexMarker) {
	c.cfg.metrics.indexLeft.Set(float64(m.End - min(m.Next, m.End)))
	c.mu.Lock()
	c.st.Index = &IndexBackfillStatus{Next: m.Next, End: m.End, Done: m.Done()}
	c.mu.Unlock()
}

// MergingPass is the pass at the end of merging, before steady_state is
// committed: it asks the owner for a pass and waits for it. A halted
// compaction skips it (merging ends; the archive is served uncompacted and
// /status says why); a store error is returned.
func (c *compactor) MergingPass(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case c.req <- reply:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// due reports whether enough tombstones are pending for an early pass.
func (c *compactor) due() bool {
	if c.cfg.tombstones <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.st.Halted && c.st.TombstonesPending >= uint64(c.cfg.tombstones)
}

// pass runs one pass unless compaction is halted. It returns only errors
// that stop the process; a malformed compaction state, or an account whose
// removal is larger than the removal batch limit, halts compaction.
func (c *compactor) pass(ctx context.Context, reason string) error {
	c.mu.Lock()
	halted := c.st.Halted
	c.lastTomb = c.cfg.store.TombstonesWritten()
	c.mu.Unlock()
	if halted {
		return nil
	}
	start := c.cfg.now()
	c.running(&CompactionRun{Reason: reason, Since: start})
	c.cfg.log.Info("compaction pass: start", "reason", reason)
	res, err := c.cfg.store.Compact(ctx)
	c.running(nil)
	switch {
	case err == nil:
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return nil
	case errors.Is(err, archive.ErrCompactionState) || errors.Is(err, archive.ErrCompactionTooLarge):
		c.halt(err)
		return nil
	default:
		c.cfg.metrics.passes.WithLabelValues(passFailed).Inc()
		return fmt.Errorf("node: compaction pass (%s): %w", reason, err)
	}
	m := c.cfg.metrics
	m.passes.WithLabelValues(passOK).Inc()
	m.rows.Add(float64(res.Rows))
	m.bytes.Add(float64(res.Bytes))
	m.duration.Set(res.Duration.Seconds())
	c.mu.Lock()
	at := start
	c.st.Passes++
	c.st.LastPassAt, c.st.LastPassSeconds = &at, res.Duration.Seconds()
	c.st.LastRows, c.st.LastBytes, c.st.LastTombstones = int64(res.Rows), res.Bytes, int64(res.Tombstones)
	c.mu.Unlock()
	c.cfg.log.Info("compaction pass", "reason", reason, "from", res.From, "watermark", res.To, "rows_removed", res.Rows,
		"bytes_removed", res.Bytes, "tombstones", res.Tombstones, "accounts", res.Accounts, "rolled_over", res.RolledOver, "took", res.Duration)
	return c.refresh()
}

// running shows the pass in progress (nil: none) in /status and the gauge.
func (c *compactor) running(r *CompactionRun) {
	c.mu.Lock()
	c.st.Running = r
	c.mu.Unlock()
	v := 0.0
	if r != nil {
		v = 1
	}
	c.cfg.metrics.running.Set(v)
}

// halted reports whether err (a read of the compaction state) halts
// compaction; it halts it when the state is malformed.
func (c *compactor) halted(err error) bool {
	if !errors.Is(err, archive.ErrCompactionState) {
		return false
	}
	c.halt(err)
	return true
}

// halt stops compaction for the rest of the process: one ERROR line with
// the recovery path, the gauge, one halted pass counted (whether a pass or
// a read of the state at start found it: no pass runs after either) and
// /status. Ingest and serving go on.
func (c *compactor) halt(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.st.Halted {
		return
	}
	c.st.Halted, c.st.HaltReason, c.st.HaltRecovery = true, err.Error(), HaltRecovery(err, c.dataDir())
	c.cfg.metrics.halted.Set(1)
	c.cfg.metrics.passes.WithLabelValues(passHalted).Inc()
	c.cfg.log.Error("compaction halted (err says why); ingest and serving go on, "+
		"but deleted records are no longer removed. Recovery: "+c.st.HaltRecovery, "err", err)
}

// HaltRecovery is what the operator does about a halt for err: the reset
// for the pass's own state, the reset with --reindex for the compaction
// index (rec/, tomb/, meta/index), a checkpoint for an archived row, a
// larger bound for an account whose removal is larger than it.
func HaltRecovery(err error, dataDir string) string {
	if errors.Is(err, archive.ErrCompactionTooLarge) {
		return "one account's removal must be one batch and is larger than --compaction-max-account-batch (err names the account and the size reached): " +
			"stop backstream, start it again with a larger --compaction-max-account-batch (at most " +
			strconv.Itoa(archive.MaxCompactAccountBatch>>20) + "MiB; the pass holds about twice it in memory); the next pass finishes the interrupted one"
	}
	var ke *archive.KeyError
	if !errors.As(err, &ke) {
		ke = &archive.KeyError{}
	}
	switch key := ke.Key; {
	case key == string(archive.KeyIndex) || strings.HasPrefix(key, string(archive.PrefixRecord)) ||
		strings.HasPrefix(key, string(archive.PrefixTomb)):
		return "stop backstream, run `backstream compaction reset --reindex --data-dir " + dataDir +
			"`, start it again (the compaction index is rebuilt from the archive's rows, about 1.5 CPU-s per million, before the next pass)"
	case strings.HasPrefix(key, string(archive.PrefixEvent)):
		return "an archived row is malformed, which no reset repairs: restore the data dir from a checkpoint taken before it " +
			"(the firehose resumes from the checkpoint's cursor)"
	}
	return "stop backstream, run `backstream compaction reset --data-dir " + dataDir +
		"`, start it again (the next pass recomputes from the tombstones)"
}

func (c *compactor) dataDir() string {
	if c.cfg.archive == nil {
		return "<data-dir>"
	}
	return c.cfg.archive.DataDir()
}

// refresh reads the watermark and the lags, and the pending tombstones,
// into the status and the gauges. A malformed watermark halts compaction.
func (c *compactor) refresh() error {
	st, err := c.cfg.store.Compaction()
	if err != nil && !c.halted(err) {
		return fmt.Errorf("node: compaction: read the state: %w", err)
	}
	w := st.Watermark
	var lagSeqs uint64
	var lagSec float64
	if c.cfg.archive != nil {
		if lagSeqs, lagSec, err = CompactionLag(c.cfg.archive, w); errors.Is(err, archive.ErrMalformed) {
			return nil // a malformed row is the readers' to report
		} else if err != nil {
			return fmt.Errorf("node: compaction: read the lag: %w", err)
		}
	}
	tomb := c.cfg.store.TombstonesWritten()
	c.mu.Lock()
	c.st.Watermark, c.st.LagSeqs, c.st.LagSeconds = w, lagSeqs, lagSec
	c.st.TombstonesPending = tomb - min(c.lastTomb, tomb)
	pending := c.st.TombstonesPending
	c.mu.Unlock()
	m := c.cfg.metrics
	m.watermark.Set(float64(w))
	m.lagSeqs.Set(float64(lagSeqs))
	m.lagSeconds.Set(lagSec)
	m.pending.Set(float64(pending))
	return nil
}

// Status is a copy of the compaction section of /status.
func (c *compactor) Status() CompactionStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.st
	if st.LastPassAt != nil {
		at := *st.LastPassAt
		st.LastPassAt = &at
	}
	if st.Index != nil {
		ix := *st.Index
		st.Index = &ix
	}
	if st.Running != nil {
		r := *st.Running
		st.Running = &r
	}
	return st
}

// compactionMetrics are the owner's series (backstream_compaction_*).
type compactionMetrics struct {
	watermark, lagSeqs, lagSeconds, duration, pending, halted, interval, running prometheus.Gauge
	indexLeft, replayIndexLeft                                                   prometheus.Gauge
	passes                                                                       *prometheus.CounterVec
	rows, bytes                                                                  prometheus.Counter
}

func newCompactionMetrics(reg prometheus.Registerer) *compactionMetrics {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: "backstream_compaction_" + name, Help: help})
	}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "backstream_compaction_" + name, Help: help})
	}
	m := &compactionMetrics{
		watermark:  g("watermark", "meta/compaction: below this seq every superseded row is gone."),
		lagSeqs:    g("lag_seqs", "Archived seqs at or above the compaction watermark (not yet looked at by a pass)."),
		lagSeconds: g("lag_seconds", "Time of the archive's tip minus the time of the first row at or after the compaction watermark."),
		duration:   g("last_duration_seconds", "Duration of the last compaction pass."),
		pending:    g("tombstones_pending", "Tombstones the writer has made durable since the last pass started (this process)."),
		halted:     g("halted", "1 when compaction is halted on a malformed compaction state or an account whose removal is over the batch limit (see the log and /status for the recovery path)."),
		interval:   g("interval_seconds", "--compaction-interval in seconds (0: periodic passes are off)."),
		running:    g("running", "1 while a compaction pass runs (one a start finishes in the background included), 0 between passes."),
		indexLeft: g("index_backfill_remaining_seqs", "Seqs of ev/ rows archived before the compaction index that the index backfill has not indexed yet "+
			"(0: the index covers the archive; no pass runs while it is above 0)."),
		replayIndexLeft: prometheus.NewGauge(prometheus.GaugeOpts{Name: "backstream_replay_index_backfill_remaining_seqs",
			Help: "Seqs of ev/ rows archived before the replay index that its backfill has not indexed yet (0: filtered replays may use the index)."}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "backstream_compaction_passes_total",
			Help: "Compaction passes by outcome: ok, halted (compaction halted on a malformed state or an account over the batch limit, found by a pass or by a read at start: counted once), failed (store error, fatal)."}, []string{"outcome"}),
		rows:  c("rows_removed_total", "Superseded ev/ rows removed by compaction passes."),
		bytes: c("bytes_removed_total", "Bytes of the ev/ values removed by compaction passes."),
	}
	for _, o := range []string{passOK, passHalted, passFailed} {
		m.passes.WithLabelValues(o)
	}
	reg.MustRegister(m.watermark, m.lagSeqs, m.lagSeconds, m.duration, m.pending, m.halted, m.interval, m.running, m.indexLeft, m.replayIndexLeft, m.passes, m.rows, m.bytes)
	return m
}
