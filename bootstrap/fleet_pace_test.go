package bootstrap_test

// A host whose announced rate limit is spent waits for its reset without
// holding one of the listRepos request slots the hosts share, nor one of
// the download workers.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// pacedHost answers every listRepos page with one inactive account and a
// next cursor, announcing its budget spent until 5 minutes from now.
func pacedHost(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		w.Header().Set("Ratelimit-Limit", "1")
		w.Header().Set("Ratelimit-Remaining", "0")
		w.Header().Set("Ratelimit-Reset", strconv.FormatInt(time.Now().Add(5*time.Minute).Unix(), 10))
		writeListing(w, fmt.Sprintf("did:plc:paced%019d", n), strconv.Itoa(n+1))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// writeListing writes a listRepos page of one deactivated account.
func writeListing(w http.ResponseWriter, did, cursor string) {
	page := map[string]any{"repos": []map[string]any{{"did": did, "head": "", "rev": "", "active": false, "status": "deactivated"}}}
	if cursor != "" {
		page["cursor"] = cursor
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page)
}

// TestFleetPacedHostHoldsNoRequestSlot: two roster hosts have announced
// their budget spent for the next 5 minutes (ratelimit-remaining 0), with
// 2 request slots (Workers) shared by the hosts' listings. A third host,
// which has announced nothing, is listed through its last page at once:
// the spent hosts' pages wait for their reset parked, on no slot. Before,
// each held a slot while it waited, so every other host's listing waited
// 5 minutes for each of their pages.
func TestFleetPacedHostHoldsNoRequestSlot(t *testing.T) {
	e := newEnv(t, worldCfg(3, 1)) // its store; its network is not asked
	limited := []*httptest.Server{pacedHost(t), pacedHost(t)}
	var healthyPages atomic.Int64
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		healthyPages.Add(1)
		next := strconv.Itoa(n + 1)
		if n == 2 {
			next = ""
		}
		writeListing(w, fmt.Sprintf("did:plc:healthy%017d", n), next)
	}))
	t.Cleanup(healthy.Close)
	name := func(s *httptest.Server) string { return s.Listener.Addr().String() }
	// The healthy host is idle to the relay: listings begin it after the
	// active ones.
	hosts := []map[string]any{
		{"hostname": name(limited[0]), "status": "active", "accountCount": 10},
		{"hostname": name(limited[1]), "status": "active", "accountCount": 10},
		{"hostname": name(healthy), "status": "idle", "accountCount": 10},
	}
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"hosts": hosts})
	}))
	t.Cleanup(relay.Close)
	c, err := upstream.New(relay.URL, upstream.Options{ScratchDir: t.TempDir(),
		LoopbackHosts: []string{name(limited[0]), name(limited[1]), name(healthy)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each limited host has announced its budget spent before the run
	// (an earlier request of the process: a download, a page).
	for _, s := range limited {
		if _, err := c.HostListRepos(ctx, name(s), "", 1); err != nil {
			t.Fatalf("announcing %s's budget: %v", name(s), err)
		}
	}
	jobs := &countJobs{runs: map[string]int{}}
	b := e.bootOver(c, e.w, jobs, func(cfg *bootstrap.Config) { cfg.Workers, cfg.PageLimit = 2, 1 })
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for healthyPages.Load() < 3 {
		select {
		case <-time.After(5 * time.Millisecond):
		case err := <-done:
			t.Fatalf("bootstrap ended before the healthy host was listed: %v", err)
		case <-deadline:
			t.Fatalf("the healthy host served %d of its 3 pages in 10 s: its listing waits for a request slot held by hosts waiting out their announced rate limit (5 minutes)",
				healthyPages.Load())
		}
	}
	cancel()
	<-done
}

// pacedFleet is the bubble's world as a fleet: every world host is a
// roster host (pdsN.test) listing its own accounts and serving their
// repos, from memory. A host of spent announces its budget spent on every
// answer, until resetAfter from then; a download asked of it before that
// reset fails at once, rate limited with the wait, the host not asked, as
// upstream's pacer makes it (HostPaceWait says how long). Every answer
// takes a 10 ms round trip.
// With failing set, a spent host cuts every download's body short.
// With tooMany set, a spent host answers every download 429 with
// Retry-After: resetAfter and nothing else, which upstream's pacer takes as
// the budget spent until then (upstream.TestPaceTakesA429sWait); with
// resetAfter 0, with no header at all, which it does not.
type pacedFleet struct {
	w          *world.World
	mem        *memSource
	spent      map[string]bool
	resetAfter time.Duration
	failing    bool
	tooMany    bool

	mu    sync.Mutex
	reset map[string]time.Time // a spent host's announced reset
	asked map[string]int       // downloads asked, by DID
}

func (f *pacedFleet) host(i int) string { return fmt.Sprintf("pds%d.test", i) }

func (f *pacedFleet) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	counts := map[int]int64{}
	for _, a := range f.w.Accounts() {
		counts[a.Host]++
	}
	var p upstream.HostsPage
	for i := range len(counts) {
		p.Hosts = append(p.Hosts, upstream.HostEntry{Host: f.host(i), Status: "active", Accounts: counts[i]})
	}
	return p, nil
}

func (f *pacedFleet) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	var pg upstream.Page
	for _, a := range f.w.Accounts() {
		if f.host(a.Host) != host || a.Status == world.StatusDeleted || a.DID <= cursor {
			continue
		}
		e := upstream.RepoEntry{DID: a.DID, Rev: a.Rev, Active: a.Active}
		if !a.Active {
			e.Status = a.Status
		}
		pg.Repos = append(pg.Repos, e)
	}
	return pg, nil
}

