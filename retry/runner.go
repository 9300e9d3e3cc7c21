package retry

// runner.go owns the Runner: its configuration, the candidate passes, the
// worker pool, and the fatal path (S6). Job outcomes are turned into parking
// and failures in outcome.go; the scheduler is sched.go.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/loglimit"
	"github.com/backstream/backstream/upstream"
)

// Jobs runs one whole-repo replacement and returns once its terminal state
// is durable; an error means nothing terminal was made durable (ErrStale:
// the replacement was refused; ErrCanceled: ctx ended; anything else: the
// writer could not make it durable). *backfill.Runner implements it.
type Jobs interface {
	Run(ctx context.Context, req backfill.Request) (backfill.Result, error)
}

var _ Jobs = (*backfill.Runner)(nil)

// Writer is what the runner needs of archive.Writer: submit a unit (host
// parking, the failure of a repo whose replacement was refused too often)
// and learn that the writer stopped.
type Writer interface {
	Submit(ctx context.Context, u *archive.Unit) error
	Done() <-chan struct{}
	Err() error
}

var _ Writer = (*archive.Writer)(nil)

// Defaults of Config.
const (
	DefaultWorkers     = 16
	DefaultHostWorkers = 4
	DefaultScanPeriod  = 30 * time.Second
	DefaultQueue       = 1024
	DefaultHostQueue   = 256
	DefaultPageKeys    = 4096
	// DefaultMaxRefetch: a replacement refused as stale (S9) is fetched
	// again at most this many times in a row; the next refusal makes the
	// repo an ordinary failure with backoff.
	DefaultMaxRefetch = 3
)

// ClassStale is the error class of a repo whose replacement was refused
// DefaultMaxRefetch+1 times in a row because the archive kept moving past
// the snapshot.
const ClassStale = "stale_replacement"

// ClassHostDown is what the park of a host found not answering
// (upstream.ErrHostDown) writes on its host/ row
// (archive.HostState.LastErrClass) and clears with it, as a 429's park
// writes backfill.ClassRateLimited; the repo's class stays transient.
const ClassHostDown = "host_down"

// Config configures a Runner. Zero fields take the defaults.
type Config struct {
	// Store is read for candidates, repo states and parked hosts. Required.
	Store *archive.Store
	// Writer receives the runner's own units. Required.
	Writer Writer
	// Jobs runs the replacements. Required. Give it a backfill.Runner whose
	// NextAttempt is Backoff{Interval, MaxDelay}.NextAttempt() (so a failure
	// is written with this schedule) and whose RateLimitRetries is negative
	// (so a 429 ends the job at once and parks its host here instead of
	// holding a worker asleep).
	Jobs Jobs
	// Relay is host[:port] of the relay every download is asked of first
	// (it redirects to the repo's PDS): a 429 from it parks every
	// download, whatever the repo's host (S4). Empty: no host is.
	Relay string
	// Scheme is the relay's URL scheme, the one every host is reached
	// with ("https" when empty). The relay and each repo's recorded host
	// are taken in their canonical form under it (upstream.CanonicalHost)
	// before they are compared to each other or to a parked host: a store
	// written by an older build records hosts as the download named them
	// (PDS.example:443, pds.example.), its rows are not rewritten.
	Scheme string
	// Workers bounds concurrent jobs overall (--retry-workers, 16);
	// HostWorkers per final host (--retry-host-workers, 4) (S2).
	Workers     int
	HostWorkers int
	// Interval and MaxDelay shape the backoff (--retry-interval 1 m,
	// --retry-max-delay 24 h); Interval is also the park of a 429 that
	// names no reset.
	Interval time.Duration
	MaxDelay time.Duration
	// ScanPeriod is the pause between two candidate passes when nothing
	// asks for an earlier one (Wake, a park expiring, a host whose queue
	// share was full draining). Default 30 s.
	ScanPeriod time.Duration
	// Queue bounds the repos waiting for a slot (default 1024); HostQueue
	// bounds one host's share of it (default 256), so one slow host never
	// fills the queue in front of the others.
	Queue     int
	HostQueue int
	// PageKeys is how many due/ keys one iterator reads before it is
	// closed (default 4096).
	PageKeys int
	// MaxRefetch: see DefaultMaxRefetch. Negative means 0.
	MaxRefetch int
	// Metrics may be nil; Logger nil discards.
	Metrics *Metrics
	Logger  *slog.Logger
	// Now is the clock of due checks, parks and backoff; Rand the jitter.
	Now  func() time.Time
	Rand func() float64
}

