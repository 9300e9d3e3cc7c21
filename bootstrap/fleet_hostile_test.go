package bootstrap_test

// Rosters and hosts that bend the fleet bootstrap: two hosts listing one
// DID at once, a host answering more entries than its lane's window, a
// roster without a host to list (every one banned), a roster paged a host at a time.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/upstream"
)

// emptyRelay is a relay whose own listRepos lists nothing.
type emptyRelay struct{ upstream.RepoSource }

func (emptyRelay) ListRepos(ctx context.Context, cursor string, limit int) (upstream.Page, error) {
	return upstream.Page{}, nil
}

// countJobs counts the jobs run per DID, and fetches nothing.
type countJobs struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *countJobs) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	c.mu.Lock()
	c.runs[req.DID]++
	c.mu.Unlock()
	return backfill.Result{DID: req.DID}, nil
}

func (c *countJobs) of(did string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runs[did]
}

// bootOver builds a hosts-mode bootstrap over e's store with fleet f, an
// empty relay and jobs that fetch nothing; mods adjust its config.
func (e *env) bootOver(f bootstrap.FleetSource, w backfill.Writer, jobs bootstrap.Jobs, mods ...func(*bootstrap.Config)) *bootstrap.Bootstrap {
	e.t.Helper()
	c := bootstrap.Config{Store: e.store, Writer: w, Source: emptyRelay{}, Fleet: f,
		Jobs: jobs, Metrics: e.m, Logger: quiet, Enumerate: bootstrap.EnumerateHosts, Workers: 4, HostWorkers: 4, Seed: 1}
	for _, m := range mods {
		m(&c)
	}
	b, err := bootstrap.New(c)
	if err != nil {
		e.t.Fatal(err)
	}
	return b
}

// twoHostsOneDID is a two-host roster whose hosts both list one DID (a
// migration in flight), each page also naming an inactive account of its
// own, so recording either page writes a unit.
type twoHostsOneDID struct{}

const sharedDID = "did:plc:sharedsharedsharedshared"

func (twoHostsOneDID) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	return upstream.HostsPage{Hosts: []upstream.HostEntry{{Host: "pds-a.test", Status: "active"}, {Host: "pds-b.test", Status: "active"}}}, nil
}

func (twoHostsOneDID) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	inactive, rev := "did:plc:inactiveaaaaaaaaaaaaaaaa", "3jzfcijpj2z2a"
	if host == "pds-b.test" {
		inactive, rev = "did:plc:inactivebbbbbbbbbbbbbbbb", "3jzfcijpj2z2b"
	}
	return upstream.Page{Repos: []upstream.RepoEntry{
		{DID: sharedDID, Rev: rev, Active: true},
		{DID: inactive, Active: false, Status: "deactivated"},
	}}, nil
}

// pairedWriter holds the first two units carrying repo updates until both
// have arrived, so the two hosts' pages are recorded at the same time.
type pairedWriter struct {
	*archive.Writer
	mu      sync.Mutex
	n       int
	release chan struct{}
}

