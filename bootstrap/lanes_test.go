package bootstrap_test

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/upstream"
)

// heldRoster is a roster of hosts hosts, paged as asked; each host's
// listing waits until release is closed (or its context ends), then lists
// nothing.
type heldRoster struct {
	hosts   int
	release chan struct{}
	mu      sync.Mutex
	listed  map[string]int
}

func (f *heldRoster) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	i, _ := strconv.Atoi(cursor)
	var p upstream.HostsPage
	for ; i < f.hosts && len(p.Hosts) < limit; i++ {
		p.Hosts = append(p.Hosts, upstream.HostEntry{Host: fmt.Sprintf("h%06d.test", i), Status: "active", Accounts: 1})
	}
	if i < f.hosts {
		p.Cursor = strconv.Itoa(i)
	}
	return p, nil
}

func (f *heldRoster) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	select {
	case <-f.release:
	case <-ctx.Done():
		return upstream.Page{}, ctx.Err()
	}
	f.mu.Lock()
	f.listed[host]++
	f.mu.Unlock()
	return upstream.Page{}, nil
}

// goroutinesIn counts the goroutines in fn (a function that does not
// call itself) in a dump of every goroutine's stack.
func goroutinesIn(fn string) int {
	buf := make([]byte, 8<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), fn)
}

// TestFleetLanesBoundedGoroutines: a roster of 2,000 hosts whose listings
// are all held is listed by a bounded pool of lanes, not a goroutine per
// host: once the run is durably blocked, the goroutines listing a host and
// the run's goroutines in all are bounded by the workers, not the roster
// (a hostile relay's roster may name a million hosts). Released, every
// host is listed once and the run ends.
func TestFleetLanesBoundedGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(3, 1))
		f := &heldRoster{hosts: 2000, release: make(chan struct{}), listed: map[string]int{}}
		b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}})
		const workers = 4 // bootOver's
		bound := bootstrap.LaneRunnersPerWorker * workers
		synctest.Wait()
		before := runtime.NumGoroutine()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		synctest.Wait()
		listing := goroutinesIn("bootstrap.(*Bootstrap).enumerate(")
		added := runtime.NumGoroutine() - before
		close(f.release)
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		// The run's own: the lane runners, the workers, the recorder, the
		// checkpointer, Run itself, and a few of the writer's and store's.
		if listing > bound || added > bound+workers+32 {
			t.Fatalf("%d hosts held: %d goroutines listing a host, %d goroutines added by the run; want at most %d listing (%d per worker) and %d in all",
				f.hosts, listing, added, bound, bootstrap.LaneRunnersPerWorker, bound+workers+32)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.listed) != f.hosts {
			t.Fatalf("%d of %d hosts listed", len(f.listed), f.hosts)
		}
		for h, n := range f.listed {
			if n != 1 {
				t.Fatalf("%s listed %d times", h, n)
			}
		}
		if p := b.Progress().Hosts; p.ByState[bootstrap.HostDone] != f.hosts {
			t.Fatalf("/status hosts: %+v", p.ByState)
		}
		t.Logf("%d hosts: %d goroutines listing, %d added by the run", f.hosts, listing, added)
	})
}

// downFirstRoster is a roster whose first down hosts (in name order) fail
// every listing (transient: refused at once, or, with attempt set,
// blackholed: a timeout after attempt) and whose up hosts list nothing.
// firstUp, when set, is sent the time an up host is first asked.
type downFirstRoster struct {
	down, up int
	status   string // what listHosts says of the down hosts ("" active)
	attempt  time.Duration
	firstUp  chan time.Time
	mu       sync.Mutex
	listed   map[string]bool
	early    int // down hosts' requests made before an up host's first
}

func (f *downFirstRoster) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	var p upstream.HostsPage
	status := cmp.Or(f.status, "active")
	for i := range f.down {
		p.Hosts = append(p.Hosts, upstream.HostEntry{Host: fmt.Sprintf("a-down%02d.test", i), Status: status, Accounts: 1})
	}
	for i := range f.up {
		p.Hosts = append(p.Hosts, upstream.HostEntry{Host: fmt.Sprintf("b-up%02d.test", i), Status: "active", Accounts: 1})
	}
	return p, nil
}