func (c *Config) defaults() error {
	if c.Store == nil || c.Writer == nil || c.Jobs == nil {
		return errors.New("retry: new runner: Store, Writer and Jobs are required")
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.HostWorkers <= 0 {
		c.HostWorkers = DefaultHostWorkers
	}
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	if c.ScanPeriod <= 0 {
		c.ScanPeriod = DefaultScanPeriod
	}
	if c.Queue <= 0 {
		c.Queue = DefaultQueue
	}
	if c.HostQueue <= 0 {
		c.HostQueue = DefaultHostQueue
	}
	if c.PageKeys <= 0 {
		c.PageKeys = DefaultPageKeys
	}
	switch {
	case c.MaxRefetch == 0:
		c.MaxRefetch = DefaultMaxRefetch
	case c.MaxRefetch < 0:
		c.MaxRefetch = 0
	}
	if c.Scheme == "" {
		c.Scheme = "https"
	}
	c.Relay = upstream.CanonicalHost(c.Scheme, c.Relay)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	return nil
}

// Runner is the steady-state replacement runner.
type Runner struct {
	cfg     Config
	backoff Backoff
	log     *slog.Logger
	m       *Metrics
	// lines bounds the lines of a host parked and of an account failed
	// stale: one of each per outcomeLogEvery.
	lines *loglimit.Every

	busy   atomic.Bool
	wake   chan struct{}
	parkMu sync.Mutex // orders park units, so a later park never lands before an earlier one

	mu     sync.Mutex
	cur    *exec // the run in progress
	status Status
}

// New validates cfg and applies the defaults.
func New(cfg Config) (*Runner, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Runner{
		cfg:     cfg,
		backoff: Backoff{Interval: cfg.Interval, MaxDelay: cfg.MaxDelay, Rand: cfg.Rand},
		log:     cfg.Logger,
		m:       cfg.Metrics,
		lines:   loglimit.New(outcomeLogEvery, cfg.Now),
		wake:    make(chan struct{}, 1),
	}, nil
}

// Backoff is the runner's retry schedule (hand NextAttempt to the jobs).
func (r *Runner) Backoff() Backoff { return r.backoff }

// Wake asks a running Run for a pass now instead of at the end of its
// ScanPeriod (for example after a #sync marked a repo due). It never blocks;
// wakes coalesce.
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// PassStats describes one candidate pass and, for RunOnce (the tests'
// synchronous step, export_test.go), the jobs it ran.
type PassStats struct {
	Scanned  int // due/ keys read: the repos due, never the repos known
	Due      int // due candidates seen (every outcome below)
	Queued   int // handed to the queue
	InFlight int // already queued or running (deduplicated)
	Parked   int // host parked: left for a later pass, not a failure
	HostFull int // host's queue share full: left for a later pass
	Duration time.Duration
	// Filled by RunOnce: jobs by result, and due repos found no longer due
	// when their turn came (skipped without a job).
	Results map[string]int
	Skipped int
	// MaxQueued and MaxTracked are the scheduler's high-water marks: the
	// queue length and the DIDs queued or running (bounded, S3).
	MaxQueued, MaxTracked int
}

func (ps *PassStats) add(p PassStats) {
	ps.Scanned += p.Scanned
	ps.Due += p.Due
	ps.Queued += p.Queued
	ps.InFlight += p.InFlight
	ps.Parked += p.Parked
	ps.HostFull += p.HostFull
	ps.Duration += p.Duration
}

// ParkedHost is a host parked after a 429, or while it is not answering.
type ParkedHost struct {
	Host    string
	UntilUS int64
}

// Status is the runner's state for /status.
type Status struct {
	Running     bool
	Due         int // repos due now: the last full pass's count, less the jobs finished since, plus what came due since
	Queued      int
	InFlight    int
	ParkedHosts int
	Parked      []ParkedHost // at most 10
	Passes      uint64
	LastPass    time.Time
	LastPassDur time.Duration
	Results     map[string]uint64 // job results since the runner was built
	Refused     uint64            // replacements refused as stale
}

// Status returns a snapshot.
func (r *Runner) Status() Status {
	r.mu.Lock()
	st := r.status
	st.Results = make(map[string]uint64, len(r.status.Results))
	for k, v := range r.status.Results {
		st.Results[k] = v
	}
	e := r.cur
	r.mu.Unlock()
	if e != nil {
		st.Running = true
		l := e.s.load()
		st.Queued, st.InFlight = l.queued, l.running
		st.Parked, st.ParkedHosts, _ = e.s.parkedHosts(10)
	}
	return st
}

// leftDue takes a finished job's repo off the due count (it left the due
// set): between two full passes, which may be far apart while a large
// backlog drains, the count follows the jobs and the repos that come due
// instead of staying at the last full pass's. pass is the last full pass
// that counted the repo (sched.done): while that pass still runs, the
// repo is taken off the count it makes, not off the one it replaces.
// Each full pass counts again.
func (e *exec) leftDue(pass uint64) {
	r := e.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if pass != 0 && pass == e.fullPass {
		e.fullLeft++
		return
	}
	r.status.Due = max(0, r.status.Due-1)
	r.m.setDue(r.status.Due)
}

func (r *Runner) record(result string) {
	r.m.attempt(result)
	r.mu.Lock()
	if r.status.Results == nil {
		r.status.Results = make(map[string]uint64)
	}
	r.status.Results[result]++
	if result == ResultStale {
		r.status.Refused++
	}
	r.mu.Unlock()
}

// exec is one Run (or the tests' RunOnce): its scheduler, workers and fatal
// error.
type exec struct {
	r      *Runner
	s      *sched
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	once   sync.Once
	err    error
	fatal  chan struct{} // closed on the first fatal error

	// readTo is the time up to which the last pass read the due index (0:
	// no pass yet); only the Run loop touches it.
	readTo int64
	// deferred: a job was deferred (ErrIndexPending) since the last full
	// pass; its repo stays due at a time a Wake's pass has read past, so
	// the next pass is a full one.
	deferred atomic.Bool
	// behind holds, for each host whose queue share was full when a pass
	// read one of its due repos, the due/ key of the first repo left
	// behind: every due repo of the host before it was offered. A resume
	// pass reads on from there when the share drains (resume). Bounded by
	// the hosts whose share filled; only the Run loop touches it.
	behind map[string][]byte
	// timerAt is when the scan period of the last full or Wake's pass
	// ends (a resume pass does not move it); only the Run loop touches it.
	timerAt time.Time
	// finished counts the jobs finished (any outcome); fullFinished and
	// fullRead are its value when the last full pass started and the keys
	// that pass read (fullDue).
	finished     atomic.Int64
	fullFinished int64
	fullRead     int
	// fullPasses numbers the full passes; fullPass is the one running (0:
	// none), and fullLeft the repos it counted as due whose jobs have
	// finished since, taken off its count as it ends. Under r.mu.
	fullPasses, fullPass uint64
	fullLeft             int

	mu      sync.Mutex
	results map[string]int
	skipped int
}

func (r *Runner) start(ctx context.Context) (*exec, error) {
	if !r.busy.CompareAndSwap(false, true) {
		return nil, ErrRunning
	}
	cctx, cancel := context.WithCancel(ctx)
	e := &exec{r: r, ctx: cctx, cancel: cancel, fatal: make(chan struct{}), results: map[string]int{}, behind: map[string][]byte{}}
	e.s = newSched(r.cfg.Workers, r.cfg.HostWorkers, r.cfg.Queue, r.cfg.HostQueue,
		func() int64 { return r.cfg.Now().UnixMicro() }, r.m)
	e.s.relay = r.cfg.Relay
	e.s.maxParkUS = r.maxPark().Microseconds()
	// Parks survive a restart: host/<host> holds them (doc.go).
	if err := loadParks(r.cfg.Store.DB(), e.s.restorePark); err != nil {
		cancel()
		r.busy.Store(false)
		return nil, r.fatalErr(fmt.Errorf("load parked hosts: %w", err))
	}
	r.mu.Lock()
	r.cur = e
	r.mu.Unlock()
	for i := 0; i < r.cfg.Workers; i++ {
		e.wg.Add(1)
		go e.worker()
	}
	return e, nil
}

// stop cancels and waits for every worker.
func (e *exec) stop() {
	e.cancel()
	e.wg.Wait()
	e.s.m.setLoad(0, 0)
	e.r.mu.Lock()
	e.r.cur = nil
	e.r.mu.Unlock()
	e.r.busy.Store(false)
}

// fatalErr counts and logs a machinery failure that did not happen inside a
// run (loading parks).
func (r *Runner) fatalErr(err error) error {
	err = fmt.Errorf("%w: %w", ErrFatal, err)
	r.m.fatalError()
	r.log.Error("retry runner stopped: failure of the runner itself", "err", err)
	return err
}

// fail records the run's fatal error once: counted, logged once, and every
// worker and the pass stop (S6).
func (e *exec) fail(err error) {
	e.once.Do(func() {
		e.err = fmt.Errorf("%w: %w", ErrFatal, err)
		e.r.m.fatalError()
		e.r.log.Error("retry runner stopped: failure of the runner itself", "err", e.err)
		close(e.fatal)
		e.cancel()
	})
}

func (e *exec) failed() error {
	select {
	case <-e.fatal:
		return e.err
	default:
		return nil
	}
}

// Run makes a first pass at once, then keeps passing over the store until
// ctx ends (it returns nil) or the machinery fails (it returns an error
// wrapping ErrFatal, already counted and logged; the caller stops the
// process). Per-repo failures never end Run.
func (r *Runner) Run(ctx context.Context) error {
	e, err := r.start(ctx)
	if err != nil {
		return err
	}
	defer e.stop()
	for kind, resume := passFull, map[string]bool(nil); ; {
		_, err := e.scan(kind, resume)
		if kind != passResume {
			e.timerAt = time.Now().Add(r.cfg.ScanPeriod)
		}
		// A park that ended during the pass left repos behind that only
		// a full pass reads again.
		ended := e.s.parkEnded()
		if err == nil {
			err = e.clearParks()
		}
		if err != nil {
			if ferr := e.failed(); ferr != nil {
				return ferr
			}
			if e.ctx.Err() != nil {
				return nil
			}
			e.fail(err)
			return e.err
		}
		var more bool
		if kind, resume, more = e.idle(ended); !more {
			if ferr := e.failed(); ferr != nil {
				return ferr
			}
			return nil
		}
	}
}

// The kinds of pass (see scan).
type passKind int

const (
	passFull   passKind = iota // every entry due now, then past the horizon
	passWake                   // what was written or came due since the last pass
	passResume                 // on from where full hosts' repos were left behind
)

func (k passKind) String() string {
	return [...]string{"full", "wake", "resume"}[k]
}

// fullReadPerJob bounds the keys a full pass on the scan period's timer
// costs per job finished since the previous full pass (fullDue).
const fullReadPerJob = 2

// fullDue reports whether the scan period's timer makes a full pass: the
// jobs finished since the last full pass, fullReadPerJob keys each, pay
// for reading again the keys it read. A timer's pass is otherwise a
// Wake's: every repo a pass leaves behind has its own trigger (a park's
// end, a host's share draining, a deferral), so a full pass only recounts
// the due repos and reads past the horizon, and a large backlog that
// drains slowly is not read in full every scan period.
func (e *exec) fullDue() bool {
	return (e.finished.Load()-e.fullFinished)*fullReadPerJob >= int64(e.fullRead)
}

// idle waits for the next pass: a host whose queue share was full
// draining to half (a resume pass for it), ScanPeriod after the last
// full or Wake's pass, a Wake, or the earliest park expiry. It returns
// false when the run ends. A Wake or the timer asks only for what was
// written or came due since the last pass, unless a park ended since
// (ended: during it) or a job was deferred for the record index (its
// repo stays due where the last pass read it): then, and on the timer
// when fullDue, the next pass is a full one. While the index backfill
// runs, every Wake's pass is so a full one.
func (e *exec) idle(ended bool) (kind passKind, resume map[string]bool, more bool) {
	r := e.r
	delay := time.Until(e.timerAt)
	if _, _, next := e.s.parkedHosts(0); next > 0 {
		d := time.Duration(next-r.cfg.Now().UnixMicro())*time.Microsecond + time.Millisecond
		delay = min(delay, d)
	}
	t := time.NewTimer(max(delay, time.Millisecond))
	defer t.Stop()
	wakeKind := func(full bool) passKind {
		if full || ended || e.s.parkEnded() || e.deferred.Swap(false) {
			return passFull
		}
		return passWake
	}
	for {
		// The timer first: resume passes that follow each other (jobs
		// faster than passes) never put off what came due meanwhile.
		select {
		case <-t.C:
			return wakeKind(e.fullDue()), nil, true
		default:
		}
		var changed <-chan struct{}
		if len(e.behind) > 0 {
			if resume, changed = e.s.drained(e.behind, min(r.cfg.Queue, r.cfg.HostQueue)/2); len(resume) > 0 {
				return passResume, resume, true
			}
		}
		select {
		case <-t.C:
			return wakeKind(e.fullDue()), nil, true
		case <-r.wake:
			return wakeKind(false), nil, true
		case <-changed:
		case <-e.ctx.Done():
			return 0, nil, false
		}
	}
}

// scan reads the due index page by page, offering every due repo it
// reads. A full pass reads every entry due now, then those past the
// horizon. A Wake's reads only what may have become due since the last
// pass: from where the last pass stopped reading, or from the earliest
// entry written since, if earlier. A resume pass reads on from the first
// repo left behind of the hosts in resume (their queue share drained:
// idle), up to now, and stops once each of them is full again or parked:
// the repos a pass leaves behind for a full share are thus read again
// once, not with every share that drains. The repos of a parked host
// wait for the full pass its park's end brings.
func (e *exec) scan(kind passKind, resume map[string]bool) (ps PassStats, err error) {
	r := e.r
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("retry: pass: panic: %v", p)
		}
	}()
	var from []byte
	pageKeys := r.cfg.PageKeys
	// A Wake's pass counts the repos that came due after what the last
	// pass read (their next attempt later than readTo): new to the due
	// count the last full pass made.
	since, fresh := e.readTo, 0
	switch kind {
	case passResume:
		for h := range resume {
			if k := e.behind[h]; from == nil || bytes.Compare(k, from) < 0 {
				from = k
			}
		}
		// A drained share takes about half a share: read little more
		// first, more only when other hosts' entries lie between.
		pageKeys = min(pageKeys, r.cfg.HostQueue)
	default:
		low, written := r.cfg.Store.TakeDueWritten()
		if kind == passWake && e.readTo > 0 {
			fromUS := e.readTo + 1
			if written {
				fromUS = min(fromUS, low)
			}
			from = archive.DueKey(fromUS, "")
		}
		if kind == passFull {
			// It finds every repo left behind again.
			clear(e.behind)
			e.fullFinished = e.finished.Load()
			// It offers with its number, and waits while the queue is
			// full: over a large backlog most of what it counts may
			// finish before it ends (leftDue).
			r.mu.Lock()
			e.fullPasses++
			e.fullPass, e.fullLeft = e.fullPasses, 0
			r.mu.Unlock()
			defer func() {
				r.mu.Lock()
				e.fullPass = 0
				r.mu.Unlock()
			}()
		}
	}
	full := kind == passFull
	var pass uint64
	if full {
		pass = e.fullPasses // only the Run loop moves it
	}
	leftFull := map[string]bool{} // hosts this pass found full
	var page []archive.DueEntry
	beyond := false // reading the next attempts past the horizon
	for kind != passResume || len(resume) > 0 {
		if err := e.ctx.Err(); err != nil {
			return ps, err
		}
		var next []byte
		var err error
		upTo := r.cfg.Now().UnixMicro()
		if beyond {
			upTo = math.MaxInt64 - 1
		} else if kind != passResume {
			e.readTo = upTo
		}
		page, next, err = r.cfg.Store.DuePage(from, upTo, pageKeys, page)
		if err != nil {
			return ps, fmt.Errorf("retry: candidate scan: %w", err)
		}
		ps.Scanned += len(page)
		for i, d := range page {
			if kind == passResume && len(resume) == 0 {
				next = nil // every resumed host is full again
				break
			}
			ps.Due++
			if kind == passWake && d.NextUS > since {
				fresh++
			}
			host := upstream.CanonicalHost(r.cfg.Scheme, d.Host)
			// Counted: by a full pass, or as newly due by a Wake's.
			count := dueMark{pass: pass, counted: full || kind == passWake && d.NextUS > since}
			res, err := e.s.offer(e.ctx, item{did: d.DID, host: host, count: count})
			if err != nil {
				return ps, err
			}
			switch res {
			case offerQueued:
				ps.Queued++
			case offerInFlight:
				ps.InFlight++
			case offerParked:
				ps.Parked++
				if resume[host] {
					// Its park's end brings a full pass.
					delete(e.behind, host)
					delete(resume, host)
				}
			case offerHostFull:
				ps.HostFull++
				if !beyond && !leftFull[host] {
					// Keys grow within a pass: the host's first is its
					// earliest left behind.
					leftFull[host] = true
					k := archive.DueKey(d.NextUS, d.DID)
					if cur, ok := e.behind[host]; resume[host] || !ok || bytes.Compare(k, cur) < 0 {
						e.behind[host] = k
					}
					delete(resume, host)
				}
			}
			page[i] = archive.DueEntry{}
		}
		if next == nil {
			if beyond || !full {
				break
			}
			// Then the next attempts further ahead than the runner ever
			// writes (see due): the clock was ahead when they were written.
			beyond, next = true, archive.DueKey(r.cfg.Now().Add(r.horizon()).UnixMicro()+1, "")
		}
		from = next
		pageKeys = min(2*pageKeys, r.cfg.PageKeys)
	}
	// A resumed host not full again has nothing left behind.
	for h := range resume {
		delete(e.behind, h)
	}
	ps.Duration = time.Since(start)
	r.m.pass()
	r.m.deferral(deferParked, ps.Parked)
	r.m.deferral(deferHostFull, ps.HostFull)
	r.mu.Lock()
	switch {
	case full:
		e.fullRead = ps.Scanned
		r.status.Due = max(0, ps.Due-e.fullLeft)
		e.fullPass = 0
	case fresh > 0:
		r.status.Due += fresh
	}
	r.m.setDue(r.status.Due)
	r.status.Passes++
	r.status.LastPass = start
	r.status.LastPassDur = ps.Duration
	r.mu.Unlock()
	r.log.Debug("retry pass", "kind", kind.String(), "scanned", ps.Scanned, "due", ps.Due, "queued", ps.Queued, "in_flight", ps.InFlight,
		"parked", ps.Parked, "host_full", ps.HostFull, "took", ps.Duration)
	return ps, nil
}

