package lifecycle

// runner.go performs the machine's actions: it starts and stops capture,
// bootstrap and the live consumer, calls the merging steps of package
// merge, and turns their outcomes into facts. Per-repo logic lives in the
// packages it drives.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/merge"
	"github.com/backstream/backstream/upstream"
)

// DefaultCaptureWait is how long bootstrap waits for capture's first durable
// cursor before it starts anyway.
const DefaultCaptureWait = 30 * time.Second

// Config is everything the runner drives. The caller owns the store and the
// archive writer and closes them after Run returns.
type Config struct {
	Store  *archive.Store
	Writer *archive.Writer
	// Relay is the relay's base URL (the firehose is dialed there).
	Relay string
	// Source pages listRepos (bootstrap and discovery).
	Source upstream.RepoSource
	// Jobs runs backfill jobs (bootstrap) and whole-repo replacements
	// (the pending pass).
	Jobs *backfill.Runner
	// Bootstrap is the bootstrap's configuration; Store, Writer, Source
	// and Jobs are filled in here.
	Bootstrap bootstrap.Config
	// ArchiveMetrics instruments the capture writer too (label cap).
	ArchiveMetrics  *archive.Metrics
	FirehoseMetrics *firehose.Metrics
	MergeMetrics    *merge.Metrics
	// CaptureWait: see DefaultCaptureWait.
	CaptureWait time.Duration
	// PendingWorkers bounds the pending pass (default 16).
	PendingWorkers int
	// SkipDiscovery: debug modes (--repos, --max-repos) never discover.
	SkipDiscovery bool
	Crash         *crashpoint.Set
	Logger        *slog.Logger
	Now           func() time.Time
	// OnPhase, when set, is told every phase the runner enters (including
	// the one it starts in).
	OnPhase func(archive.Phase)
	// OnBootstrap, when set, is handed the bootstrap before it runs (for
	// progress reports) and nil once it has finished.
	OnBootstrap func(*bootstrap.Bootstrap)
	// Steady are components that run beside the live consumer in steady
	// state (the retry runner). Each runs until ctx is done; one returning
	// an error stops the process with it.
	Steady []func(ctx context.Context) error
	// OnLiveEffects is handed to the live consumer (firehose.Config
	// .OnEffects): called when a #account/#sync side effect is durable, so
	// the retry runner can pass at once (retry.Runner.Wake).
	OnLiveEffects func()
	// BeforeCleanup, when set, runs at the end of merging, just before the
	// cleanup batch commits steady_state (the node's compaction pass, so
	// the first archive served is already compacted). It runs again on a
	// restart in merging; its error stops the process.
	BeforeCleanup func(ctx context.Context) error
	// Identity verifies the consumers' #commit and #sync frames
	// (firehose.Config.Identity); nil: off.
	Identity *ident.Resolver
	// GapThreshold, GapIDs and UninvertedInterval are the consumers'
	// (firehose.Config).
	GapThreshold       int64
	GapIDs             *archive.GapIDs
	UninvertedInterval time.Duration
	// OnLive, when set, is handed the live consumer before it runs (how far
	// behind the relay the archive is: /readyz), and nil once it stopped.
	OnLive func(*firehose.Consumer)
}

