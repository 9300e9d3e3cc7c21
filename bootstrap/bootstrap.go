package bootstrap

// bootstrap.go owns the whole-network first pass: configuration, the worker
// pool and the coordinator that dispatches repos, counts their durable
// outcomes into the completion watermark and checkpoints the listRepos
// cursor.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/upstream"
	"golang.org/x/sync/semaphore"
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
	// the relay answers listHosts, else relay.
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
	// backoff.Sleep, the real clock).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
}

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
	if len(c.Repos) > 0 || c.MaxRepos > 0 {
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
	listSlots *semaphore.Weighted        // hosts mode: listRepos requests at once (Workers)
}

// New validates cfg.
func New(cfg Config) (*Bootstrap, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Bootstrap{cfg: cfg, inflight: make(map[string]attribution)}, nil
}

// recordedBatch is a batch of repos made durable as not_started.
type recordedBatch struct {
	dids []string
	err  error
}

// outcome is a job's result as a worker reports it.
type outcome struct {
	job
	res backfill.Result
	err error
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
			if err := b.coordinate(ctx, lanes); err != nil || !b.everyHostFailed() {
				return err
			}
			b.fallBackToRelay()
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

// coordinate runs the enumerators (one per lane: the relay's listing, or
// each host's), the workers and the scheduler, and owns the watermarks.
func (b *Bootstrap) coordinate(parent context.Context, lanes []lane) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	cfg := &b.cfg
	log := cfg.Logger
	fleet := lanes[0].host != ""

	pagesCh := make(chan *pageMsg)
	enumErr := make(chan error, len(lanes))
	dispatch := make(chan job)
	results := make(chan outcome)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel (deferred first-in, last-out: cancel runs before Wait)
	defer cancel()

	// Each lane has its own watermark and window (the relay's the whole
	// window; a host's its share, at least a page), so a slow host holds
	// back only its own listing.
	wms := make(map[string]*watermark, len(lanes))
	windows := make(map[string]*semaphore.Weighted, len(lanes))
	laneWindow := int64(cfg.Window)
	if fleet {
		laneWindow = max(int64(cfg.PageLimit), int64(cfg.Window/len(lanes)))
	}
	enumerating := 0
	for _, l := range lanes {
		l.start.host = l.host
		wms[l.host] = &watermark{pending: l.start}
		window := semaphore.NewWeighted(laneWindow)
		windows[l.host] = window
		switch {
		case len(cfg.Repos) > 0:
			enumerating++
			wg.Add(1)
			go func() {
				defer wg.Done()
				enumErr <- b.listed(ctx, pagesCh)
			}()
		case l.listing:
			enumerating++
			wg.Add(1)
			go func() {
				defer wg.Done()
				enumErr <- b.enumerateLane(ctx, l.host, l.start.cursor.Cursor, window, pagesCh)
			}()
		}
	}
	// The recorder makes batches of dispatched repos durable as not_started
	// just before they go to the workers, so after a crash only those
	// in flight or about to be (about two batches) are left not_started,
	// hence pending; the rest of their pages is simply listed again.
	recordReq := make(chan []string)
	recorded := make(chan recordedBatch)
	ahead := b.resolveAhead(ctx, &wg)
	serve(ctx, &wg, recordReq, recorded, func(batch []string) recordedBatch {
		for i := 0; ahead != nil && i < len(batch); i++ {
			select {
			case ahead <- batch[i]:
			case <-ctx.Done():
			}
		}
		return recordedBatch{dids: batch, err: b.writeNotStarted(ctx, batch)}
	})
	defer close(recordReq)
	for range cfg.Workers {
		serve(ctx, &wg, dispatch, results, func(j job) outcome {
			res, err := cfg.Jobs.Run(ctx, backfill.Request{DID: j.did, Host: j.host})
			return outcome{job: j, res: res, err: err}
		})
	}
	defer close(dispatch)
	// The checkpointer makes one checkpoint at a time durable and reports
	// it, so the coordinator never blocks on the writer for one.
	ckReq := make(chan checkpoint)
	ckDone := make(chan error)
	serve(ctx, &wg, ckReq, ckDone, func(c checkpoint) error { return b.writeCheckpoint(ctx, c) })
	defer close(ckReq)

	checkpointing := len(cfg.Repos) == 0 && cfg.MaxRepos == 0
	pageOf := make(map[string]*page)
	var queue []string // dispatched by a page, not yet durable as not_started
	// unrecorded: the repos of queue the store does not know yet (Progress.Unrecorded).
	unrecorded := make(map[string]struct{})
	hostCap := cfg.Workers // relay mode: the download client caps hosts
	if fleet {
		hostCap = cfg.HostWorkers
	}
	ready := newScheduler(hostCap) // durable as not_started, waiting for a worker
	recording := false
	recordingLen := 0 // repos of the batch being recorded
	batchSize := max(cfg.Workers, 16)
	inflight := 0
	ckOutstanding := false
	var ckSubmitted checkpoint
	durable := lanes[0].start
	var durableCovered int64 // entries covered by the durable checkpoints
	var coveredAtSubmit int64
	var enumerated int64
	var pageIdx int64
	covered := func() int64 {
		var n int64
		for _, wm := range wms {
			n += wm.covered
		}
		return n
	}
	outstanding := func() bool {
		for _, wm := range wms {
			if wm.outstanding() > 0 {
				return true
			}
		}
		return false
	}

	ticker := time.NewTicker(cfg.ProgressEvery)
	defer ticker.Stop()
	b.prog.set(func(p *Progress) {
		p.State = StateRunning
		p.ListingFinished = enumerating == 0 && len(cfg.Repos) == 0
		p.Checkpoint = describe(durable)
	})
	b.tick(true)

	submitCheckpoint := func() error {
		if !checkpointing || ckOutstanding {
			return nil
		}
		var c checkpoint
		ok := false
		for _, l := range lanes {
			if c, ok = wms[l.host].take(); ok {
				break
			}
		}
		if !ok {
			return nil
		}
		select {
		case ckReq <- c: // the checkpointer is idle: it takes it at once
		case <-parent.Done():
			return parent.Err()
		}
		ckOutstanding, ckSubmitted = true, c
		coveredAtSubmit = covered()
		return nil
	}
	advance := func(host string) error {
		wm := wms[host]
		for _, p := range wm.advance() {
			windows[host].Release(p.weight)
			if p.final && fleet && !p.cut {
				b.hosts().set(host, HostDone)
			}
		}
		if !checkpointing {
			durableCovered = covered()
		}
		cfg.Metrics.setLag(enumerated - durableCovered)
		return submitCheckpoint()
	}

	for {
		finished := enumerating == 0 && !outstanding() && len(queue) == 0 && ready.len() == 0 &&
			!recording && inflight == 0 && !ckOutstanding
		if finished {
			for _, wm := range wms {
				if _, dirty := wm.take(); dirty && checkpointing {
					// Unreachable: advance submits whenever a watermark moves.
					return errors.New("bootstrap: internal: checkpoint left unsubmitted")
				}
			}
			b.prog.set(func(p *Progress) { p.State = StateDone; p.Checkpoint = describe(durable) })
			b.tick(true)
			log.Info("bootstrap: done: the listing has ended and every repo is durably terminal")
			return nil
		}
		if !recording && len(queue) > 0 && ready.len() < cfg.Workers {
			n := min(len(queue), batchSize)
			batch := slices.Clone(queue[:n])
			clear(queue[:n])
			queue = queue[n:]
			recording, recordingLen = true, n
			select {
			case recordReq <- batch: // the recorder is idle: it takes it at once
			case <-parent.Done():
				return parent.Err()
			}
		}
		var out chan job
		head, ok := ready.peek()
		for ok && fleet {
			// A repo listed again by a host with a newer rev is fetched there.
			h := b.hostFor(head.did)
			if h == head.host {
				break
			}
			ready.move(head, h)
			head, ok = ready.peek()
		}
		if ok {
			out = dispatch
		}
		queued := len(queue) + ready.len() + recordingLen
		b.prog.set(func(p *Progress) { p.Queued, p.InFlight, p.Unrecorded = queued, inflight, int64(len(unrecorded)) })
		cfg.Metrics.setQueued(queued + inflight)
		select {
		case out <- head:
			ready.take(head)
			inflight++
		case rb := <-recorded:
			recording, recordingLen = false, 0
			if rb.err != nil {
				return b.stopped(parent, rb.err)
			}
			fresh := 0
			for _, d := range rb.dids {
				ready.push(b.hostFor(d), d)
				if _, ok := unrecorded[d]; ok {
					fresh++
					delete(unrecorded, d)
				}
			}
			// A batch also holds known repos listed again (an inactive
			// not_started repo now active): only the fresh ones are new.
			cfg.Metrics.discover(fresh, 0)
			b.prog.set(func(p *Progress) { p.Discovered += int64(fresh) })
		case pm := <-pagesCh:
			pageIdx++
			p := &page{idx: pageIdx, host: pm.host, reqCursor: pm.reqCursor, next: pm.next, final: pm.final, cut: pm.cut,
				entries: pm.entries, remaining: len(pm.dispatch), weight: pm.weight}
			for _, did := range pm.dispatch {
				pageOf[did] = p
			}
			queue = append(queue, pm.dispatch...)
			for _, d := range pm.fresh {
				unrecorded[d] = struct{}{}
			}
			enumerated += int64(pm.entries)
			wms[pm.host].add(p)
			b.prog.set(func(pr *Progress) {
				pr.Pages++
				pr.Enumerated = enumerated
				pr.Discovered += int64(pm.discovered)
			})
			if err := advance(pm.host); err != nil {
				return err
			}
		case err := <-enumErr:
			if err != nil {
				return b.stopped(parent, err)
			}
			if enumerating--; enumerating == 0 {
				enumErr = nil
				b.prog.set(func(p *Progress) { p.ListingFinished = len(cfg.Repos) == 0 })
			}
		case o := <-results:
			inflight--
			ready.done(o.host)
			if o.err != nil {
				if errors.Is(o.err, backfill.ErrCanceled) && parent.Err() != nil {
					return parent.Err()
				}
				return fmt.Errorf("bootstrap: job %s: %w", o.did, o.err)
			}
			p := pageOf[o.did]
			delete(pageOf, o.did)
			b.mu.Lock()
			delete(b.inflight, o.did)
			b.mu.Unlock()
			b.prog.record(&o.res)
			if p != nil {
				wms[p.host].done(p)
				if err := advance(p.host); err != nil {
					return err
				}
			}
		case err := <-ckDone:
			if err != nil {
				return b.stopped(parent, err)
			}
			if ckSubmitted.host == "" {
				durable = ckSubmitted
			}
			durableCovered = coveredAtSubmit
			ckOutstanding = false
			cfg.Metrics.setLag(enumerated - durableCovered)
			b.prog.set(func(p *Progress) { p.Checkpoint = describe(durable); p.CheckpointLag = enumerated - durableCovered })
			if err := submitCheckpoint(); err != nil {
				return err
			}
		case <-ticker.C:
			b.tick(false)
		case <-cfg.Writer.Done():
			return fmt.Errorf("bootstrap: %w", writerStopped(cfg.Writer))
		case <-parent.Done():
			return parent.Err()
		}
	}
}