func (g *pairedWriter) Submit(ctx context.Context, u *archive.Unit) error {
	if len(u.Repos) > 0 {
		g.mu.Lock()
		g.n++
		n := g.n
		if n == 2 {
			close(g.release)
		}
		g.mu.Unlock()
		if n <= 2 {
			select {
			case <-g.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return g.Writer.Submit(ctx, u)
}

// TestFleetDoubleListedDispatchedOnce: two hosts list the same DID and
// their pages are recorded at the same time. The DID is dispatched once
// (the in-flight check and the reservation are one step, so "a DID listed
// twice is not dispatched twice" holds across lanes too), and bootstrap
// ends: no page waits for a repo another page took.
func TestFleetDoubleListedDispatchedOnce(t *testing.T) {
	e := newEnv(t, worldCfg(3, 1))
	jobs := &countJobs{runs: map[string]int{}}
	b := e.bootOver(twoHostsOneDID{}, &pairedWriter{Writer: e.w, release: make(chan struct{})}, jobs)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := b.Run(ctx)
	if runs := jobs.of(sharedDID); runs != 1 || err != nil {
		t.Fatalf("the DID listed by both hosts was dispatched %d times (want 1); Run: %v (want nil); progress %+v",
			runs, err, b.Progress())
	}
}

// oversizedHostPage is a roster of 60 hosts: host-00 ignores the limit
// asked and answers its one page with limit+1 entries, the others list
// nothing.
type oversizedHostPage struct{}

func (oversizedHostPage) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	var p upstream.HostsPage
	for i := range 60 {
		p.Hosts = append(p.Hosts, upstream.HostEntry{Host: fmt.Sprintf("host-%02d.test", i), Status: "active"})
	}
	return p, nil
}

func (oversizedHostPage) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	if host != "host-00.test" {
		return upstream.Page{}, nil
	}
	var p upstream.Page
	for i := range limit + 1 {
		p.Repos = append(p.Repos, upstream.RepoEntry{DID: fmt.Sprintf("did:plc:big%021d", i), Active: false, Status: "deactivated"})
	}
	return p, nil
}

// TestFleetOversizedHostPage: with the default window (50,000) and page
// limit (1,000), a roster of 60 hosts gives each lane a window of 1,000.
// A host answering a page of 1,001 entries takes its lane's whole window
// and is listed: asking for more credit than the lane has would wait
// forever, and "no listRepos page can stop the process".
func TestFleetOversizedHostPage(t *testing.T) {
	e := newEnv(t, worldCfg(3, 1))
	b, err := bootstrap.New(bootstrap.Config{Store: e.store, Writer: e.w, Source: emptyRelay{}, Fleet: oversizedHostPage{},
		Jobs: &countJobs{runs: map[string]int{}}, Metrics: e.m, Logger: quiet, Enumerate: bootstrap.EnumerateHosts, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Run(ctx); err != nil {
		p := b.Progress()
		t.Fatalf("bootstrap did not end: %v; pages %d, enumerated %d, listing finished %v, hosts %+v",
			err, p.Pages, p.Enumerated, p.ListingFinished, *p.Hosts)
	}
	if p := b.Progress(); p.Enumerated != 1001 || p.Hosts.ByState[bootstrap.HostDone] != 60 {
		t.Fatalf("enumerated %d (want 1001), hosts %+v (want 60 done)", p.Enumerated, *p.Hosts)
	}
}

// bannedRoster: the relay answers listHosts, but the one host on it is
// banned (an idle, offline or throttled host is listed).
type bannedRoster struct{ bootstrap.FleetSource }

func (bannedRoster) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	return upstream.HostsPage{Hosts: []upstream.HostEntry{{Host: "banned.test", Status: "banned"}}}, nil
}

// TestFleetNoListedHostListsRelay: hosts mode (the default when the relay
// answers listHosts) with a roster holding no host to list (its one host
// banned) has no lane to run; bootstrap lists the relay instead, as when
// every roster host is refused or cut (counted, on /status), and archives
// every account the relay lists. It once indexed the first of no lanes,
// and panicked on every start.
func TestFleetNoListedHostListsRelay(t *testing.T) {
	e := newEnv(t, worldCfg(20, 2))
	b := e.fleetBoot("", 8, 4, nil, func(c *bootstrap.Config) { c.Fleet = bannedRoster{e.client} })
	e.runToEnd(b)
	if complete, missing := e.archived(); len(missing) > 0 || len(complete) == 0 {
		t.Fatalf("%d accounts archived, %d not", len(complete), len(missing))
	}
	if p := b.Progress().Hosts; p == nil || !p.FellBackToRelay || p.Roster != 1 || p.Skipped != 1 {
		t.Fatalf("/status hosts: %+v", p)
	}
	if got := metric(t, e.reg, "backstream_bootstrap_relay_fallback_total", nil); got != 1 {
		t.Fatalf("relay fallbacks counted %v, want 1", got)
	}
}

// pagedRoster answers listHosts a host a page (a relay paging its roster
// below the limit asked), hosts hosts in all; each host lists nothing.
type pagedRoster struct {
	hosts  int
	mu     sync.Mutex
	listed map[string]bool
}

func (f *pagedRoster) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	i := 0
	if cursor != "" {
		i, _ = strconv.Atoi(cursor)
	}
	p := upstream.HostsPage{Hosts: []upstream.HostEntry{{Host: fmt.Sprintf("h%04d.test", i), Status: "active"}}}
	if i+1 < f.hosts {
		p.Cursor = strconv.Itoa(i + 1)
	}
	return p, nil
}

func (f *pagedRoster) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	f.mu.Lock()
	f.listed[host] = true
	f.mu.Unlock()
	return upstream.Page{}, nil
}