func (f *downFirstRoster) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	if host[0] == 'a' {
		f.mu.Lock()
		if len(f.listed) == 0 {
			f.early++
		}
		f.mu.Unlock()
		return upstream.Page{}, f.fail(ctx, host)
	}
	f.mu.Lock()
	if len(f.listed) == 0 && f.firstUp != nil {
		f.firstUp <- time.Now()
	}
	f.listed[host] = true
	f.mu.Unlock()
	return upstream.Page{}, nil
}

// fail is a down host's answer.
func (f *downFirstRoster) fail(ctx context.Context, host string) error {
	if f.attempt == 0 {
		return fmt.Errorf("dial %s: %w", host, syscall.ECONNREFUSED)
	}
	select {
	case <-time.After(f.attempt):
		return fmt.Errorf("dial %s: %w", host, syscall.ETIMEDOUT)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// firstUpWithin waits (in fake time) for an up host's first page: how
// long after start it came, and whether that was within bound ("not
// within a day" when it never came).
func (f *downFirstRoster) firstUpWithin(start time.Time, bound time.Duration) (string, bool) {
	select {
	case at := <-f.firstUp:
		return at.Sub(start).String(), true
	case <-time.After(bound):
	}
	select {
	case at := <-f.firstUp:
		return at.Sub(start).String(), false
	case <-time.After(24 * time.Hour):
		return "not within a day", false
	}
}

func (f *downFirstRoster) upListed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.listed)
}

// TestFleetLaneWaitingToRetryHoldsNoRunner: a host cut for failing waits
// for its next attempt parked, not on a lane runner: with as many down
// hosts as runners, taken first, and their retry waits held, every other
// host is still listed. Released, the down hosts are tried again, given up
// on, and the run ends.
func TestFleetLaneWaitingToRetryHoldsNoRunner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(3, 1))
		const workers = 4 // bootOver's
		f := &downFirstRoster{down: bootstrap.LaneRunnersPerWorker * workers, up: 8, listed: map[string]bool{}}
		gate := make(chan struct{})
		b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}}, func(c *bootstrap.Config) {
			c.ListRetries, c.HostRetries = 1, 1
			c.Sleep = func(ctx context.Context, d time.Duration) error {
				if d < 3*time.Second { // a page's retry (1 s, jittered), not a host's (5 s)
					return ctx.Err()
				}
				select {
				case <-gate:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		synctest.Wait()
		p := b.Progress().Hosts
		if got := f.upListed(); got != f.up {
			t.Fatalf("with the %d down hosts' retries held: %d of %d up hosts listed (hosts by state %v)", f.down, got, f.up, p.ByState)
		}
		if p.ByState[bootstrap.HostFailing] != f.down || len(p.Failing) == 0 || p.Failing[0].NextAttempt == nil {
			t.Fatalf("/status hosts while the retries are held: %+v", p)
		}
		close(gate)
		// Fake time: the hosts' retries are due within seconds of it.
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v", err)
			}
		case <-time.After(time.Hour):
			states := b.Progress().Hosts.ByState
			cancel()
			<-done // the store outlives the run
			t.Fatalf("the run has not ended an hour (fake) after the down hosts' retries were released: hosts by state %v", states)
		}
		if got := metric(t, e.reg, "backstream_bootstrap_host_retries_total", nil); got != float64(f.down) {
			t.Fatalf("host retries %v, want %d", got, f.down)
		}
		if p := b.Progress().Hosts; p.ByState[bootstrap.HostDone] != f.up || p.ByState[bootstrap.HostFailing] != f.down {
			t.Fatalf("/status hosts at the end: %+v", p.ByState)
		}
	})
}

// fullPageRoster is a roster of hosts hosts (paged as heldRoster's), each
// listing one final page of as many distinct active DIDs as the limit
// asks. It counts the entries served.
type fullPageRoster struct {
	heldRoster
	mu     sync.Mutex
	served int
}

func (f *fullPageRoster) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	var p upstream.Page
	for i := range limit {
		p.Repos = append(p.Repos, upstream.RepoEntry{DID: fmt.Sprintf("did:plc:%s%08d", strings.TrimSuffix(host, ".test"), i), Active: true})
	}
	f.mu.Lock()
	f.served += len(p.Repos)
	f.mu.Unlock()
	return p, nil
}