// maxPark is the longest park the runner writes: a 429's reset is bounded
// by upstream.RetryAfterCeiling, one that names none is Interval.
func (r *Runner) maxPark() time.Duration {
	return max(upstream.RetryAfterCeiling, r.cfg.Interval)
}

// horizon is the furthest ahead of now the runner, or a job wired to its
// Backoff, writes a next attempt: MaxDelay after a failure, the end of a
// park after a 429.
func (r *Runner) horizon() time.Duration { return r.cfg.MaxDelay + r.maxPark() }

// worker is one of the Workers goroutines (the global gate).
func (e *exec) worker() {
	defer e.wg.Done()
	for {
		it, ok := e.s.take(e.ctx)
		if !ok {
			return
		}
		out := e.process(it)
		counted := e.s.done(it)
		e.finished.Add(1)
		if e.ctx.Err() != nil {
			continue // a job the run's end interrupted left its repo due
		}
		switch out {
		case jobLeft:
			// Its repo left the due set: replaced, failed or parked
			// with a next attempt ahead.
			e.leftDue(counted.pass)
		case jobNotDue:
			// Found no longer due: counted as due by a pass that read it
			// (left since by another way, or read as its last job
			// ended), or only read again by a pass after its last job
			// had taken it off the count already.
			if counted.counted {
				e.leftDue(counted.pass)
			}
		}
	}
}

