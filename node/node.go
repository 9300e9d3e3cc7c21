package node

// node.go owns the one construction of a running backstream: Config, New,
// Run and Close.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/lifecycle"
	"github.com/backstream/backstream/merge"
	"github.com/backstream/backstream/natssink"
	"github.com/backstream/backstream/repair"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/subscribe"
	"github.com/backstream/backstream/upstream"
)

// Defaults of the knobs serve exposes as flags.
const (
	DefaultRetryWorkers     = 16
	DefaultRetryHostWorkers = 4
	DefaultRetryInterval    = time.Minute
	DefaultRetryMaxDelay    = 24 * time.Hour
	// DefaultMemoryBodyBytes: repos of at most 1 MiB (nearly all of them)
	// stay in memory within the CAR budget; larger ones stream to scratch.
	DefaultMemoryBodyBytes = 1 << 20
	// DefaultStopGrace is how long Run lets the components notice a
	// stopped writer and stop on their own before it cancels them.
	DefaultStopGrace = 5 * time.Second
	// DefaultSpaceCheckPeriod is how often Run reads the store volume's
	// free space against the floor (MinFree): a statfs every few seconds
	// is free, and at a few MB/s of ingest a 1 GiB floor is minutes of
	// margin.
	DefaultSpaceCheckPeriod = 5 * time.Second
	// DefaultFaultLinger is how long Run keeps the probes answering 503
	// (and /status the error) after a full disk stops it, before it
	// returns and the process's listener closes: a prober sees the
	// failure, not only a refused connection.
	DefaultFaultLinger = time.Second
)

