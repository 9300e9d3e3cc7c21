// limits.go owns the bounds that keep getRepo downloads from exhausting the
// process: one scratch budget shared by every download's spill, the scratch
// volume's free-space floor (checked before and while a body spills), a
// minimum body throughput, and a cap on concurrent downloads per redirect
// target host. Every trip is counted
// (backstream_upstream_getrepo_limited_total{limit}) and logged at most once
// a minute per limit.

package upstream

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/internal/loglimit"
)

// Defaults of the download limits in Options.
const (
	// DefaultMinBodyBytes per DefaultBodyWindow is the slowest body
	// accepted: 64 KiB in every 20 s window, about 3 KiB/s. A PDS streams a
	// CAR at megabytes per second; a body under this is a trickle holding a
	// worker for nothing, and is cut within one window instead of at the
	// attempt deadline (5 min).
	DefaultMinBodyBytes = 64 << 10
	DefaultBodyWindow   = 20 * time.Second
	// DefaultHostWorkers caps concurrent downloads per redirect target
	// host, so one slow host cannot hold every worker: with the bootstrap's
	// 100 workers spread over a network's PDS hosts, 16 per host is rarely
	// reached by a healthy host.
	DefaultHostWorkers = 16
	// DefaultScratchBudgetMax caps the default scratch budget (half the
	// scratch volume's space above its floor when the client is built).
	DefaultScratchBudgetMax = 64 << 30
	// minScratchBudget is the least default budget, on a nearly full
	// volume; the free-space floor still applies.
	minScratchBudget = 64 << 20
	// floorCheckEvery is how many spilled bytes pass between two
	// free-space checks of the scratch volume (a statfs, about a
	// microsecond): 100 downloads overshoot the floor by 100 MiB at most.
	floorCheckEvery = 1 << 20
	// tripLogEvery spaces the log lines of one limit.
	tripLogEvery = time.Minute
)

// Limit names: label values of backstream_upstream_getrepo_limited_total.
const (
	limitHostWorkers   = "host_workers"
	limitRatePace      = "ratelimit_pace"
	limitMinBodyRate   = "min_body_rate"
	limitScratchBudget = "scratch_budget"
	limitMinFree       = "min_free"
	limitScratchWrite  = "scratch_write"
)

// trips counts limit trips and logs each limit at most once a minute.
type trips struct {
	log     *slog.Logger
	metrics *Metrics
	lines   *loglimit.Every // per limit
}

func newTrips(log *slog.Logger, m *Metrics) *trips {
	return &trips{log: log, metrics: m, lines: loglimit.New(tripLogEvery, nil)}
}

func (t *trips) trip(level slog.Level, limit, msg string, attrs ...any) {
	t.metrics.limit(limit)
	t.lines.Log(t.log, level, limit, msg, append([]any{"limit", limit}, attrs...)...)
}

// scratchSpace is the budget of every download's scratch file, and the
// scratch volume's free-space floor.
type scratchSpace struct {
	dir    string
	budget int64
	floor  uint64
	held   atomic.Int64
	trips  *trips
}

func newScratchSpace(dir string, budget, minFree int64, t *trips) (*scratchSpace, error) {
	sp, err := diskspace.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("upstream: new: scratch dir: %w", err)
	}
	s := &scratchSpace{dir: dir, budget: budget, floor: diskspace.Floor(minFree, sp.Total), trips: t}
	if s.budget <= 0 {
		s.budget = defaultScratchBudget(sp, s.floor)
	}
	t.metrics.scratch(0, s.budget)
	return s, nil
}

// defaultScratchBudget is half the space above the floor, clamped to
// [minScratchBudget, DefaultScratchBudgetMax].
func defaultScratchBudget(sp diskspace.Space, floor uint64) int64 {
	var above uint64
	if sp.Free > floor {
		above = sp.Free - floor
	}
	return int64(min(max(above/2, minScratchBudget), DefaultScratchBudgetMax))
}