func (f *fullPageRoster) entriesServed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.served
}

// heldJobs blocks every job until release is closed (or its context
// ends), then fetches nothing; it counts the jobs completed per DID.
type heldJobs struct {
	countJobs
	release chan struct{}
}

func (j *heldJobs) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	select {
	case <-j.release:
	case <-ctx.Done():
		return backfill.Result{}, backfill.ErrCanceled
	}
	return j.countJobs.Run(ctx, req)
}

// TestFleetWindowBoundsEveryHost: the window bounds what the listings of
// every host hold ahead together, not each host's alone. A roster of 200
// hosts, each listing a full page of 10 distinct DIDs, under a window of
// 100, with every download held: once the run settles, the entries listed
// and not yet terminal are exactly the window (the listing fills it and
// stops), and the entries the hosts served are at most the window plus a
// page on each lane runner (a runner holds the page it waits for credit
// with). Released, every DID is fetched once and every host is done.
func TestFleetWindowBoundsEveryHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(3, 1))
		const window, pageLimit, workers = 100, 10, 4 // workers: bootOver's
		f := &fullPageRoster{heldRoster: heldRoster{hosts: 200}}
		jobs := &heldJobs{countJobs: countJobs{runs: map[string]int{}}, release: make(chan struct{})}
		b := e.bootOver(f, e.w, jobs, func(c *bootstrap.Config) { c.Window, c.PageLimit = window, pageLimit })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		synctest.Wait()
		p := b.Progress()
		served, ahead := f.entriesServed(), bootstrap.LaneRunnersPerWorker*workers*pageLimit
		if p.Enumerated != window || served > window+ahead {
			t.Fatalf("%d hosts of a page of %d each, downloads held: %d entries listed and not terminal (%d pages), %d served by the hosts; want exactly the window of %d listed and at most %d served (the window and a page on each of the %d lane runners)",
				f.hosts, pageLimit, p.Enumerated, p.Pages, served, window, window+ahead, bootstrap.LaneRunnersPerWorker*workers)
		}
		t.Logf("downloads held: %d entries listed (%d pages), %d served by the hosts", p.Enumerated, p.Pages, served)
		close(jobs.release)
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		jobs.mu.Lock()
		fetched := len(jobs.runs)
		for did, n := range jobs.runs {
			if n != 1 {
				t.Errorf("%s fetched %d times", did, n)
			}
		}
		jobs.mu.Unlock()
		if p := b.Progress(); fetched != f.hosts*pageLimit || p.Hosts.ByState[bootstrap.HostDone] != f.hosts {
			t.Fatalf("released: %d of %d DIDs fetched, hosts by state %v", fetched, f.hosts*pageLimit, p.Hosts.ByState)
		}
	})
}

// deadHosts are the ways a dead host fails each try: refused at once, or
// blackholed (the try waits the connect timeout).
var deadHosts = []struct {
	name    string
	attempt time.Duration
}{{"refused", 0}, {"blackholed", upstream.DefaultConnectTimeout}}

// TestFleetDeadHostsDoNotStarveHealthyOnes: with more dead hosts than lane
// runners, first in roster order, the healthy host after them is asked
// for its first page within the first round of the dead hosts' first
// attempts (Workers at a time), not after their pages' retry backoffs: a
// page waiting to be asked again waits parked, holding no runner, and a
// lane not yet begun is taken before a parked one. Dead hosts refuse at
// once, or are blackholed (each attempt waits the connect timeout while
// holding a request slot). In fake time.
func TestFleetDeadHostsDoNotStarveHealthyOnes(t *testing.T) {
	for _, tc := range deadHosts {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newBubbleEnv(t, worldCfg(3, 1))
				const workers = 2
				runners := bootstrap.LaneRunnersPerWorker * workers
				f := &downFirstRoster{down: 2 * runners, up: 1, attempt: tc.attempt, firstUp: make(chan time.Time, 1), listed: map[string]bool{}}
				b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}}, func(c *bootstrap.Config) { c.Workers = workers })
				// Every host's first attempt, Workers at a time; a page's
				// first retry waits at least 0.75 s.
				rounds := time.Duration((f.down + 1 + workers - 1) / workers)
				bound := rounds*tc.attempt + backfill.DefaultBackoffBase/2
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				done := make(chan error, 1)
				start := time.Now()
				go func() { done <- b.Run(ctx) }()
				if at, ok := f.firstUpWithin(start, bound); ok {
					t.Logf("%d dead hosts (%s), %d runners: the healthy host asked %s after the start (bound %v)", f.down, tc.name, runners, at, bound)
				} else {
					t.Errorf("%d dead hosts (%s) first in the roster, %d lane runners, %d workers: the healthy host first asked for a page %s (fake) after the start; want within %v, the first round of the dead hosts' first attempts",
						f.down, tc.name, runners, workers, at, bound)
				}
				cancel()
				<-done // the store outlives the run
			})
		})
	}
}