// Config is one backstream process run. The zero value of every optional
// field is the production default; tests vary the clock-free knobs (sizes,
// schedules), the store's filesystem and commit hook, and the URLs.
type Config struct {
	// DataDir holds store/ and scratch/. Required.
	DataDir string
	// Store are the store's options (FS, CommitHook, OnFatal, CacheSize,
	// Startup: where the one-time reads of the store's open, the writer's
	// start and bootstrap's restart pass show while they run); Logger is
	// filled in when nil.
	Store archive.Options
	// ScratchDir receives getRepo bodies too large for memory. Default the
	// store's scratch directory (emptied at every open).
	ScratchDir string

	// Relay is the relay's base URL: the firehose is dialed there, and
	// listRepos and getRepo go there unless SourceURL is set. Required.
	Relay string
	// SourceURL, when set, is where listRepos and getRepo go instead.
	SourceURL string
	// ResetRelay follows a relay other than the one the store follows,
	// dropping the old relay's cursor.
	ResetRelay bool
	// LoopbackHosts: see upstream.Options.LoopbackHosts (a relay on
	// loopback may redirect only to its own port and these).
	LoopbackHosts []string

	// Bootstrap configures the first pass (workers, window, debug modes,
	// page size); its Store, Writer, Source, Jobs, Metrics, Logger and Crash
	// are filled in here.
	Bootstrap bootstrap.Config
	// Memory is the CAR budget in bytes (0: backfill.DefaultMemoryBudget).
	Memory int64
	// MemoryBodyBytes: getRepo bodies up to this size stay in memory
	// (default DefaultMemoryBodyBytes; negative: always scratch).
	MemoryBodyBytes int64
	// AttemptTimeout is one getRepo attempt's deadline (default
	// backfill.DefaultAttemptTimeout).
	AttemptTimeout time.Duration
	// JobBackoffBase and JobBackoffMax are the retry delays inside one job
	// (backfill's defaults when zero).
	JobBackoffBase, JobBackoffMax time.Duration
	// CaptureWait: see lifecycle.DefaultCaptureWait.
	CaptureWait time.Duration

	// Download limits of the one upstream client every job shares
	// (upstream.Options): the scratch budget of all spills (0: half the
	// scratch volume's space above its floor (MinFree), capped), the
	// slowest body accepted (0: the default upstream.DefaultMinBodyBytes
	// per upstream.DefaultBodyWindow) and the cap on concurrent downloads
	// per PDS host (0: upstream.DefaultHostWorkers).
	ScratchBudget int64
	MinBodyBytes  int64
	HostWorkers   int

	// The retry schedule of failed repos and the steady-state runner.
	RetryWorkers, RetryHostWorkers int
	RetryInterval, RetryMaxDelay   time.Duration
	RetryScanPeriod                time.Duration

	// StopGrace: see DefaultStopGrace.
	StopGrace time.Duration
	// MinFree is the free-space floor of the data dir's volume (serve's
	// --min-free): 0 the default (diskspace.Floor(0, total): the smaller of
	// 1 GiB and 2 % of the volume), positive a size in bytes, negative off.
	// The store refuses to open below it and Run stops the
	// process when the volume goes below it (checked every
	// SpaceCheckPeriod, default DefaultSpaceCheckPeriod). Scratch spills
	// use the same floor. It overrides Store.MinFree when set.
	MinFree          int64
	SpaceCheckPeriod time.Duration
	// MaxWriteStall bounds a store write stall (archive.DefaultMaxWriteStall
	// when zero); it overrides Store.MaxWriteStall when set.
	MaxWriteStall time.Duration
	// Verify, when set, is the identity resolution and verification of
	// every downloaded repo and live commit (package ident; its Mode says
	// strict, warn or off). Store, Persist, Metrics, Logger and Now are
	// filled in. Nil: nothing is resolved or verified.
	Verify *ident.Config
	// PLCExport reads the PLC directory's export (GET /export) during
	// bootstrap, beside the downloads, into the resolver (ident.ReadExport),
	// from where the last run's read stopped (cursor/plcexport); a
	// directory that does not answer it leaves each DID to its own
	// resolution. Only with Verify, and not with Bootstrap.Repos or
	// MaxRepos (a debug run of a few repos).
	PLCExport bool
	// FaultLinger: see DefaultFaultLinger.
	FaultLinger time.Duration
	// CompactionInterval is the time between compaction passes (0:
	// DefaultCompactionInterval; negative: no periodic passes);
	// CompactionTombstones starts one early when that many tombstones are
	// pending (0: DefaultCompactionTombstones; negative: never early).
	// CompactionCheck is how often the pending count is read (0:
	// DefaultCompactionCheck). The pass at the end of merging and the
	// finishing of an interrupted pass at startup always run.
	// CompactionMaxAccountBatch bounds one account's removal batch
	// (archive.CompactOptions.MaxAccountBatch; 0: its default): an account
	// whose removal is larger halts compaction.
	CompactionInterval        time.Duration
	CompactionTombstones      int64
	CompactionCheck           time.Duration
	CompactionMaxAccountBatch int
	// Now is every component's clock (the writer's event times, due
	// checks, backoff, phase timestamps). Default time.Now.
	Now func() time.Time
	// Registry receives every metric (nil: a private registry).
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// Crash, when armed (tests through BACKSTREAM_CRASHPOINT), kills the
	// process at a named commit point. Nil: never.
	Crash *crashpoint.Set
	// Server, when set, is a subscribe server already answering (serve's,
	// which reports "opening" before the store is open); the node attaches
	// the store and writer to it. Nil: the node makes one, with StatusJSON
	// as its /status report.
	Server     *subscribe.Server
	StatusJSON func() any
	// Subscribe holds the subscriber limits (StallTimeout, BufferBudget,
	// MaxSubscribers, …) of the server the node makes when Server is nil;
	// zero fields take subscribe's defaults, and its wiring fields (store,
	// probes, metrics, logger) are the node's own.
	Subscribe subscribe.Config
	// Health, when set, is the process's probe state, shared with whoever
	// answered the probes before the node existed. Nil: the node's own.
	Health *lifecycle.Health
	// OnPhase, when set, is told every phase the lifecycle enters, after
	// the node's own health and metrics are.
	OnPhase func(archive.Phase)
	// MaxStale: see DefaultMaxStale. GapThreshold: see
	// firehose.DefaultGapThreshold.
	MaxStale     time.Duration
	GapThreshold int64
	// UninvertedInterval: see firehose.DefaultUninvertedInterval.
	UninvertedInterval time.Duration
	// RepairPeriod and AuditInterval: see repair.Config (0: repair's
	// DefaultPeriod, and no scheduled audits).
	RepairPeriod, AuditInterval time.Duration
	// RepairMaxAbsent: see repair.Config.MaxAbsent.
	RepairMaxAbsent int
	// NATS, when set, runs the NATS sink in steady state (its Store,
	// Writer, Metrics, Logger and Now are the node's own).
	NATS *natssink.Config
}

