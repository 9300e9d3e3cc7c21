package bootstrap

// bootstrap.go owns the whole-network first pass: its configuration, the
// run (the restart pass, then the coordinator of coordinator.go over the
// relay's listing or each host's) and the checkpoint's durable form.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/upstream"
)

// Defaults.
const (
	DefaultWorkers       = 100
	DefaultWindow        = 50_000
	DefaultPageLimit     = upstream.DefaultListReposLimit
	DefaultProgressEvery = 10 * time.Second
	DefaultListRetries   = 8
	DefaultPreloadWait   = 10 * time.Second
)

// Jobs runs one repository's backfill; *backfill.Runner implements it. Run
// returns once the terminal state is durable, or with an error when it made
// none durable.
type Jobs interface {
	Run(ctx context.Context, req backfill.Request) (backfill.Result, error)
}

var _ Jobs = (*backfill.Runner)(nil)

// Config configures a Bootstrap. Zero fields take the defaults.
type Config struct {
	// Store is read for repo states, the checkpoint and counts. Required.
	Store *archive.Store
	// Writer makes every state change durable (an *archive.Writer). Required.
	Writer backfill.Writer
	// Source pages listRepos. Required unless Repos is set.
	Source upstream.RepoSource
	// Fleet reads the relay's roster and each host's own listing (hosts
	// mode); nil runs relay mode.
	Fleet FleetSource
	// Identity resolves a DID listed by two hosts (a migration in flight)
	// to the PDS its document names; nil or ident.ModeOff: the newer
	// listed rev decides.
	Identity *ident.Resolver
	// Enumerate is EnumerateHosts, EnumerateRelay, or "" for hosts when
	// the relay answers listHosts and gives some active host an
	// accountCount, else relay (without counts a host's listing could
	// name at most upstream.HostListingSlack entries).
	Enumerate string
	// HostWorkers caps the concurrent jobs of one host in hosts mode
	// (the relay mode's cap is the download client's). Default 8.
	HostWorkers int
	// Jobs runs backfill jobs. Required.
	Jobs Jobs

	// Workers is the number of concurrent jobs, hence of concurrent getRepo
	// requests (E3). Default 100.
	Workers int
	// Resolve, when set, looks a repo's DID document up ahead of its job;
	// nil with a verifying Identity: Identity.Lookup, which fills the cache
	// the job reads (tests set Resolve to watch the look-ahead): each batch about to be dispatched is resolved by Workers
	// look-ahead goroutines while the repos before it download, so the
	// directory's latency overlaps the downloads instead of starting each
	// job. At most the batches recorded and not yet dispatched (about two
	// batches) are ahead. Nil: each job resolves its own DID.
	Resolve func(ctx context.Context, did string)
	// Preload, when set, runs beside the whole run, from its start until
	// it returns or the run ends (its ctx is then cancelled and Run waits
	// for it): node reads the PLC directory's export into Identity with
	// it, so that most look-ahead lookups find their DID in memory. The
	// run starts no job until Preload calls ready (node: its first page is
	// in) or returns, or PreloadWait has passed.
	Preload func(ctx context.Context, ready func())
	// PreloadWait bounds that wait. Default 10 s.
	PreloadWait time.Duration
	// Window bounds the repos enumerated beyond the checkpoint. Default 50,000.
	Window int
	// PageLimit is the listRepos page size (E1). Default 1000.
	PageLimit int
	// Repos (debug, E13): backfill exactly these DIDs, in this order, with
	// no enumeration and no cursor.
	Repos []string
	// MaxRepos (debug, E13): stop enumeration after this many listed
	// repos; no resumable cursor is ever committed.
	MaxRepos int

	// ListRetries is the ordinary retry budget of one listRepos page
	// (429s have the 20-retry budget of getRepo); spent, it cuts the
	// listing short. Default 8.
	ListRetries int
	// HostRetries is how many times a host whose listing was cut is
	// listed again in the same run, from where it was cut, after a wait
	// of 5 s doubling to 5 min (hosts mode); spent, the host is left
	// failing for discovery. Default 8 (about 15 minutes); negative: none.
	HostRetries int
	// ProgressEvery is the progress log period. Default 10 s.
	ProgressEvery time.Duration
	// Seed seeds the dispatch shuffle; 0 draws one at random.
	Seed uint64

	Logger  *slog.Logger
	Metrics *Metrics
	// Crash, when armed (tests), kills the process right after a page's
	// repos (crashpoint.BootstrapEnqueued) or a checkpoint
	// (crashpoint.Checkpoint) is durable. Nil in production.
	Crash *crashpoint.Set
	// Now and Sleep are the clock and the listRepos backoff sleep (default
	// backoff.Sleep, the real clock). Package node hands the same Sleep to
	// discovery's and the repair passes' listRepos retries.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

// Debug reports a debug run (Repos or MaxRepos set): a few repos, no
// resumable cursor, no hosts listed, no PLC export, and no account
// discovered, after bootstrap or from the stream.
func (c Config) Debug() bool { return len(c.Repos) > 0 || c.MaxRepos > 0 }

func (c *Config) defaults() error {
	if c.Store == nil || c.Writer == nil || c.Jobs == nil {
		return errors.New("bootstrap: Store, Writer and Jobs are required")
	}
	if c.Source == nil && len(c.Repos) == 0 {
		return errors.New("bootstrap: Source is required unless Repos is set")
	}
	if c.MaxRepos < 0 {
		return errors.New("bootstrap: MaxRepos must not be negative")
	}
	if len(c.Repos) > 0 && c.MaxRepos > 0 {
		return errors.New("bootstrap: Repos and MaxRepos are exclusive")
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.HostWorkers <= 0 {
		c.HostWorkers = DefaultHostWorkers
	}
	switch c.Enumerate {
	case "", EnumerateHosts, EnumerateRelay:
	default:
		return fmt.Errorf("bootstrap: enumerate %q: want hosts or relay", c.Enumerate)
	}
	if c.Debug() {
		c.Enumerate = EnumerateRelay // the debug modes list no hosts
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.PageLimit <= 0 {
		c.PageLimit = DefaultPageLimit
	}
	if c.ListRetries <= 0 {
		c.ListRetries = DefaultListRetries
	}
	if c.HostRetries == 0 {
		c.HostRetries = DefaultHostRetries
	}
	if c.ProgressEvery <= 0 {
		c.ProgressEvery = DefaultProgressEvery
	}
	if c.PreloadWait <= 0 {
		c.PreloadWait = DefaultPreloadWait
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = backoff.Sleep
	}
	return nil
}

// Bootstrap runs the first pass over the network. Run it once.
type Bootstrap struct {
	cfg Config

	// inflight holds DIDs dispatched in this run and not yet durably
	// terminal, so a DID listed twice is not dispatched twice. Shared by
	// the enumerator (adds) and the coordinator (removes after the
	// terminal state is durable).
	mu       sync.Mutex
	inflight map[string]attribution

	prog      progressState
	fleet     atomic.Pointer[fleetState] // hosts mode; nil in relay mode
	listSlots *prioritySlots             // hosts mode: listRepos requests at once (Workers), answered hosts first
	rosterSet map[string]bool            // hosts mode: the roster hosts listed (Foreign); set before any lane starts
}

// New validates cfg.
func New(cfg Config) (*Bootstrap, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Bootstrap{cfg: cfg, inflight: make(map[string]attribution)}, nil
}

// Run performs the bootstrap: the restart pass (R7), then enumeration from
// the last durable checkpoint (or the debug list), dispatch to the workers,
// and the watermark. It returns nil when bootstrap is done: the listing
// has ended (or the debug list is exhausted), every repo it dispatched is
// durably terminal, and the final checkpoint is durable. It returns
// ctx.Err() when stopped, or the first fatal error (writer failure, store
// read error). A listRepos page it cannot use, or one failing beyond its
// retry budget, is never fatal: it cuts the listing short (enumerate.go).
func (b *Bootstrap) Run(ctx context.Context) error {
	log := b.cfg.Logger
	ready, stop := b.preload(ctx)
	defer stop()
	b.prog.set(func(p *Progress) { p.State = StateRestartPass; p.Started = b.cfg.Now() })
	n, err := b.pendingPass(ctx)
	if err != nil {
		return b.stopped(ctx, err)
	}
	b.cfg.Metrics.pendingOnRestart(n)
	if n > 0 {
		log.Info("bootstrap: restart: active not_started repos are now pending (merge replaces them)", "repos", n)
	}
	b.prog.set(func(p *Progress) { p.PendingOnRestart = n })
	select {
	case <-ready:
	case <-time.After(b.cfg.PreloadWait):
		log.Info("bootstrap: starting before the preload's first part is in", "waited", b.cfg.PreloadWait)
	case <-ctx.Done():
		return ctx.Err()
	}

	var start checkpoint
	listing := true
	switch {
	case len(b.cfg.Repos) > 0:
	case b.cfg.MaxRepos > 0:
		log.Info("bootstrap: --max-repos: enumeration stops after the limit and commits no resumable cursor", "max_repos", b.cfg.MaxRepos)
	default:
		lanes, err := b.fleetLanes(ctx)
		if err != nil {
			return b.stopped(ctx, err)
		}
		if lanes != nil {
			// Hosts mode; with no host to list on the roster there is no
			// lane to run. The relay's listing follows the hosts' when
			// relayNeeded says so.
			if len(lanes) > 0 {
				if err := b.coordinate(ctx, lanes); err != nil {
					return err
				}
			}
			why := b.relayNeeded()
			if why == "" {
				return nil
			}
			b.fallBackToRelay(why)
		}
		c, err := b.cfg.Store.ListCursor(false)
		switch {
		case errors.Is(err, archive.ErrNotFound):
		case err != nil:
			return fmt.Errorf("bootstrap: read checkpoint: %w", err)
		case c.Finished:
			listing = false
			start.cursor = c
		default:
			start.cursor = c
		}
		if last, err := b.cfg.Store.ListCursor(true); err == nil {
			start.last = last.Cursor
		} else if !errors.Is(err, archive.ErrNotFound) {
			return fmt.Errorf("bootstrap: read checkpoint: %w", err)
		}
		if !listing {
			log.Info("bootstrap: the listing finished in an earlier run")
		} else if start.cursor.Cursor != "" {
			log.Info("bootstrap: resuming enumeration from the checkpoint", "cursor_bytes", len(start.cursor.Cursor))
		}
	}
	return b.coordinate(ctx, []lane{{start: start, listing: listing}})
}

// preload starts Config.Preload on an owned goroutine; ready is closed
// when it calls ready or returns (at once without one), and stop cancels
// its ctx and waits for it.
func (b *Bootstrap) preload(ctx context.Context) (ready <-chan struct{}, stop func()) {
	r := make(chan struct{})
	if b.cfg.Preload == nil {
		close(r)
		return r, func() {}
	}
	var once sync.Once
	signal := func() { once.Do(func() { close(r) }) }
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { // owned: stop cancels and waits
		defer close(done)
		defer signal()
		b.cfg.Preload(ctx, signal)
	}()
	return r, func() {
		cancel()
		<-done
	}
}

func (b *Bootstrap) stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// writeCheckpoint makes c durable in one unit and then fires
// crashpoint.Checkpoint.
func (b *Bootstrap) writeCheckpoint(ctx context.Context, c checkpoint) error {
	puts, err := checkpointPuts(c)
	if err == nil {
		err = applyUnit(ctx, b.cfg.Writer, &archive.Unit{Puts: puts})
	}
	if err != nil {
		return fmt.Errorf("bootstrap: checkpoint: %w", err)
	}
	b.cfg.Crash.Hit(crashpoint.Checkpoint)
	return nil
}

func describe(c checkpoint) string {
	switch {
	case c.cursor.Finished:
		return "finished"
	case c.cursor.Cursor == "":
		return "absent"
	}
	return "page"
}