// TestFleetOfflineHostsBegunLast: the hosts the relay says are offline
// are begun after every other, so that however many of them are
// blackholed (each first try holding one of Workers request slots for the
// connect timeout), a host the relay says is active is asked for its
// first page at once, not after them. On the real network most of the
// roster's offline hosts are gone for good. In fake time.
func TestFleetOfflineHostsBegunLast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(3, 1))
		const workers = 2
		f := &downFirstRoster{down: 64, up: 1, status: "offline", attempt: upstream.DefaultConnectTimeout,
			firstUp: make(chan time.Time, 1), listed: map[string]bool{}}
		b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}}, func(c *bootstrap.Config) { c.Workers = workers })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- b.Run(ctx) }()
		// The lanes begun with the active host's (as many as there are
		// runners) race for the Workers request slots: it is asked within
		// their first tries, and before any other offline host's.
		runners := bootstrap.LaneRunnersPerWorker * workers
		bound := time.Duration((runners+workers-1)/workers)*upstream.DefaultConnectTimeout + time.Second
		at, ok := f.firstUpWithin(start, bound)
		f.mu.Lock()
		early := f.early
		f.mu.Unlock()
		if !ok || early >= runners {
			t.Errorf("%d blackholed hosts the relay says are offline, first in name order, %d workers: the active host first asked for a page %s (fake) after the start, after %d offline hosts' requests; want within %v, before %d (the lanes begun with it)",
				f.down, workers, at, early, bound, runners)
		}
		cancel()
		<-done // the store outlives the run
	})
}

// TestFleetDeadHostsLogBounded: hosts that are down fail every page try,
// and each try used to log a WARN: 64 down hosts logged about 4,600 lines
// over one bootstrap (on the real network, thousands of hosts are down).
// A host's failed page try is counted (backstream_listrepos_errors_total)
// and logged at most once a minute across hosts, with the tries it stands
// for; the relay's own tries are logged each. In fake time.
func TestFleetDeadHostsLogBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(3, 1))
		var buf bytes.Buffer
		var mu sync.Mutex
		f := &downFirstRoster{down: 64, up: 1, listed: map[string]bool{}}
		b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}}, func(c *bootstrap.Config) {
			c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&buf, &mu}, nil))
		})
		start := time.Now()
		if err := b.Run(context.Background()); err != nil {
			t.Fatalf("run: %v", err)
		}
		took := time.Since(start)
		tries := metric(t, e.reg, "backstream_listrepos_errors_total", map[string]string{"class": "transient"})
		mu.Lock()
		lines := strings.Count(buf.String(), "listRepos failed; retrying")
		mu.Unlock()
		if want := int(took/time.Minute) + 1; lines > want || tries < float64(f.down) {
			t.Fatalf("%d down hosts over %v (fake): %d failed page tries counted, %d WARN lines about them; want every try counted and at most %d lines (one a minute)",
				f.down, took, int(tries), lines, want)
		}
	})
}