func (c *Config) defaults() error {
	if c.DataDir == "" || c.Relay == "" {
		return errors.New("node: DataDir and Relay are required")
	}
	if c.SourceURL == "" {
		c.SourceURL = c.Relay
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Store.Logger == nil {
		c.Store.Logger = c.Logger
	}
	if c.MinFree != 0 {
		c.Store.MinFree = c.MinFree
	}
	if c.MaxWriteStall != 0 {
		c.Store.MaxWriteStall = c.MaxWriteStall
	}
	if c.SpaceCheckPeriod <= 0 {
		c.SpaceCheckPeriod = DefaultSpaceCheckPeriod
	}
	if c.FaultLinger <= 0 {
		c.FaultLinger = DefaultFaultLinger
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.MemoryBodyBytes == 0 {
		c.MemoryBodyBytes = DefaultMemoryBodyBytes
	}
	if c.Memory <= 0 {
		c.Memory = backfill.DefaultMemoryBudget()
	}
	if c.RetryWorkers <= 0 {
		c.RetryWorkers = DefaultRetryWorkers
	}
	if c.RetryHostWorkers <= 0 {
		c.RetryHostWorkers = DefaultRetryHostWorkers
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.RetryMaxDelay <= 0 {
		c.RetryMaxDelay = DefaultRetryMaxDelay
	}
	if c.RetryMaxDelay < c.RetryInterval {
		return fmt.Errorf("node: retry max delay %v is below the retry interval %v", c.RetryMaxDelay, c.RetryInterval)
	}
	if c.StopGrace <= 0 {
		c.StopGrace = DefaultStopGrace
	}
	if c.CompactionInterval == 0 {
		c.CompactionInterval = DefaultCompactionInterval
	}
	if c.CompactionTombstones == 0 {
		c.CompactionTombstones = DefaultCompactionTombstones
	}
	if c.CompactionCheck <= 0 {
		c.CompactionCheck = DefaultCompactionCheck
	}
	if c.MaxStale <= 0 {
		c.MaxStale = DefaultMaxStale
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Store.Now == nil {
		c.Store.Now = c.Now
	}
	return nil
}

// Node is one backstream process run: the store, the archive writer, the
// upstream client, the backfill jobs, the retry runner, the lifecycle and
// the subscribe server, wired once.
type Node struct {
	cfg Config
	log *slog.Logger

	store    *archive.Store
	w        *archive.Writer
	client   *upstream.Client
	jobs     *backfill.Runner
	retrier  *retry.Runner
	repairer *repair.Runner
	gapIDs   *archive.GapIDs
	comp     *compactor
	ident    *ident.Resolver // nil: verification off
	sink     *natssink.Sink  // nil: no NATS sink
	sub      *subscribe.Server
	lcfg     lifecycle.Config

	health *lifecycle.Health
	phase  *prometheus.GaugeVec
	boot   atomic.Pointer[bootstrap.Bootstrap]
	lcErr  atomic.Pointer[error]
	live   atomic.Pointer[firehose.Consumer] // the live consumer while it runs
	// firehose is the capture and live consumers' metrics, and their
	// relay connection's state (RelayLink).
	firehose *firehose.Metrics

	ran       atomic.Bool
	runMu     sync.Mutex
	runStop   context.CancelFunc // cancels a running Run's components
	closing   atomic.Bool        // Close stopped Run: its end is no error
	runDone   chan struct{}      // closed when Run returns
	closeOnce sync.Once
	closeErr  error
}

// New opens the store under cfg.DataDir, checks the relay it follows, and
// builds every component. Nothing runs until Run. On error everything New
// opened is closed again. A disk fault of the store while New runs (a
// write stuck past MaxWriteStall, in Pebble's open or in a start's own
// writes) fails the probes and is returned at once, New's work left
// behind: it may be blocked in that write for good, and the process
// exits (closing the node if that work ever ends).
func New(cfg Config) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if cfg.Health == nil {
		cfg.Health = new(lifecycle.Health)
	}
	faulted := make(chan error, 1)
	health, then := cfg.Health, cfg.Store.OnFault
	cfg.Store.OnFault = func(err error) {
		health.Fail(err)
		select {
		case faulted <- err:
		default:
		}
		if then != nil {
			then(err)
		}
	}
	type built struct {
		n   *Node
		err error
	}
	done := make(chan built, 1)
	go func() {
		n, err := build(cfg)
		done <- built{n, err}
	}()
	select {
	case b := <-done:
		return b.n, b.err
	case err := <-faulted:
		cfg.Logger.Error("the store's disk fault stops the start; what it was doing is left to the process exit", "err", err)
		go func() {
			if b := <-done; b.n != nil {
				b.n.Close()
			}
		}()
		return nil, err
	}
}

// build is New's work, on a goroutine of its own.
func build(cfg Config) (n *Node, err error) {
	relayHost, relayScheme, err := hostOf(cfg.Relay)
	if err != nil {
		return nil, err
	}
	n = &Node{cfg: cfg, log: cfg.Logger, health: cfg.Health}
	defer func() {
		if err != nil {
			n.Close()
			n = nil
		}
	}()
	if n.store, err = archive.Open(cfg.DataDir, cfg.Store); err != nil {
		return n, err
	}
	if err := checkRelay(n.store, relayHost, relayScheme, cfg.ResetRelay, cfg.Now(), n.log); err != nil {
		return n, err
	}
	phase, err := n.store.Phase()
	if err != nil {
		return n, err
	}
	if n.gapIDs, err = archive.NewGapIDs(n.store); err != nil {
		return n, err
	}
	reg := cfg.Registry
	reg.MustRegister(archive.NewPebbleCollector(n.store), bootstrap.NewRosterCollector(n.store))
	n.phase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "backstream_phase",
		Help: "1 for the lifecycle phase the process is in (bootstrap, merging, steady_state), 0 for the others.",
	}, []string{"phase"})
	reg.MustRegister(n.phase)
	n.registerHealMetrics(reg)
	n.setPhase(phase)
	am := archive.NewMetrics(reg)
	if n.w, err = archive.NewWriter(n.store, archive.WriterOptions{BulkLinger: archive.BulkLinger, Metrics: am, Logger: n.log, Now: cfg.Now,
		DiscoverUnknown: !cfg.Bootstrap.Debug()}); err != nil {
		return n, err
	}
	// A disk fault met on the way here (the open, the startup reads, the
	// writer's) has ended the start: New returned it and the probes fail.
	// Once the disk answers, what New left running builds nothing more.
	if err := n.store.Fault(); err != nil {
		return n, err
	}
	if err := n.buildJobs(reg); err != nil {
		return n, err
	}
	if n.sub = cfg.Server; n.sub == nil {
		sc := cfg.Subscribe
		sc.Store, sc.Writer = nil, nil // attached below
		sc.Ready, sc.Healthy, sc.StatusJSON, sc.Lagging = n.health.Ready, n.health.Err, cfg.StatusJSON, n.Lagging
		sc.Metrics, sc.Logger = subscribe.NewMetrics(reg), n.log.With("component", "subscribe")
		if n.sub, err = subscribe.New(sc); err != nil {
			return n, err
		}
	}
	n.sub.Attach(n.store, n.w)
	n.comp = newCompactor(compactionConfig{
		store: storeCompaction{s: n.store, w: n.w, opts: archive.CompactOptions{
			Logger: n.log.With("component", "compaction"), Crash: cfg.Crash, Now: cfg.Now,
			MaxAccountBatch: cfg.CompactionMaxAccountBatch}},
		archive:  n.store,
		interval: cfg.CompactionInterval, tombstones: cfg.CompactionTombstones, check: cfg.CompactionCheck,
		now: cfg.Now, log: n.log.With("component", "compaction"), metrics: newCompactionMetrics(reg),
	})
	n.firehose = firehose.NewMetrics(reg)
	n.lcfg = n.lifecycleConfig(reg, am)
	return n, nil
}

// buildJobs makes the upstream client, the bootstrap's backfill jobs, the
// retry runner with its own jobs, and the NATS sink when configured. One
// retry schedule serves every failure: a
// repo failed in bootstrap is first retried after the retry interval, like
// one failed in steady state.
func (n *Node) buildJobs(reg prometheus.Registerer) error {
	cfg := n.cfg
	scratch := cfg.ScratchDir
	if scratch == "" {
		scratch = n.store.ScratchDir()
	}
	var err error
	n.client, err = upstream.New(cfg.SourceURL, upstream.Options{ScratchDir: scratch, MemoryBodyBytes: max(cfg.MemoryBodyBytes, 0), Metrics: upstream.NewMetrics(reg),
		LoopbackHosts: cfg.LoopbackHosts,
		ScratchBudget: cfg.ScratchBudget, MinFree: cfg.MinFree, MinBodyBytes: cfg.MinBodyBytes, HostWorkers: cfg.HostWorkers,
		Logger: n.log.With("component", "upstream")})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.ident = n.resolver(reg)
	sourceHost, sourceScheme, err := hostOf(cfg.SourceURL)
	if err != nil {
		return err
	}
	bm := backfill.NewMetrics(reg)
	backoff := retry.Backoff{Interval: cfg.RetryInterval, MaxDelay: cfg.RetryMaxDelay}
	jobOpts := backfill.Options{
		Source: n.client, Writer: n.w, Current: n.store, Memory: backfill.NewMemory(cfg.Memory, bm), Metrics: bm, Logger: n.log,
		AttemptTimeout: cfg.AttemptTimeout, Crash: cfg.Crash, NextAttempt: backoff.NextAttempt(),
		BackoffBase: cfg.JobBackoffBase, BackoffMax: cfg.JobBackoffMax, Now: cfg.Now,
		Identity: n.ident, TrustedHosts: []string{sourceHost},
	}
	if n.jobs, err = backfill.NewRunner(jobOpts); err != nil {
		return err
	}
	// Steady-state replacements: their own jobs, whose failures follow the
	// retry schedule and whose 429s park the host in the runner.
	retryJobs, err := backfill.NewRunner(backoff.JobOptions(jobOpts))
	if err != nil {
		return err
	}
	n.retrier, err = retry.New(retry.Config{
		Store: n.store, Writer: n.w, Jobs: retryJobs, Relay: sourceHost, Scheme: sourceScheme, Workers: cfg.RetryWorkers, HostWorkers: cfg.RetryHostWorkers,
		Interval: cfg.RetryInterval, MaxDelay: cfg.RetryMaxDelay, ScanPeriod: cfg.RetryScanPeriod,
		Metrics: retry.NewMetrics(reg), Logger: n.log.With("component", "retry"), Now: cfg.Now,
	})
	if err != nil {
		return err
	}
	n.repairer, err = repair.New(repair.Config{
		Store: n.store, Writer: n.w, Source: n.client, Fleet: n.client, Roster: n.client, Enumerate: cfg.Bootstrap.Enumerate, Scheme: sourceScheme, Status: n.client, Identity: n.ident, MaxAbsent: cfg.RepairMaxAbsent, GapIDs: n.gapIDs, Wake: n.retrier.Wake, Stream: liveStream{n},
		Period: cfg.RepairPeriod, AuditInterval: cfg.AuditInterval,
		Metrics: repair.NewMetrics(reg), Logger: n.log, Now: cfg.Now, Crash: cfg.Crash,
		Sleep: cfg.Bootstrap.Sleep, // a pass's listRepos retries wait as bootstrap's and discovery's do
	})
	if err != nil {
		return err
	}
	// The sink's metrics are exposed (at zero) without a sink too, so
	// dashboards and alerts find them.
	sm := natssink.NewMetrics(reg)
	if err != nil || cfg.NATS == nil {
		return err
	}
	nc := *cfg.NATS
	nc.Store, nc.Writer, nc.Metrics, nc.Logger, nc.Now = n.store, n.w, sm, n.log.With("component", "nats"), cfg.Now
	n.sink, err = natssink.New(nc)
	return err
}

func (n *Node) lifecycleConfig(reg prometheus.Registerer, am *archive.Metrics) lifecycle.Config {
	cfg := n.cfg
	bc := cfg.Bootstrap
	bc.Logger, bc.Metrics, bc.Crash = n.log, bootstrap.NewMetrics(reg), cfg.Crash
	bc.Fleet, bc.Identity = n.client, n.ident
	if cfg.PLCExport && n.ident.Mode() != ident.ModeOff && !bc.Debug() {
		bc.Preload = n.readExport
	}
	return lifecycle.Config{
		Store: n.store, Writer: n.w, Relay: cfg.Relay, Source: n.client, Jobs: n.jobs, UninvertedInterval: cfg.UninvertedInterval,
		Bootstrap:       bc,
		ArchiveMetrics:  am,
		FirehoseMetrics: n.firehose,
		MergeMetrics:    merge.NewMetrics(reg),
		CaptureWait:     cfg.CaptureWait,
		SkipDiscovery:   bc.Debug(),
		Crash:           cfg.Crash,
		Logger:          n.log,
		Now:             cfg.Now,
		OnPhase:         n.setPhase,
		OnBootstrap:     func(b *bootstrap.Bootstrap) { n.boot.Store(b) },
		Steady:          n.steady(),
		OnLiveEffects:   n.retrier.Wake,
		BeforeCleanup:   n.comp.MergingPass,
		Identity:        n.ident,
		GapThreshold:    cfg.GapThreshold,
		GapIDs:          n.gapIDs,
		OnLive:          n.setLive,
	}
}

// resolver builds the identity resolver of Config.Verify (nil when unset),
// whose resolutions are written to ident/<did> through the writer.
func (n *Node) resolver(reg prometheus.Registerer) *ident.Resolver {
	if n.cfg.Verify == nil {
		return nil
	}
	c := *n.cfg.Verify
	c.Store, c.Metrics, c.Logger, c.Now = n.store, ident.NewMetrics(reg), n.log.With("component", "ident"), n.cfg.Now
	guardIdent(&c, n.client)
	c.Persist = func(ctx context.Context, did string, v archive.Ident) error {
		b, err := archive.EncodeIdent(v)
		if err != nil {
			return err
		}
		return n.w.Submit(ctx, &archive.Unit{Puts: []archive.KV{{Key: archive.IdentKey(did), Value: b}}})
	}
	return ident.New(c)
}

// readExport reads the PLC directory's export into the resolver from
// cursor/plcexport (the start when absent), making the cursor durable
// after each page, and logs what it loaded; a directory that does not
// answer it is logged once (each DID then resolves on its own). ready is
// called once the first page is in.
func (n *Node) readExport(ctx context.Context, ready func()) {
	log := n.log.With("component", "ident")
	var after string
	switch t, err := n.store.Time(archive.KeyCursorPLCExport); {
	case err == nil:
		after = t.UTC().Format(time.RFC3339Nano)
	case !errors.Is(err, archive.ErrNotFound):
		log.Warn("bootstrap: the PLC export cursor is unreadable; reading the export from its start", "err", err)
	}
	st, err := n.ident.ReadExport(ctx, after, func(ctx context.Context, cursor string) error {
		ready()
		t, err := time.Parse(time.RFC3339Nano, cursor)
		if err != nil {
			return fmt.Errorf("node: export cursor %q: %w", cursor, err)
		}
		return n.w.Submit(ctx, &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorPLCExport, Value: archive.EncodeTime(t)}}})
	})
	args := []any{"from", after, "pages", st.Pages, "loaded", st.Loaded, "tombstoned", st.Tombstoned,
		"nullified", st.Nullified, "skipped", st.Skipped, "dropped", st.Dropped, "cursor", st.Cursor}
	switch {
	case ctx.Err() != nil:
		log.Info("bootstrap: the read of the PLC directory's export stopped with the bootstrap", args...)
	case err != nil:
		log.Warn("bootstrap: the PLC directory's export could not be read; DIDs it did not give are resolved one by one",
			append(args, "err", err)...)
	default:
		log.Info("bootstrap: identities loaded from the PLC directory's export", args...)
	}
}