func (f *pacedFleet) ListRepos(ctx context.Context, cursor string, limit int) (upstream.Page, error) {
	return upstream.Page{}, nil
}

func (f *pacedFleet) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	return nil, fmt.Errorf("%s asked of the relay: hosts mode asks its host", did)
}

func (f *pacedFleet) HostPaceWait(host string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(time.Until(f.reset[host]), 0)
}

func (f *pacedFleet) HostGetRepo(ctx context.Context, host, did string) (*upstream.Download, error) {
	if wait := f.HostPaceWait(host); wait > 0 {
		return nil, &upstream.Error{Op: "getRepo", Host: host, RetryAfter: wait, Err: fmt.Errorf("not asked: %w", upstream.ErrRateLimited)}
	}
	// The round trip: a request asked while another is answered is in
	// flight before the answer announces the budget spent.
	time.Sleep(10 * time.Millisecond)
	f.mu.Lock()
	f.asked[did]++
	if f.spent[host] && f.resetAfter > 0 {
		f.reset[host] = time.Now().Add(f.resetAfter)
	}
	f.mu.Unlock()
	switch {
	case f.tooMany && f.spent[host]:
		return nil, &upstream.Error{Op: "getRepo", Host: host, StatusCode: http.StatusTooManyRequests, RetryAfter: f.resetAfter, Err: upstream.ErrRateLimited}
	case f.failing && f.spent[host]:
		return nil, fmt.Errorf("getRepo %s: body: %w", host, io.ErrUnexpectedEOF)
	}
	return f.mem.GetRepo(ctx, did)
}

// TestFleetPacedHostHoldsNoWorker: three of four hosts announce their
// budget spent with a 5 minute reset on every answer; 4 download workers,
// at most 2 per host. The healthy host's repos are all archived within a
// minute (fake time): a host waiting for its reset is not handed a worker,
// which would wait for it holding the worker. The spent hosts' repos are
// still archived by the same run, after their resets, each complete at its
// first attempt, no failure charged. Before, the spent hosts' jobs held
// every worker, each waiting 5 minutes, and the healthy host's repos waited
// for them.
//
// failing: the spent hosts also cut every download's body short. Each of their
// repos ends failed (transient) at its first failure, asked once, without
// a retry that would wait for the reset holding its worker; the healthy
// host's repos are archived within the minute all the same. Before, each
// retry waited for the reset: the spent hosts' jobs held every worker for
// three resets each.
//
// failing, reset=30s: the same with the reset 30 s ahead, a backoff step.
// Each repo of a failing host is asked once all the same. Before, each
// retry waited for the reset first: the failing hosts' jobs held every
// worker for three resets of 30 s each, and the healthy host's repos
// waited minutes (4m30s).
func TestFleetPacedHostHoldsNoWorker(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing=%v", failing), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { pacedHostsRun(t, failing, false, 5*time.Minute) })
		})
	}
	t.Run("failing=true,reset=30s", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) { pacedHostsRun(t, true, false, 30*time.Second) })
	})
}