// take reserves n more bytes of the budget; false when they do not fit.
func (s *scratchSpace) take(n int64) bool {
	if held := s.held.Add(n); held > s.budget {
		s.held.Add(-n)
		return false
	}
	return true
}

// give returns n bytes to the budget.
func (s *scratchSpace) give(n int64) {
	if n != 0 {
		s.trips.metrics.scratch(s.held.Add(-n), s.budget)
	}
}

// checkFloor fails with an ErrLocal *Error when writing need more bytes
// would leave the scratch volume below its floor.
func (s *scratchSpace) checkFloor(need int64) error {
	sp, err := diskspace.Stat(s.dir)
	if err != nil {
		s.trips.trip(slog.LevelWarn, limitMinFree, "upstream: scratch volume unreadable; spills refused", "err", err)
		return &Error{Err: fmt.Errorf("%w: %v", ErrLocal, err), kind: ErrLocal}
	}
	if sp.Below(s.floor + uint64(max(need, 0))) {
		s.trips.trip(slog.LevelWarn, limitMinFree, "upstream: scratch volume at its free-space floor; spills refused until space is freed",
			"dir", s.dir, "free", sp.Free, "floor", s.floor)
		return &Error{Err: fmt.Errorf("%w: scratch volume has %d bytes free, floor %d", ErrLocal, sp.Free, s.floor), kind: ErrLocal}
	}
	return nil
}

// spill is one download's share of the scratch space: the bytes it has
// reserved, returned once when its file is removed.
type spill struct {
	space *scratchSpace
	held  int64
	next  int64 // spilled size at which the floor is checked again
	once  sync.Once
}

// grow reserves n more bytes for a body of total bytes so far.
func (p *spill) grow(n, total int64) error {
	s := p.space
	if total > s.budget {
		// Larger than the whole budget: no retry can ever hold it.
		return &Error{Err: fmt.Errorf("%w: more than the scratch budget of %d bytes", ErrTooLarge, s.budget), kind: ErrTooLarge}
	}
	if !s.take(n) {
		s.trips.trip(slog.LevelWarn, limitScratchBudget, "upstream: scratch budget full; spills refused until downloads finish",
			"budget", s.budget)
		return &Error{Err: fmt.Errorf("%w: scratch budget of %d bytes held by other downloads", ErrLocal, s.budget), kind: ErrLocal}
	}
	p.held += n
	s.trips.metrics.scratch(s.held.Load(), s.budget)
	if total >= p.next {
		// Room for the bytes up to the next check, so this spill alone
		// never crosses the floor between two checks.
		p.next = total + floorCheckEvery
		return s.checkFloor(floorCheckEvery)
	}
	return nil
}

func (p *spill) release() {
	if p != nil {
		p.once.Do(func() { p.space.give(p.held) })
	}
}

// hostSlots caps concurrent downloads per redirect target host.
type hostSlots struct {
	max   int
	trips *trips
	mu    sync.Mutex
	n     map[string]int
}

// try takes a slot of host; false when the host is at its cap.
func (h *hostSlots) try(host string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[host] >= h.max {
		return false
	}
	h.n[host]++
	return true
}

func (h *hostSlots) release(host string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[host]--; h.n[host] <= 0 {
		delete(h.n, host)
	}
}

// held is the number of slots host holds.
func (h *hostSlots) held(host string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[host]
}

// getRepoState is one getRepo call's redirect bookkeeping, carried in its
// request context: the hops followed and the host whose slot it holds.
type getRepoState struct {
	hops  int
	slot  string
	paced string // the host whose pace it holds (a direct request)
	tried string // the host its request went to, whose outcome the breaker awaits
	probe uint64 // that request is the host's probe at the end of a cool-off: its round (breaker.allow); 0: not one
}

type getRepoStateKey struct{}