// guardIdent gives the resolver's own client the address policy of the
// relay's redirects (DID documents and handles name hosts anyone chooses),
// the configured PLC directory and Web exempt, unless c brings its own
// dialer or client.
func guardIdent(c *ident.Config, client *upstream.Client) {
	if c.Dial == nil && c.HTTPClient == nil {
		c.Dial = client.GuardedDial(c.PLC, c.Web)
	}
}

// steady are the components that run in steady state: the retry runner,
// the repair runner, and the NATS sink when configured.
func (n *Node) steady() []func(context.Context) error {
	steady := []func(context.Context) error{n.retrier.Run, n.repairer.Run}
	if n.sink != nil {
		steady = append(steady, n.sink.Run)
	}
	return steady
}

// NATSStatus is the NATS sink's /status section (nil without a sink).
func (n *Node) NATSStatus() *natssink.Status {
	if n.sink == nil {
		return nil
	}
	st := n.sink.Status()
	return &st
}

// Run drives the lifecycle until ctx is done (nil) or something stops the
// process: the lifecycle's own error, the writer stopping on a persistence
// error, or a disk fault of the store (a write stall past its bound, failed
// flushes, the volume below the free-space floor, read every
// SpaceCheckPeriod). On a writer failure or a disk fault the probes fail at
// once; the components get StopGrace to notice and stop on their own, then
// are cancelled. After a disk fault the writer may be blocked in a commit
// for good: Run does not wait for it, and waits at most StopGrace for the
// components after cancelling them. Run may be called once.
func (n *Node) Run(ctx context.Context) error {
	if n.ran.Swap(true) {
		return errors.New("node: Run called twice")
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer close(n.running(cancel))
	runErr := make(chan error, 1)
	go func() {
		err := lifecycle.Run(lctx, n.lcfg)
		n.lcErr.Store(&err)
		runErr <- err
	}()
	compDone := make(chan struct{})
	var compRes error
	go func() {
		defer close(compDone)
		compRes = n.comp.Run(lctx)
	}()
	defer n.stopCompaction(cancel, compDone)
	compStopped := (<-chan struct{})(compDone)
	tick := time.NewTicker(n.cfg.SpaceCheckPeriod)
	defer tick.Stop()
	statFailed := false
	for {
		select {
		case <-compStopped:
			compStopped = nil
			if compRes == nil {
				continue // ctx is done: the lifecycle returns next
			}
			n.health.Fail(compRes)
			cancel()
			<-runErr
			return compRes
		case err := <-runErr:
			if n.closing.Load() {
				return nil
			}
			if err == nil && ctx.Err() == nil {
				err = errors.New("node: the lifecycle ended on its own (a bug)")
			}
			if err != nil {
				n.health.Fail(err)
			}
			return err
		case <-n.w.Done():
			err := n.w.Err()
			if err == nil {
				err = errors.New("node: the archive writer stopped while the lifecycle ran (a bug)")
			}
			n.health.Fail(err)
			select {
			case <-runErr:
			case <-time.After(n.cfg.StopGrace):
				cancel()
				<-runErr
			}
			n.linger(ctx, err)
			return err
		case <-n.store.Faulted():
			return n.stopOnFault(ctx, cancel, runErr)
		case <-tick.C:
			n.checkSpace(&statFailed)
		}
	}
}

// stopCompaction cancels the compaction owner and waits for it to return:
// a pass stops between accounts, but not inside Pebble's manual compaction
// of the ranges it removed, which no ctx interrupts, and Close must not
// close the store under it. Past StopGrace it says what the stop waits
// for. After a disk fault, or once the writer has stopped on an error, a
// pass may be blocked in a store write for good: then it waits at most
// StopGrace more (what the pass removed is re-done by the next pass from
// its intent).
func (n *Node) stopCompaction(cancel context.CancelFunc, done <-chan struct{}) {
	cancel()
	slow := time.NewTimer(n.cfg.StopGrace)
	defer slow.Stop()
	for {
		select {
		case <-done:
			return
		case <-slow.C:
			n.log.Info("stopping: waiting for the compaction pass to end (Pebble's compaction of the ranges it removed cannot be interrupted)")
		case <-n.store.Faulted():
			n.awaitCompaction(done)
			return
		case <-n.w.Done():
			n.awaitCompaction(done)
			return
		}
	}
}

// awaitCompaction waits at most StopGrace for the compaction owner after
// a disk fault or the writer's failure.
func (n *Node) awaitCompaction(done <-chan struct{}) {
	select {
	case <-done:
	case <-time.After(n.cfg.StopGrace):
		n.log.Error("the compaction pass did not stop within the grace; not waiting for it", "grace", n.cfg.StopGrace)
	}
}

// stopOnFault stops the lifecycle after the store's disk fault: the probes
// fail at once, the components are cancelled and get StopGrace to return
// (one blocked on the writer may never), and the probes stay at 503 for
// FaultLinger.
func (n *Node) stopOnFault(ctx context.Context, cancel context.CancelFunc, runErr <-chan error) error {
	err := n.store.Fault()
	n.health.Fail(err)
	cancel()
	select {
	case <-runErr:
	case <-time.After(n.cfg.StopGrace):
		n.log.Error("the components did not stop within the grace after the disk fault; not waiting for them", "grace", n.cfg.StopGrace)
	}
	n.linger(ctx, err)
	return err
}

// checkSpace reads the volume's free space against the floor: below it the
// store records a disk fault, which Run's next turn handles. Only the first
// failed statfs is logged (failed says whether one was), not one line
// every period.
func (n *Node) checkSpace(failed *bool) {
	err := n.store.CheckSpace()
	if err != nil && !errors.Is(err, archive.ErrDiskFull) && !*failed {
		*failed = true
		n.log.Warn("cannot read the data dir's free space; the free-space floor is not enforced while this lasts", "err", err)
	}
}

// linger keeps the probes failing for FaultLinger before Run returns on a
// full disk or a disk fault (see DefaultFaultLinger).
func (n *Node) linger(ctx context.Context, err error) {
	if !errors.Is(err, archive.ErrDiskFull) && n.store.Fault() == nil {
		return
	}
	t := time.NewTimer(n.cfg.FaultLinger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// running records a Run in progress: Close cancels it through stop and
// waits for the returned channel, closed when Run returns.
func (n *Node) running(stop context.CancelFunc) chan struct{} {
	n.runMu.Lock()
	defer n.runMu.Unlock()
	n.runStop, n.runDone = stop, make(chan struct{})
	return n.runDone
}

// stopRun cancels a Run in progress and waits for it to return, so no
// component reads the store Close is about to close.
func (n *Node) stopRun() {
	n.runMu.Lock()
	stop, done := n.runStop, n.runDone
	n.runMu.Unlock()
	if stop != nil {
		n.closing.Store(true)
		stop()
		<-done
	}
}

// Close stops a Run still in progress (cancelling its components and
// waiting for it to return), then stops the subscribe server, drains the
// writer and closes the client and the store, in that order (subscribers
// read the store). It returns the
// writer's fatal error if one stopped it, or the store's disk fault. After a
// disk fault it waits at most StopGrace for the writer (which may be blocked
// in a commit for good) and then leaves it and the store to the process
// exit, saying so in the log. Safe to call more than once.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.stopRun()
		if n.sub != nil {
			_ = n.sub.Close()
		}
		n.ident.Close() // its background refreshes submit ident/ rows to the writer
		stuck := false
		if n.w != nil {
			n.closeErr, stuck = n.closeWriter()
		}
		if n.client != nil {
			n.client.Close()
		}
		if n.store != nil && !stuck {
			if err := n.store.Close(); err != nil && n.closeErr == nil {
				n.closeErr = err
			}
		}
	})
	return n.closeErr
}