// serve starts one goroutine of wg that runs fn on each request from req
// and sends the result on res, until req is closed or ctx ends.
func serve[T, R any](ctx context.Context, wg *sync.WaitGroup, req <-chan T, res chan<- R, fn func(T) R) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := range req {
			select {
			case res <- fn(v):
			case <-ctx.Done():
				return
			}
		}
	}()
}

// resolveAhead starts the look-ahead resolvers of Config.Resolve, or of
// Identity's Lookup (Workers goroutines, stopped by ctx) and returns their
// input, nil when there is nothing to resolve. Its buffer holds one batch: the recorder waits on it beyond, so
// the look-ahead stays bounded.
func (b *Bootstrap) resolveAhead(ctx context.Context, wg *sync.WaitGroup) chan string {
	cfg := &b.cfg
	resolve := cfg.Resolve
	if id := cfg.Identity; resolve == nil && id != nil && id.Mode() != ident.ModeOff {
		// A failure is the job's to report when its own lookup fails.
		resolve = func(ctx context.Context, did string) { _, _, _ = id.Lookup(ctx, did) }
	}
	if resolve == nil {
		return nil
	}
	ahead := make(chan string, max(cfg.Workers, 16))
	for range cfg.Workers {
		wg.Add(1)
		go func() { // owned: ends with ctx, waited for by coordinate
			defer wg.Done()
			for {
				select {
				case did := <-ahead:
					resolve(ctx, did)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return ahead
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