// redirected records a redirect of a getRepo request and takes the target
// host's slot (the relay itself is exempt) before the target is requested,
// releasing the previous target's. A target found not answering fails it
// at once (ErrHostDown, breaker.go), before its slot is taken. At the cap
// it fails with ErrHostBusy: the worker moves on instead of waiting behind
// a slow host.
func (c *Client) redirected(req *http.Request, hops int) error {
	st, ok := req.Context().Value(getRepoStateKey{}).(*getRepoState)
	if !ok {
		return nil
	}
	st.hops = hops
	host := canonicalHostPort(req.URL)
	if st.tried != "" && st.tried != host {
		// The previous target answered: with this redirect.
		c.triedHost(st, st.tried, tryAnswered)
	}
	if host == c.relayAddr || host == st.slot {
		return nil
	}
	c.releaseSlot(st)
	if err := c.tryHost(st, host); err != nil {
		return err
	}
	return c.takeSlot(st, host)
}

// takeSlot takes host's download slot for st; at the cap it fails with
// ErrHostBusy.
func (c *Client) takeSlot(st *getRepoState, host string) error {
	if !c.hosts.try(host) {
		c.trips.trip(slog.LevelInfo, limitHostWorkers, "upstream: download host at its concurrency cap; downloads to it fail fast and retry later",
			"host", host, "cap", c.hosts.max)
		return fmt.Errorf("%w: %s serves %d downloads", ErrHostBusy, host, c.hosts.max)
	}
	st.slot = host
	return nil
}

func (c *Client) releaseSlot(st *getRepoState) {
	if st.tried != "" {
		// A try whose request ended without an outcome of the host's.
		c.triedHost(st, st.tried, tryOther)
	}
	if st.paced != "" {
		c.pace.release(st.paced)
		st.paced = ""
	}
	if st.slot != "" {
		c.hosts.release(st.slot)
		st.slot = ""
	}
}

// HostDownloads is the number of downloads holding a slot of host
// (host[:port], in any spelling; without a port, the relay scheme's default).
func (c *Client) HostDownloads(host string) int {
	return c.hosts.held(canonicalHostPort(&url.URL{Scheme: c.relay.Scheme, Host: host}))
}

// ScratchHeld is the number of scratch bytes held by downloads in flight or
// not yet removed.
func (c *Client) ScratchHeld() int64 { return c.scratch.held.Load() }

// ScratchBudget is the shared scratch budget in bytes.
func (c *Client) ScratchBudget() int64 { return c.scratch.budget }

// rated wraps body in a watch that cancels the request (cause ErrSlowBody)
// when fewer than MinBodyBytes arrive in a BodyWindow; none when
// MinBodyBytes is negative. Every body read from upstream goes through it:
// without it a body trickling a byte a second holds its caller forever.
func (c *Client) rated(body io.Reader, cancel context.CancelCauseFunc) (io.Reader, func()) {
	if c.opts.MinBodyBytes <= 0 {
		return body, func() {}
	}
	w := startRateWatch(c.opts.MinBodyBytes, c.opts.BodyWindow, cancel)
	return &ratedReader{r: body, w: w}, w.stop
}

// rateWatch cancels a request whose body delivers fewer than min bytes in a
// window. Reads cost one atomic add; the check runs once per window.
type rateWatch struct {
	min     int64
	window  time.Duration
	n       atomic.Int64
	last    int64 // n at the previous check; only fire touches it
	stopped atomic.Bool
	cancel  context.CancelCauseFunc
	timer   *time.Timer
}

func startRateWatch(min int64, window time.Duration, cancel context.CancelCauseFunc) *rateWatch {
	w := &rateWatch{min: min, window: window, cancel: cancel}
	w.timer = time.AfterFunc(window, w.fire)
	return w
}

func (w *rateWatch) fire() {
	if w.stopped.Load() {
		return
	}
	got := w.n.Load()
	if got-w.last < w.min {
		w.cancel(ErrSlowBody)
		return
	}
	w.last = got
	w.timer.Reset(w.window)
}

func (w *rateWatch) stop() {
	w.stopped.Store(true)
	w.timer.Stop()
}

// Read counts the bytes of the body it wraps.
type ratedReader struct {
	r interface{ Read([]byte) (int, error) }
	w *rateWatch
}

func (r *ratedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.w.n.Add(int64(n))
	return n, err
}