// closeWriter closes the writer; after a disk fault it gives up after
// StopGrace and reports the writer stuck.
func (n *Node) closeWriter() (error, bool) {
	done := make(chan error, 1)
	go func() { done <- n.w.Close() }()
	select {
	case err := <-done:
		return err, false
	case <-n.store.Faulted():
	}
	select {
	case err := <-done:
		if err == nil {
			err = n.store.Fault()
		}
		return err, false
	case <-time.After(n.cfg.StopGrace):
		n.log.Error("the archive writer is blocked in a store write after the disk fault; not waiting for it: the store is left open for the process exit to release (everything synced is kept)",
			"waited", n.cfg.StopGrace)
		return n.store.Fault(), true
	}
}

// Handler serves /subscribe, /status, /healthz, /readyz and
// /zstd-dictionary. Hijacked websockets end with Close.
func (n *Node) Handler() http.Handler { return n.sub.Handler() }

// Store is the node's store (open until Close).
func (n *Node) Store() *archive.Store { return n.store }

// Writer is the archive writer.
func (n *Node) Writer() *archive.Writer { return n.w }

// Compaction is the compaction section of /status: the watermark, its lag,
// the last pass and whether compaction is halted.
func (n *Node) Compaction() CompactionStatus { return n.comp.Status() }