// TestFleetFailingHostNextAttemptIsItsNextTry: a host shown failing after
// its listing was cut, listed again at its next attempt, whose first page
// fails again, waits parked for the page's retry: /status shows that
// retry as its next attempt, not the passed one it was listed again at.
// Every wait of the host's lane once it is failing is checked: /status
// says the host's next attempt is the end of that wait. In fake time.
func TestFleetFailingHostNextAttemptIsItsNextTry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(3, 1))
		f := &downFirstRoster{down: 1, up: 2, listed: map[string]bool{}}
		var b *bootstrap.Bootstrap
		t0 := time.Now()
		var mu sync.Mutex
		var checked int
		var wrong []string
		b = e.bootOver(f, e.w, &countJobs{runs: map[string]int{}}, func(c *bootstrap.Config) {
			c.ListRetries, c.HostRetries = 2, 2
			c.Sleep = func(ctx context.Context, d time.Duration) error {
				// Only the down host's lane waits: it is this wait's.
				if p := b.Progress().Hosts; len(p.Failing) == 1 {
					next, want := p.Failing[0].NextAttempt, time.Now().Add(d)
					mu.Lock()
					checked++
					if next == nil {
						wrong = append(wrong, fmt.Sprintf("at %v: no next_attempt, want %v (its lane waits %v)", time.Since(t0), want.Sub(t0), d))
					} else if !next.Equal(want) {
						wrong = append(wrong, fmt.Sprintf("at %v: next_attempt %v, want %v (its lane waits %v)", time.Since(t0), next.Sub(t0), want.Sub(t0), d))
					}
					mu.Unlock()
				}
				return backoff.Sleep(ctx, d)
			}
		})
		if err := b.Run(context.Background()); err != nil {
			t.Fatalf("run: %v", err)
		}
		mu.Lock()
		defer mu.Unlock()
		// Cut, then each of its 2 host retries: its 2 page retries and the
		// next host retry (none after the last cut).
		if checked < 2*3 || len(wrong) > 0 {
			t.Fatalf("the down host's lane waited %d times while failing; /status showed another next attempt %d times: %s",
				checked, len(wrong), strings.Join(wrong, "; "))
		}
	})
}

// blipRoster is a downFirstRoster with one more host, blip, last in the
// roster: its first page waits for release, then fails once (refused);
// every later try lists nothing and is sent on asked (the time).
type blipRoster struct {
	downFirstRoster
	release chan struct{}
	asked   chan time.Time
	blipMu  sync.Mutex
	tried   bool
}

const blipHost = "c-blip.test"

func (f *blipRoster) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	p, _ := f.downFirstRoster.ListHosts(ctx, cursor, limit)
	p.Hosts = append(p.Hosts, upstream.HostEntry{Host: blipHost, Status: "active", Accounts: 1})
	return p, nil
}

func (f *blipRoster) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	if host != blipHost {
		return f.downFirstRoster.HostListRepos(ctx, host, cursor, limit)
	}
	f.blipMu.Lock()
	first := !f.tried
	f.tried = true
	f.blipMu.Unlock()
	if !first {
		f.asked <- time.Now()
		return upstream.Page{}, nil
	}
	select {
	case <-f.release:
		return upstream.Page{}, fmt.Errorf("dial %s: %w", host, syscall.ECONNREFUSED)
	case <-ctx.Done():
		return upstream.Page{}, ctx.Err()
	}
}

// asleepPast counts the waits of wakes (under mu) that end after now+d, or
// 0 when one ends sooner: a runner due to wake by then.
func asleepPast(mu *sync.Mutex, wakes []time.Time, now time.Time, d time.Duration) int {
	mu.Lock()
	defer mu.Unlock()
	n := 0
	for _, w := range wakes {
		switch {
		case w.After(now.Add(d)):
			n++
		case w.After(now):
			return 0
		}
	}
	return n
}