func (e *exec) count(result string) {
	e.r.record(result)
	e.mu.Lock()
	e.results[result]++
	e.mu.Unlock()
}

// jobOutcome is what a job did to its repo's place in the due set.
type jobOutcome int

const (
	jobLeft     jobOutcome = iota // it left the due set (or the run's machinery failed)
	jobNotDue                     // it was found no longer due: nothing ran
	jobDeferred                   // it stays due: the record index is still being backfilled
)

// process runs one due repo to an outcome. Errors of the machinery go to
// fail; per-repo outcomes are durable when it returns.
func (e *exec) process(it item) (out jobOutcome) {
	defer func() {
		if p := recover(); p != nil {
			e.fail(fmt.Errorf("retry: %s: panic: %v", it.did, p))
		}
	}()
	r := e.r
	// The scan may be minutes old: re-read the state, so a repo that was
	// deactivated or replaced meanwhile is not fetched.
	st, err := r.cfg.Store.RepoState(it.did)
	if errors.Is(err, archive.ErrNotFound) {
		e.skip()
		return jobNotDue
	}
	if err != nil {
		e.fail(fmt.Errorf("retry: %s: read state: %w", it.did, err))
		return
	}
	if !Due(st, r.cfg.Now().UnixMicro(), r.horizon()) {
		e.skip()
		return jobNotDue
	}
	for refused := 0; ; {
		// Candidates are active repos (Due): RepoNotFound then means a
		// migration window, a failure to retry, not a deletion.
		req := backfill.Request{DID: it.did, Replace: true, Active: true}
		if st.ErrClass == archive.ClassUnknownDID {
			req.UnknownDIDs = st.Attempts // E15: the directory's 404s so far
		}
		res, err := r.cfg.Jobs.Run(e.ctx, req)
		switch {
		case err == nil:
			if err := e.outcome(it, res); err != nil {
				e.machineryErr(err)
			}
			return
		case errors.Is(err, archive.ErrIndexPending):
			// The store's record index is still being backfilled: nothing
			// was fetched or archived, and the repo stays due for a later
			// pass (not a failure).
			r.m.deferral(deferIndexPending, 1)
			e.deferred.Store(true)
			e.skip()
			return jobDeferred
		case errors.Is(err, backfill.ErrStale):
			// S9: the archive moved past the snapshot; nothing was applied.
			r.m.refusedReplacement()
			e.count(ResultStale)
			refused++
			// The archive moved on: an account row may have made the
			// account inactive (archive.ErrInactiveReplacement), and an
			// inactive account is neither fetched nor failed (S8).
			if st, err := r.cfg.Store.RepoState(it.did); err != nil {
				e.fail(fmt.Errorf("retry: %s: read state: %w", it.did, err))
				return
			} else if !st.Active {
				e.skip()
				return
			}
			if refused <= r.cfg.MaxRefetch {
				r.log.Debug("retry: replacement refused as stale; fetching again", "did", it.did, "refused", refused)
				continue
			}
			if err := e.failStale(it.did, refused, err); err != nil {
				e.machineryErr(err)
			}
			return
		default:
			e.machineryErr(fmt.Errorf("retry: %s: job: %w", it.did, err))
			return
		}
	}
}

// machineryErr is fatal unless the run is ending anyway (a job or unit
// interrupted by cancellation made nothing durable and is not a failure).
func (e *exec) machineryErr(err error) {
	if e.ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, backfill.ErrCanceled) || errors.Is(err, context.DeadlineExceeded)) {
		return
	}
	e.fail(err)
}

func (e *exec) skip() {
	e.mu.Lock()
	e.skipped++
	e.mu.Unlock()
}