// RelayLink is the relay connection of the firehose consumer running,
// capture or live, or of the last one to run (/status's "firehose").
func (n *Node) RelayLink() firehose.Link { return n.firehose.Link() }

// Retrier is the steady-state retry runner.
func (n *Node) Retrier() *retry.Runner { return n.retrier }

// Bootstrap is the bootstrap in progress, nil outside it.
func (n *Node) Bootstrap() *bootstrap.Bootstrap { return n.boot.Load() }

// Health is the probes' state: the phase and any fatal error.
func (n *Node) Health() *lifecycle.Health { return n.health }

// LifecycleErr is what the lifecycle returned, nil before it returned: on a
// writer failure it tells whether the components saw the failure themselves
// within StopGrace (the failure) or were cancelled (nil).
func (n *Node) LifecycleErr() error {
	if p := n.lcErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (n *Node) setPhase(p archive.Phase) {
	for _, q := range []archive.Phase{archive.PhaseBootstrap, archive.PhaseMerging, archive.PhaseSteadyState} {
		v := 0.0
		if q == p {
			v = 1
		}
		n.phase.WithLabelValues(string(q)).Set(v)
	}
	n.health.SetPhase(p)
	if n.cfg.OnPhase != nil {
		n.cfg.OnPhase(p)
	}
}

// hostOf is host[:port] of an http(s) URL (the relay's, or the source's)
// in its canonical form (upstream.CanonicalHost: lower case, no trailing
// dot, no default port), with the URL's scheme. It is the relay's identity
// in the store, and the form downloads name their host in
// (Download.FinalHost, Error.Host), for the comparisons with them: the
// trusted host of the authority check, the host whose 429 parks every
// retry.
func hostOf(rawURL string) (host, scheme string, err error) {
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", "", fmt.Errorf("node: relay %q: want an http(s) URL", rawURL)
	}
	return upstream.CanonicalHost(u.Scheme, u.Host), u.Scheme, nil
}