// TestFleetEarlyParkedLaneNotBehindSleepingRunners: once every lane is
// begun, with more down hosts parked for their host retries than there
// are lane runners, and every runner but one asleep on one of them, a lane
// that parks later for a page retry (about 1 s) is asked again after about
// its own wait, not once a sleeping runner wakes: the runner that parks a
// lane takes the parked lane due first, so no runner sleeps on a lane due
// after one that waits unheld. In fake time.
func TestFleetEarlyParkedLaneNotBehindSleepingRunners(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(3, 1))
		const workers = 2
		runners := bootstrap.LaneRunnersPerWorker * workers
		f := &blipRoster{downFirstRoster: downFirstRoster{down: 2 * runners, listed: map[string]bool{}},
			release: make(chan struct{}), asked: make(chan time.Time, 1)}
		var mu sync.Mutex
		var wakes []time.Time // when each wait of a lane ends
		b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}}, func(c *bootstrap.Config) {
			c.Workers, c.ListRetries, c.HostRetries = workers, 1, 8
			c.Sleep = func(ctx context.Context, d time.Duration) error {
				mu.Lock()
				wakes = append(wakes, time.Now().Add(d))
				mu.Unlock()
				return backoff.Sleep(ctx, d)
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		// A page's first retry waits at most 1.25 s (1 s, jittered).
		bound := backfill.DefaultBackoffBase * 5 / 4
		// After 5 minutes the down hosts' host retries are minutes apart;
		// the lane parks once every other runner is asleep past its wait.
		time.Sleep(5 * time.Minute)
		asleep := 0
		for end := time.Now().Add(time.Hour); asleep < runners-1; {
			if time.Now().After(end) {
				t.Fatalf("no moment in an hour (fake) when %d of the %d lane runners slept past %v: the test proves nothing", runners-1, runners, bound)
			}
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
			asleep = asleepPast(&mu, wakes, time.Now(), bound)
		}
		released := time.Now()
		close(f.release)
		select {
		case at := <-f.asked:
			t.Logf("%d down hosts parked, %d of %d runners asleep past its wait: the lane parked for a page retry asked again %v after its failed try", f.down, asleep, runners, at.Sub(released))
		case <-time.After(bound):
			late := "not within an hour"
			select {
			case at := <-f.asked:
				late = at.Sub(released).String()
			case <-time.After(time.Hour):
			}
			t.Errorf("%d down hosts parked for host retries, %d of %d lane runners asleep on them: a lane parked for a page retry was asked again %s (fake) after its failed try; want within %v, its own wait",
				f.down, asleep, runners, late, bound)
		}
		cancel()
		<-done // the store outlives the run
	})
}

// TestFleetOfflineHostEndsWithinItsRetries: a host the relay's roster
// gives as offline is listed (every status but banned is), and when it is
// really down (every request refused, or blackholed: each attempt waits
// the connect timeout) it holds bootstrap's end no longer than its
// retries allow at their defaults: each of its HostRetries+1 listings
// tries its page ListRetries+1 times, every wait at its longest jitter,
// and the host's retries wait between listings; then it ends failing on
// /status, given up (left to discovery), while the other host is done.
// At the defaults that is 2,152.5 s (about 36 minutes; 33.4 nominal),
// and 810 s more when each of its 81 attempts waits the 10 s connect
// timeout. In fake time.
func TestFleetOfflineHostEndsWithinItsRetries(t *testing.T) {
	pages := backoff.Policy{Base: backfill.DefaultBackoffBase, Max: backfill.DefaultBackoffMax}
	hosts := backoff.Policy{Base: bootstrap.HostRetryBase, Max: bootstrap.HostRetryMax}
	var waits time.Duration
	for i := range bootstrap.DefaultHostRetries {
		waits += hosts.Delay(i, 1)
	}
	for i := range bootstrap.DefaultListRetries {
		waits += (bootstrap.DefaultHostRetries + 1) * pages.Delay(i, 1)
	}
	tries := (bootstrap.DefaultHostRetries + 1) * (bootstrap.DefaultListRetries + 1)
	for _, tc := range deadHosts {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newBubbleEnv(t, worldCfg(3, 1))
				f := &downFirstRoster{down: 1, up: 1, status: "offline", attempt: tc.attempt, listed: map[string]bool{}}
				b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}})
				bound := waits + time.Duration(tries)*tc.attempt
				start := time.Now()
				if err := b.Run(context.Background()); err != nil {
					t.Fatalf("run: %v", err)
				}
				took := time.Since(start)
				failed := metric(t, e.reg, "backstream_listrepos_errors_total", map[string]string{"class": "transient"})
				p := b.Progress().Hosts
				if took > bound || failed != float64(tries) || p.ByState[bootstrap.HostFailing] != 1 || p.ByState[bootstrap.HostDone] != 1 ||
					len(p.Failing) != 1 || p.Failing[0].NextAttempt != nil {
					t.Fatalf("an offline host down for good (%s): bootstrap ended %v (fake) after it began, its failed tries %v, /status hosts %+v; want at most %v (its retries), %d tries, the host failing with no next attempt and the other done",
						tc.name, took, failed, p, bound, tries)
				}
				t.Logf("an offline host down for good (%s): bootstrap ended %v (fake) after it began, %d tries; bound %v", tc.name, took, tries, bound)
			})
		})
	}
}