func (c *Config) defaults() error {
	if c.Store == nil || c.Writer == nil || c.Relay == "" || c.Jobs == nil {
		return errors.New("lifecycle: Store, Writer, Relay and Jobs are required")
	}
	if c.Source == nil && len(c.Bootstrap.Repos) == 0 {
		return errors.New("lifecycle: Source is required unless Bootstrap.Repos is set")
	}
	if c.CaptureWait <= 0 {
		c.CaptureWait = DefaultCaptureWait
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// runner holds one process run's components and facts.
type runner struct {
	cfg   Config
	facts Facts
	log   *slog.Logger

	capWriter *archive.Writer
	capture   *firehose.Consumer
	capCancel context.CancelFunc
	capDone   chan error
	// captured: this process ran capture, which hands the live consumer
	// what it owes (capOwing: a hole it found and did not record, see
	// firehose.Consumer.Owing); without it the live consumer records the
	// hole of a relay silent since bootstrap itself (steady).
	captured, capOwing bool
}

// Run drives the lifecycle from the persisted phase until ctx is done (nil)
// or something fails that must stop the process (an error: a store failure,
// a capture or live consumer that cannot write, a bug).
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	phase, err := cfg.Store.Phase()
	if err != nil {
		return fmt.Errorf("lifecycle: read phase: %w", err)
	}
	r := &runner{cfg: cfg, log: cfg.Logger, facts: Facts{Phase: phase, SkipDiscovery: cfg.SkipDiscovery}}
	defer r.stopCapture()
	r.enter(phase)
	for {
		if err := ctx.Err(); err != nil {
			return nil
		}
		a, err := Next(r.facts)
		if err != nil {
			return err
		}
		r.log.Debug("lifecycle step", "phase", r.facts.Phase, "action", a.String())
		if err := r.do(ctx, a); err != nil {
			if ctx.Err() != nil && errors.Is(err, context.Canceled) {
				return nil
			}
			return fmt.Errorf("lifecycle: %s: %w", a, err)
		}
		if a == ActSteady {
			return nil
		}
	}
}

func (r *runner) enter(p archive.Phase) {
	r.facts.Phase = p
	r.log.Info("lifecycle phase", "phase", p)
	if r.cfg.OnPhase != nil {
		r.cfg.OnPhase(p)
	}
}

func (r *runner) do(ctx context.Context, a Action) error {
	switch a {
	case ActStartCapture:
		return r.startCapture(ctx)
	case ActAwaitCapture:
		return r.awaitCapture(ctx)
	case ActBootstrap:
		return r.bootstrap(ctx)
	case ActEnterMerging:
		if err := bootstrap.EnterMerging(ctx, r.cfg.Store, r.cfg.Writer, r.cfg.Now()); err != nil {
			return err
		}
		r.cfg.Crash.Hit(crashpoint.MergingCommitted)
		r.enter(archive.PhaseMerging)
		return nil
	case ActStopCapture:
		return r.stopCapture()
	case ActMerge:
		st, err := merge.Walk(ctx, r.mergeConfig())
		if err != nil {
			return err
		}
		r.log.Info("merged the captured firehose", "units", st.Units, "kept", st.Kept, "stale", st.Stale, "through", st.Through)
		r.facts.Merged = true
		return nil
	case ActPendingPass:
		if err := merge.PendingPass(ctx, r.mergeConfig()); err != nil {
			return err
		}
		r.facts.PendingDone = true
		return nil
	case ActDiscovery:
		if err := merge.Discover(ctx, r.mergeConfig()); err != nil {
			return err
		}
		r.facts.DiscoveryDone = true
		return nil
	case ActCleanup:
		if r.cfg.BeforeCleanup != nil {
			if err := r.cfg.BeforeCleanup(ctx); err != nil {
				return err
			}
		}
		if err := merge.Cleanup(r.mergeConfig()); err != nil {
			return err
		}
		r.enter(archive.PhaseSteadyState)
		return nil
	case ActSteady:
		return r.steady(ctx)
	}
	return fmt.Errorf("no handler for %s", a)
}

func (r *runner) mergeConfig() merge.Config {
	return merge.Config{Store: r.cfg.Store, Writer: r.cfg.Writer, Jobs: r.cfg.Jobs, Source: r.cfg.Source, Fleet: r.cfg.Bootstrap.Fleet, Roster: r.cfg.Bootstrap.Fleet, Enumerate: r.cfg.Bootstrap.Enumerate, PendingWorkers: r.cfg.PendingWorkers,
		Crash: r.cfg.Crash, Metrics: r.cfg.MergeMetrics, Logger: r.log, Now: r.cfg.Now,
		Sleep: r.cfg.Bootstrap.Sleep} // discovery's listRepos retries wait as bootstrap's do
}

// relayCursor reads cursor/relay: nil when absent (start at the live tip).
// A cursor makes a record of a silent relay stale: it is dropped, so that a
// later loss of the cursor is refused at startup.
func (r *runner) relayCursor() (*int64, error) {
	c, err := r.cfg.Store.RelayCursor()
	if errors.Is(err, archive.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := r.cfg.Store.ClearRelaySilent(); err != nil {
		return nil, err
	}
	v := int64(c)
	return &v, nil
}

// relaySilent reports whether meta/relay_silent_at is present: accounts
// were downloaded while no firehose position covered them.
func (r *runner) relaySilent() (bool, error) {
	_, err := r.cfg.Store.Time(archive.KeyRelaySilentAt)
	if errors.Is(err, archive.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (r *runner) startCapture(ctx context.Context) error {
	cursor, err := r.relayCursor()
	if err != nil {
		return err
	}
	// A restart after capture's wait expired: the downloads made since
	// are covered by no position.
	uncovered := false
	if cursor == nil {
		if uncovered, err = r.relaySilent(); err != nil {
			return err
		}
	}
	w, err := archive.NewWriter(r.cfg.Store, archive.WriterOptions{Capture: true, Metrics: r.cfg.ArchiveMetrics, Logger: r.log, LiveLogBytes: 1 << 20})
	if err != nil {
		return err
	}
	c, err := firehose.New(firehose.Config{Relay: r.cfg.Relay, Writer: w, Mode: firehose.ModeCapture, Cursor: cursor, Uncovered: uncovered, Identity: r.cfg.Identity, MarkWriter: r.cfg.Writer, Metrics: r.cfg.FirehoseMetrics, Logger: r.log.With("component", "capture"), Now: r.cfg.Now,
		GapIDs: r.cfg.GapIDs, GapThreshold: r.cfg.GapThreshold, UninvertedInterval: r.cfg.UninvertedInterval})
	if err != nil {
		w.Close()
		return err
	}
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() { done <- c.Run(cctx) }()
	r.capWriter, r.capture, r.capCancel, r.capDone = w, c, cancel, done
	r.captured = true
	r.facts.CaptureRunning = true
	r.log.Info("capturing the firehose", "cursor", cursorString(cursor))
	return nil
}

func cursorString(c *int64) string {
	if c == nil {
		return "live tip"
	}
	return fmt.Sprint(*c)
}

// captureFailed reports capture's fatal error once it has stopped on its own.
func (r *runner) captureFailed() <-chan error { return r.capDone }

func (r *runner) awaitCapture(ctx context.Context) error {
	t := time.NewTimer(r.cfg.CaptureWait)
	defer t.Stop()
	select {
	case <-r.capture.Started():
		r.cfg.Crash.Hit(crashpoint.CaptureStarted)
	case <-t.C:
		r.log.Warn("the relay sent no firehose event yet; bootstrap starts without a durable capture cursor", "waited", r.cfg.CaptureWait)
		// Durable, so that a later start tells this absence of cursor/relay
		// from a lost one.
		if err := r.cfg.Store.MarkRelaySilent(r.cfg.Now()); err != nil {
			return err
		}
		// Downloads begin without a position: capture's connection, if
		// one is open, covers them while it lasts; a time without one is
		// recorded as a gap.
		r.capture.Uncover()
	case err := <-r.captureFailed():
		r.capDone = nil
		return fmt.Errorf("capture stopped: %w", orClosed(err))
	case <-ctx.Done():
		return ctx.Err()
	}
	r.facts.CaptureReady = true
	return nil
}

func orClosed(err error) error {
	if err == nil {
		return errors.New("capture ended without an error")
	}
	return err
}

func (r *runner) bootstrap(ctx context.Context) error {
	bc := r.cfg.Bootstrap
	bc.Store, bc.Writer, bc.Source, bc.Jobs = r.cfg.Store, r.cfg.Writer, r.cfg.Source, r.cfg.Jobs
	if bc.Crash == nil {
		bc.Crash = r.cfg.Crash
	}
	if bc.Logger == nil {
		bc.Logger = r.log
	}
	b, err := bootstrap.New(bc)
	if err != nil {
		return err
	}
	if r.cfg.OnBootstrap != nil {
		r.cfg.OnBootstrap(b)
		defer r.cfg.OnBootstrap(nil)
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case err := <-r.captureFailed():
		r.capDone = nil
		cancel()
		<-done
		return fmt.Errorf("capture stopped during bootstrap: %w", orClosed(err))
	}
	r.facts.BootstrapDone = true
	return nil
}

// stopCapture stops the capture consumer and drains its writer. Safe to
// call when capture is not running.
func (r *runner) stopCapture() error {
	if r.capture == nil {
		return nil
	}
	r.capCancel()
	var err error
	if r.capDone != nil {
		if e := <-r.capDone; e != nil && !errors.Is(e, context.Canceled) {
			err = e
		}
	}
	// Run has returned: capture is quiescent.
	r.capOwing = r.capOwing || r.capture.Owing()
	if e := r.capWriter.Close(); e != nil && err == nil {
		err = e
	}
	r.capture, r.capWriter, r.capDone = nil, nil, nil
	r.facts.CaptureRunning = false
	return err
}

// steady runs the live consumer from cursor/relay, and the Steady
// components beside it, until ctx is done or one of them fails.
func (r *runner) steady(ctx context.Context) error {
	cursor, err := r.relayCursor()
	if err != nil {
		return err
	}
	// No position after downloads made while the relay sent nothing: the
	// stream joins the relay's live tip, and what the relay sent since is
	// a hole, unless capture ran in this process and covered it (its
	// connection open from before the downloads to its end, or the hole
	// recorded).
	uncovered := false
	if cursor == nil && (!r.captured || r.capOwing) {
		if uncovered, err = r.relaySilent(); err != nil {
			return err
		}
	}
	c, err := firehose.New(firehose.Config{Relay: r.cfg.Relay, Writer: r.cfg.Writer, Mode: firehose.ModeLive, Store: r.cfg.Store, Cursor: cursor, Uncovered: uncovered, Identity: r.cfg.Identity, Metrics: r.cfg.FirehoseMetrics, Logger: r.log.With("component", "live"), Now: r.cfg.Now, Crash: r.cfg.Crash, OnEffects: r.cfg.OnLiveEffects,
		GapIDs: r.cfg.GapIDs, GapThreshold: r.cfg.GapThreshold, UninvertedInterval: r.cfg.UninvertedInterval})
	if err != nil {
		return err
	}
	if r.cfg.OnLive != nil {
		r.cfg.OnLive(c)
		defer r.cfg.OnLive(nil)
	}
	r.log.Info("following the live firehose", "cursor", cursorString(cursor))
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runs := append([]func(context.Context) error{c.Run}, r.cfg.Steady...)
	errs := make(chan error, len(runs))
	for _, run := range runs {
		go func() { errs <- run(ctx) }()
	}
	var first error
	for range runs {
		err := <-errs
		if first == nil && err != nil && parent.Err() == nil {
			first = err
		}
		cancel() // one stops: stop the rest
	}
	if first == nil && parent.Err() == nil {
		first = errors.New("a steady-state component stopped")
	}
	return first
}