// checkRelay refuses a store that follows another relay, or whose relay or
// firehose position is lost, unless reset says so (C6), and records the
// relay on first start. What it reads is read fail-closed: an unreadable key
// stops the start, it is never taken for an absent one.
func checkRelay(store *archive.Store, host, scheme string, reset bool, now time.Time, log *slog.Logger) error {
	f := lifecycle.RelayFacts{Requested: host, Reset: reset}
	var err error
	if f.Phase, err = store.Phase(); err != nil {
		return err
	}
	f.Stored, err = store.Relay()
	switch {
	case errors.Is(err, archive.ErrNotFound):
		if f.Untouched, err = store.Untouched(); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		// Compared in the canonical form: older builds recorded the host
		// as --relay wrote it (relay:443 is relay).
		f.Stored = upstream.CanonicalHost(scheme, f.Stored)
	}
	if _, err = store.RelayCursor(); err == nil {
		f.HasCursor = true
	} else if !errors.Is(err, archive.ErrNotFound) {
		return err
	}
	var silentAt time.Time
	if !f.HasCursor {
		if silentAt, err = store.Time(archive.KeyRelaySilentAt); err == nil {
			f.Silent = true
		} else if !errors.Is(err, archive.ErrNotFound) {
			return err
		}
	}
	d, err := lifecycle.DecideRelay(f)
	if err != nil {
		return err
	}
	switch d {
	case lifecycle.RelayRecord:
		return store.SetRelay(host, false)
	case lifecycle.RelayReset:
		g, err := store.RecordRelayGap(host, true, now)
		if err != nil {
			return err
		}
		if f.Stored == "" {
			log.Error("archive gap: the store records no relay; --reset-relay-cursor records this one and follows it from its live tip: "+
				"events since the last durable position are not archived until the gap's repair pass fetches what changed",
				"phase", f.Phase, "relay", host, "dropped_cursor", f.HasCursor, "gap", g.ID, "from_seq", g.FromSeq)
		} else {
			log.Warn("following another relay: its cursor is dropped; events between the two relays are not archived until the gap's repair pass fetches what changed",
				"old", f.Stored, "new", host, "gap", g.ID, "from_seq", g.FromSeq)
		}
	case lifecycle.RelaySilent:
		log.Warn("no cursor/relay: the relay has sent no firehose event since capture's wait expired; following its live tip, "+
			"what it sent while backstream was down recorded as a gap with the stream's first event",
			"phase", f.Phase, "relay", host, "silent_since", silentAt)
	case lifecycle.RelayFollowTip:
		g, err := store.RecordRelayGap(host, false, now)
		if err != nil {
			return err
		}
		log.Error("archive gap: the store has no cursor/relay; --reset-relay-cursor follows the relay from its live tip: "+
			"events since the last durable position are not archived until the gap's repair pass fetches what changed",
			"phase", f.Phase, "relay", host, "gap", g.ID)
	}
	return nil
}