// pagedUpRoster is a downFirstRoster whose up hosts each list pages pages
// of one DID, recording when each page is asked.
type pagedUpRoster struct {
	downFirstRoster
	pages int
	asked []time.Time
	done  chan struct{} // closed when the last page is asked
}

func (f *pagedUpRoster) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	if host[0] == 'a' {
		return upstream.Page{}, f.fail(ctx, host)
	}
	i, _ := strconv.Atoi(cursor)
	f.mu.Lock()
	f.asked = append(f.asked, time.Now())
	if len(f.asked) == f.pages {
		close(f.done)
	}
	f.mu.Unlock()
	p := upstream.Page{Repos: []upstream.RepoEntry{{DID: fmt.Sprintf("did:plc:%s%08d", strings.TrimSuffix(host, ".test"), i), Active: true}}}
	if i+1 < f.pages {
		p.Cursor = strconv.Itoa(i + 1)
	}
	return p, nil
}

// TestFleetAnsweredHostNotStarvedByUntested: when a request slot frees,
// a host that has answered in the run gets it before any host that has
// not, and no slot is held back while anyone waits. 64 hosts the relay
// says are active but that are blackholed (each try waits the connect
// timeout) are named before a healthy host that lists 20 pages, with 2
// workers. The healthy host's first page, a host not yet answered, waits
// its turn among the first tries, both slots at a time: within 64 × 10 s
// over 2 workers (5m20s, as before there was any priority). Once it has
// answered, each of its next pages takes the first slot that frees: within
// one connect timeout of the page before, not behind the blackholed
// hosts' tries and retries. In fake time.
func TestFleetAnsweredHostNotStarvedByUntested(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(3, 1))
		const workers = 2
		f := &pagedUpRoster{downFirstRoster: downFirstRoster{down: 64, up: 1, attempt: upstream.DefaultConnectTimeout, listed: map[string]bool{}},
			pages: 20, done: make(chan struct{})}
		b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}}, func(c *bootstrap.Config) { c.Workers = workers })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- b.Run(ctx) }()
		select {
		case <-f.done:
		case <-time.After(24 * time.Hour):
		}
		cancel()
		<-done // the store outlives the run
		f.mu.Lock()
		defer f.mu.Unlock()
		if len(f.asked) < f.pages {
			t.Fatalf("%d blackholed active hosts first, %d workers: the healthy host was asked %d of its %d pages in a day (fake)", f.down, workers, len(f.asked), f.pages)
		}
		const epsilon = 100 * time.Millisecond
		gapBound := upstream.DefaultConnectTimeout + epsilon
		var gaps []string
		var longest time.Duration
		for i := 1; i < len(f.asked); i++ {
			gap := f.asked[i].Sub(f.asked[i-1])
			longest = max(longest, gap)
			if gap > gapBound {
				gaps = append(gaps, fmt.Sprintf("page %d %v after page %d", i+1, gap, i))
			}
		}
		first := f.asked[0].Sub(start)
		firstBound := time.Duration(f.down)*upstream.DefaultConnectTimeout/workers + epsilon
		if len(gaps) > 0 || first > firstBound {
			t.Fatalf("%d blackholed hosts the relay says are active, first in name order, %d workers: the healthy host's first page asked %v (fake) after the start (want within %v), its next pages each asked more than %v after the one before: %s",
				f.down, workers, first, firstBound, gapBound, strings.Join(gaps, "; "))
		}
		t.Logf("the healthy host's first page asked %v (fake) after the start, its %d pages in %v, at most %v apart", first, f.pages, f.asked[len(f.asked)-1].Sub(f.asked[0]), longest)
	})
}