// TestFleetRateLimitedHostHoldsNoWorker: three of four hosts answer every
// getRepo 429 with Retry-After: 330 (30, none) and no ratelimit-* header;
// 4 download workers, at most 2 per host. The healthy host's repos are all
// archived within a minute (fake time), and the run ends: each repo of a
// limited host is asked once and ends failed once, class rate_limited, for
// the retry schedule, without a wait on its worker; between its answers
// the host is parked (upstream's pacer takes the 429's wait as its reset).
// Before, each such job slept the Retry-After (or its backoff) and asked
// again, up to 20 times, holding its worker: the limited hosts held every
// worker, and the healthy host's repos waited hours (with Retry-After: 30,
// still 20 minutes, when a 429 waiting at most a backoff step was slept).
func TestFleetRateLimitedHostHoldsNoWorker(t *testing.T) {
	for _, retryAfter := range []time.Duration{upstream.RetryAfterCeiling, 30 * time.Second, 0} {
		t.Run(fmt.Sprintf("retry-after=%v", retryAfter), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { pacedHostsRun(t, false, true, retryAfter) })
		})
	}
}

func pacedHostsRun(t *testing.T, failing, tooMany bool, resetAfter time.Duration) {
	cfg := worldCfg(48, 2)
	cfg.Hosts = 4
	e := newBubbleEnv(t, cfg)
	const healthy = 3
	f := &pacedFleet{w: e.world, mem: e.mem, resetAfter: resetAfter, failing: failing, tooMany: tooMany,
		spent: map[string]bool{}, reset: map[string]time.Time{}, asked: map[string]int{}}
	for h := range healthy {
		f.spent[f.host(h)] = true
	}
	r, err := backfill.NewRunner(backfill.Options{Source: f, Writer: e.w, Metrics: e.bm, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var done sync.Map
	b := e.bootOver(f, e.w, timedJobs{r, &done}, func(c *bootstrap.Config) { c.Source, c.Workers, c.HostWorkers = f, 4, 2 })
	start := time.Now()
	if err := b.Run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	var healthyRepos, spentRepos int
	var healthyLast time.Duration
	var bad string // the first repo not in the state it should end in
	states := e.states()
	for _, a := range e.listed() {
		if !a.Active {
			continue
		}
		st := states[a.DID]
		switch {
		case bad != "":
		case a.Host == healthy || !failing && !tooMany:
			if st.Status != archive.StatusComplete || st.Attempts != 0 || st.ErrClass != "" {
				bad = fmt.Sprintf("%s of host %d: %s, %d failures, class %q: want complete, no failure charged", a.DID, a.Host, st.Status, st.Attempts, st.ErrClass)
			}
		case tooMany:
			if st.Status != archive.StatusFailed || st.Attempts != 1 || st.ErrClass != backfill.ClassRateLimited || f.asked[a.DID] != 1 {
				bad = fmt.Sprintf("%s of the host answering 429 %d: %s, %d failures, class %q, asked %d times: want failed once, rate_limited, asked once (no retry waiting for its Retry-After)",
					a.DID, a.Host, st.Status, st.Attempts, st.ErrClass, f.asked[a.DID])
			}
		case st.Status != archive.StatusFailed || st.Attempts != 1 || st.ErrClass != backfill.ClassTransient || f.asked[a.DID] != 1:
			bad = fmt.Sprintf("%s of the failing host %d: %s, %d failures, class %q, asked %d times: want failed once, transient, asked once (no retry waiting for the reset)",
				a.DID, a.Host, st.Status, st.Attempts, st.ErrClass, f.asked[a.DID])
		}
		if a.Host != healthy {
			spentRepos++
			continue
		}
		healthyRepos++
		at, _ := done.Load(a.DID)
		healthyLast = max(healthyLast, at.(time.Time).Sub(start))
	}
	if healthyRepos < 4 || spentRepos < 8 {
		t.Fatalf("%d repos on the healthy host, %d on the spent ones: the test proves nothing", healthyRepos, spentRepos)
	}
	t.Logf("the healthy host's %d repos archived within %v; the spent hosts' %d done by %v", healthyRepos, healthyLast, spentRepos, time.Since(start))
	if healthyLast > time.Minute {
		t.Errorf("the healthy host's %d repos took %v to archive: its repos waited for workers held by hosts waiting out their announced reset or Retry-After (%v)",
			healthyRepos, healthyLast, f.resetAfter)
	}
	if bad != "" {
		t.Error(bad)
	}
}