// TestFleetRosterPagedAHostAtATime: a roster of 1,005 hosts served a host
// a page is read to its end and every host listed: the roster is bounded
// by hosts, not by pages (it was once cut, silently, at 1,000 pages).
func TestFleetRosterPagedAHostAtATime(t *testing.T) {
	e := newEnv(t, worldCfg(3, 1))
	f := &pagedRoster{hosts: 1005, listed: map[string]bool{}}
	b := e.bootOver(f, e.w, &countJobs{runs: map[string]int{}})
	e.runToEnd(b)
	f.mu.Lock()
	n := len(f.listed)
	f.mu.Unlock()
	if p := b.Progress().Hosts; n != f.hosts || p.Roster != f.hosts || p.RosterCut != "" {
		t.Fatalf("roster of %d hosts: %d in the roster, %d hosts listed, cut %q", f.hosts, p.Roster, n, p.RosterCut)
	}
}

// heldHost holds every listRepos page of one host until ready says so.
type heldHost struct {
	bootstrap.FleetSource
	host  string
	ready func() bool
}

func (h heldHost) HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error) {
	if host == h.host {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for !h.ready() {
			select {
			case <-tick.C:
			case <-ctx.Done():
				return upstream.Page{}, ctx.Err()
			}
		}
	}
	return h.FleetSource.HostListRepos(ctx, host, cursor, limit)
}

// TestFleetForeignEntryLeavesAccountAlone: a roster host lists an account
// of another roster host as taken down (oracle ClaimAccount: a hostile
// host, or the old PDS of an account that migrated, which lists it
// deactivated), and its listing comes after the account was fetched from
// its own host in the same run. The entry of a host that is not the one
// the account was fetched from changes nothing: the account stays active,
// complete, with its records (the merge would otherwise drop every
// captured commit of an account the archive holds taken down, and refuse
// its replacements), counted as a foreign entry.
func TestFleetForeignEntryLeavesAccountAlone(t *testing.T) {
	cfg := worldCfg(24, 3)
	cfg.Hosts = 2
	e := newEnv(t, cfg)
	victim, own := "", 0
	for _, a := range e.listed() {
		if a.Host != 0 || !a.Active {
			continue
		}
		own++
		if victim == "" && a.Records > 0 {
			victim = a.DID
		}
	}
	if victim == "" {
		t.Fatal("no active account with records on host 0")
	}
	e.net.Faults().ClaimAccount(1, victim, false, "takendown")
	claimer := strings.TrimPrefix(e.net.HostURLs()[1], "http://")
	var b *bootstrap.Bootstrap
	var mu sync.Mutex
	held := heldHost{FleetSource: e.client, host: claimer, ready: func() bool {
		// Host 0's jobs all durable and out of flight: the claim is read
		// about an account this run has fetched.
		mu.Lock()
		defer mu.Unlock()
		p := b.Progress()
		return p.Complete+p.NotFound+p.Unavailable+p.Failed >= int64(own)
	}}
	mu.Lock()
	b = e.fleetBoot(bootstrap.EnumerateHosts, 4, 4, nil, func(c *bootstrap.Config) { c.Fleet = held })
	mu.Unlock()
	e.runToEnd(b)
	st, err := e.store.RepoState(victim)
	a, _ := e.world.Account(victim)
	if err != nil || !st.Active || st.AccountStatus != "" || st.Status != archive.StatusComplete || st.Records != uint64(a.Records) {
		t.Fatalf("%s after another host listed it taken down: %+v %v; want active, complete with its %d records", victim, st, err, a.Records)
	}
	if got := promtest.Value(t, e.reg, "backstream_bootstrap_double_listed_total", map[string]string{"by": bootstrap.AttributedForeign}); got != 1 {
		t.Errorf("foreign entries counted: %v, want 1", got)
	}
}
