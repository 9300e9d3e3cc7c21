package node_test

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
)

// TestJoinedHostIsAudited: a PDS host joins the network after bootstrap
// (oracle HideHost: left out of listHosts while the node bootstraps, then
// shown), with accounts no firehose event announces. Every repair pass
// reads the relay's roster before it lists, so the next audits list the
// new host and its accounts are fetched. On main the roster was read once,
// at bootstrap: no pass ever listed the host, and its accounts were never
// archived.
func TestJoinedHostIsAudited(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, joined := joiningHostNetwork(t, ctx)
	f := net.Faults()
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	for _, did := range joined {
		if st, err := v.n.Store().RepoState(did); err == nil && st.Status == archive.StatusComplete {
			t.Fatalf("%s of the host not yet on the roster archived by bootstrap: the host was listed", did)
		}
	}
	f.HideHost(joiningHost, false)
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	v.waitFor("three more audit gaps closed", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+3
	})
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	if archived := completeCount(v.n.Store(), joined); archived != len(joined) {
		t.Errorf("accounts of the host that joined after bootstrap archived after 3 audits: %d of %d", archived, len(joined))
	}
}

// TestGrownHostIsListedWhole: a roster host grows after bootstrap past
// the bound of one listing of it (twice the accountCount listHosts gave
// it at bootstrap plus 10,000; oracle GrowHost: deactivated accounts its
// listing names and listHosts counts). Every repair pass reads the roster
// again, so the bound follows the host's count and its listing is not cut.
// On main every audit cut it at the bootstrap bound: the accounts it lists
// past it were never compared and no pass was complete enough to ask
// about absent accounts.
func TestGrownHostIsListedWhole(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const growing, grownBy = 1, 12_000
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 53})
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	if bound := pagesOfBound(net, growing) * 1000; bound > grownBy {
		t.Fatalf("the host's bound at bootstrap is %d entries: growing it by %d does not pass it", bound, grownBy)
	}
	net.Faults().GrowHost(growing, grownBy)
	cuts := promtest.Value(t, v.reg, "backstream_repair_listing_cut_total", nil)
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	// The first pass after the growth may have begun before it.
	v.waitFor("four more audit gaps closed", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+4
	})
	if got := promtest.Value(t, v.reg, "backstream_repair_listing_cut_total", nil) - cuts; got > 1 {
		t.Errorf("repair listings cut in 4 audits after the host grew by %d accounts: %v, want at most 1 (the pass begun before the growth)", grownBy, got)
	}
}

// TestLeftHostIsNotAsked: a PDS host leaves the network after bootstrap
// (oracle HideHost: listHosts no longer names it; the relay still indexes
// its accounts). The next pass's whole roster read marks its host/ row
// left (its account count kept), and from then on no pass lists it: taken
// down (oracle DownHost) after the mark, it gets no request in three more
// audits. Its accounts stay archived: each complete pass finds them absent
// from every listing and asks the relay's getRepoStatus (the host only
// when the relay does not know one), which still says active at the
// archived rev, so none is taken down, marked or fetched again.
func TestLeftHostIsNotAsked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const leaving = 2
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 24, RecordsMean: 3, Hosts: 3, Seed: 53})
	gone := hostAccounts(t, net, leaving)
	host := strings.TrimPrefix(net.HostURLs()[leaving], "http://")
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	v.waitFor("the leaving host's accounts archived", func() bool { return completeCount(v.n.Store(), gone) == len(gone) })
	before, err := v.n.Store().HostState(host)
	if err != nil || before.Status != "active" {
		t.Fatalf("host/%s before it leaves: %+v, %v; want status active", host, before, err)
	}
	f := net.Faults()
	f.HideHost(leaving, true)
	v.waitFor("the host marked left", func() bool {
		hs, err := v.n.Store().HostState(host)
		return err == nil && hs.Status == bootstrap.RosterLeft
	})
	if hs, _ := v.n.Store().HostState(host); hs.Accounts != before.Accounts {
		t.Errorf("host/%s marked left: account count %d, want %d kept", host, hs.Accounts, before.Accounts)
	}
	f.DownHost(leaving, 10*time.Minute)
	asked := f.Fired(oracle.FaultHostDown)
	fetched := make(map[string]int, len(gone))
	for _, did := range gone {
		fetched[did] = net.RepoCounts(did).Requests
	}
	checked := promtest.Value(t, v.reg, "backstream_repair_absent_total", map[string]string{"result": "checked"})
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	v.waitFor("three more audit gaps closed, or a request to the host", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+3 || f.Fired(oracle.FaultHostDown) > asked
	})
	if got := f.Fired(oracle.FaultHostDown) - asked; got != 0 {
		t.Fatalf("requests to the host after it was marked left: %d, want 0", got)
	}
	// The first of the three passes may have begun before the snapshot.
	if got := promtest.Value(t, v.reg, "backstream_repair_absent_total", map[string]string{"result": "checked"}) - checked; got < float64(2*len(gone)) {
		t.Errorf("absent accounts checked in 3 audits: %v, want at least %d (the left host's %d, each complete pass)", got, 2*len(gone), len(gone))
	}
	for _, did := range gone {
		st, err := v.n.Store().RepoState(did)
		if err != nil || st.Status != archive.StatusComplete || !st.Active || st.Refetch != archive.RefetchNone {
			t.Errorf("%s of the host that left: %+v, %v; want complete, active, not marked", did, st, err)
		}
		if got := net.RepoCounts(did).Requests - fetched[did]; got != 0 {
			t.Errorf("%s of the host that left fetched %d more times", did, got)
		}
	}
}

// joiningHost is the host of joiningHostNetwork left out of listHosts.
const joiningHost = 2

// joiningHostNetwork is a network of 3 hosts whose joiningHost the
// relay's listHosts leaves out (oracle HideHost) until the test shows it,
// and that host's active accounts.
func joiningHostNetwork(t *testing.T, ctx context.Context) (*oracle.Network, []string) {
	t.Helper()
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 24, RecordsMean: 3, Hosts: 3, Seed: 53})
	net.Faults().HideHost(joiningHost, true)
	return net, hostAccounts(t, net, joiningHost)
}

// atMerging is a startHostsNode option: no scheduled audit (what steady
// state holds is bootstrap's and discovery's), and fn run as merging
// begins, after bootstrap read the roster and before discovery.
func atMerging(fn func()) func(*node.Config) {
	return func(c *node.Config) {
		c.AuditInterval = 0
		onPhase := c.OnPhase
		c.OnPhase = func(p archive.Phase) {
			if p == archive.PhaseMerging {
				fn()
			}
			onPhase(p)
		}
	}
}

// hostAccounts is the active accounts of net's PDS host (at least one).
func hostAccounts(t *testing.T, net *oracle.Network, host int) []string {
	t.Helper()
	var dids []string
	for _, a := range net.World().Accounts() {
		if a.Host == host && a.Active {
			dids = append(dids, a.DID)
		}
	}
	if len(dids) == 0 {
		t.Fatalf("no active account on host %d", host)
	}
	return dids
}

// completeCount is how many of dids are complete in s.
func completeCount(s *archive.Store, dids []string) int {
	n := 0
	for _, did := range dids {
		if st, err := s.RepoState(did); err == nil && st.Status == archive.StatusComplete {
			n++
		}
	}
	return n
}

// TestFailedRosterReadListsRecordedHosts: the relay's listHosts fails
// after bootstrap (oracle FailListHosts: every request answered 500). Each
// pass's read fails past its retries, counted (result failed) and logged
// once a pass, and the pass lists the roster hosts as last recorded: every
// host is still asked (oracle SlowHost's 1 ms delay counts the requests
// each host gets), none is marked left, no pass falls back to the relay,
// and the audits go on closing. Once listHosts answers again, the next
// pass's read is whole.
func TestFailedRosterReadListsRecordedHosts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hosts = 3
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 24, RecordsMean: 3, Hosts: hosts, Seed: 53})
	logger, logs := fileLogger(t)
	v, phase := startHostsNode(t, ctx, net, func(c *node.Config) { c.Logger = logger })
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	reads := func(result string) float64 {
		return promtest.Value(t, v.reg, "backstream_repair_roster_reads_total", map[string]string{"result": result})
	}
	closedGaps := func() float64 { return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) }
	f := net.Faults()
	f.FailListHosts(http.StatusInternalServerError, -1)
	for h := range hosts {
		f.SlowHost(h, time.Millisecond)
	}
	failed, whole := reads("failed"), reads("whole")
	fallbacks := promtest.Value(t, v.reg, "backstream_repair_relay_fallback_total", nil)
	// Each failed read spends its 3 retries (about 7 s). The requests are
	// counted from the first failed read on, and the pass after it (its
	// read failed too) lists wholly after that.
	v.waitFor("a failed roster read", func() bool { return reads("failed") >= failed+1 })
	asked, closed := f.Fired(oracle.FaultSlowHost), closedGaps()
	v.waitFor("a second failed roster read, and its pass closed", func() bool {
		return reads("failed") >= failed+2 && closedGaps() >= closed+2
	})
	if got := reads("whole") - whole; got > 1 {
		t.Errorf("whole roster reads while listHosts fails: %v, want at most 1 (one answered as the fault was set)", got)
	}
	if got := f.Fired(oracle.FaultSlowHost) - asked; got < hosts {
		t.Errorf("requests to the recorded hosts by a pass whose roster read failed: %d, want at least %d (each host listed)", got, hosts)
	}
	if got := promtest.Value(t, v.reg, "backstream_repair_relay_fallback_total", nil) - fallbacks; got != 0 {
		t.Errorf("passes that fell back to the relay's listing while listHosts fails: %v, want 0", got)
	}
	for _, u := range net.HostURLs() {
		host := strings.TrimPrefix(u, "http://")
		if hs, err := v.n.Store().HostState(host); err != nil || hs.Status != "active" {
			t.Errorf("host/%s after failed roster reads: %+v, %v; want status active as recorded", host, hs, err)
		}
	}
	if !bytes.Contains(logs(), []byte("the relay's listHosts roster could not be read; the pass lists the roster hosts as last recorded")) {
		t.Error("no WARN for a failed roster read in the log")
	}
	f.FailListHosts(0, 0)
	closed = closedGaps()
	v.waitFor("two more audit gaps closed", func() bool { return closedGaps() >= closed+2 })
	if got := reads("whole") - whole; got < 1 {
		t.Errorf("whole roster reads once listHosts answers again: %v, want at least 1", got)
	}
}

// fileLogger is a text logger writing to a file of the test's (the
// handler serialises its writes), and a function reading what it holds.
func fileLogger(t *testing.T) (*slog.Logger, func() []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "node.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return slog.New(slog.NewTextHandler(f, nil)), func() []byte {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

// TestDiscoveryListsHostJoinedDuringBootstrap: a PDS host joins the
// network while the node bootstraps (oracle HideHost: left out of
// listHosts when bootstrap reads the roster, shown as merging begins),
// with accounts no firehose event announces, and no audit is scheduled.
// Discovery reads the relay's roster again before it lists, so it lists
// the new host and its accounts are fetched before steady state's first
// audit (24 h later by default). On main discovery listed the roster as
// bootstrap recorded it: the host's accounts waited for that audit, while
// relay mode's discovery (the relay's listRepos) found them.
func TestDiscoveryListsHostJoinedDuringBootstrap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, joined := joiningHostNetwork(t, ctx)
	f := net.Faults()
	var started atomic.Pointer[verifying]
	var bootstrapped []string // the joining host's accounts bootstrap recorded (read once steady)
	checked := false
	v, phase := startHostsNode(t, ctx, net, atMerging(func() {
		if w := started.Load(); w != nil {
			checked = true
			for _, did := range joined {
				if _, err := w.n.Store().RepoState(did); err == nil {
					bootstrapped = append(bootstrapped, did)
				}
			}
		}
		f.HideHost(joiningHost, false) // joins after bootstrap read the roster, before discovery
	}))
	started.Store(v)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	if !checked {
		t.Fatal("merging began before the test could look at the store")
	}
	if len(bootstrapped) > 0 {
		t.Fatalf("accounts of the host not yet on the roster recorded by bootstrap: %v", bootstrapped)
	}
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	if archived := completeCount(v.n.Store(), joined); archived != len(joined) {
		t.Errorf("accounts of the host that joined during bootstrap archived in steady state, no audit run: %d of %d", archived, len(joined))
	}
}

// TestDiscoveryFailedRosterReadListsRecordedHosts: the relay's listHosts
// answers 501 from the moment merging begins (oracle FailListHosts: a
// relay that no longer serves it), so discovery's read of the roster
// fails: counted (result
// failed), and discovery lists the hosts as bootstrap recorded them, none
// marked left; merging completes. Accounts a recorded host lists only
// since bootstrap listed it (oracle GrowHost, as merging begins: inactive
// ones, which only a host's own listing names) are recorded by discovery.
func TestDiscoveryFailedRosterReadListsRecordedHosts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hosts, growing, grownBy = 3, 1, 5
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 24, RecordsMean: 3, Hosts: hosts, Seed: 53})
	f := net.Faults()
	v, phase := startHostsNode(t, ctx, net, atMerging(func() {
		f.FailListHosts(http.StatusNotImplemented, -1) // not retried
		f.GrowHost(growing, grownBy)
	}))
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	reads := func(result string) float64 {
		return promtest.Value(t, v.reg, "backstream_discovery_roster_reads_total", map[string]string{"result": result})
	}
	if failed, whole := reads("failed"), reads("whole"); failed != 1 || whole != 0 {
		t.Errorf("discovery's roster reads while listHosts fails: failed %v, whole %v; want 1 and 0", failed, whole)
	}
	for _, u := range net.HostURLs() {
		host := strings.TrimPrefix(u, "http://")
		if hs, err := v.n.Store().HostState(host); err != nil || hs.Status != "active" {
			t.Errorf("host/%s after discovery's failed roster read: %+v, %v; want status active as recorded", host, hs, err)
		}
	}
	discovered := 0
	if err := v.n.Store().ScanRepos(func(_ string, st archive.RepoState) error {
		if st.ErrClass == "discovered" && !st.Active {
			discovered++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if discovered != grownBy {
		t.Errorf("inactive accounts a recorded host lists since bootstrap, recorded by discovery: %d, want %d", discovered, grownBy)
	}
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	if completeCount(v.n.Store(), live) != len(live) {
		t.Error("not every live account archived after a discovery whose roster read failed")
	}
}

// rosterGauge is backstream_roster_hosts by status, for every status the
// gauge exports.
func rosterGauge(t *testing.T, v *verifying) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for _, st := range bootstrap.RosterStatuses() {
		got[st] = promtest.Value(t, v.reg, "backstream_roster_hosts", map[string]string{"status": st})
	}
	return got
}

// TestRosterGaugeFollowsHosts: the hosts a hosts-mode node records from
// the relay's roster are on backstream_roster_hosts{status} and in the
// counts /status shows (bootstrap.RosterView): three active after
// bootstrap; after the relay bans one (oracle SetHostStatus) and another
// leaves its roster (oracle HideHost), the next whole reads make it one
// active, one banned, one left. On main no metric or /status field showed
// the roster.
func TestRosterGaugeFollowsHosts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 24, RecordsMean: 3, Hosts: 3, Seed: 53})
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	want := map[string]float64{"active": 3, "idle": 0, "offline": 0, "throttled": 0, "banned": 0, bootstrap.RosterLeft: 0, bootstrap.RosterOther: 0}
	if got := rosterGauge(t, v); !maps.Equal(got, want) {
		t.Fatalf("backstream_roster_hosts after bootstrap: %v, want %v", got, want)
	}
	f := net.Faults()
	f.SetHostStatus(1, "banned")
	f.HideHost(2, true)
	want["active"], want["banned"], want[bootstrap.RosterLeft] = 1, 1, 1
	v.waitFor("one host banned and one left on the gauge", func() bool { return maps.Equal(rosterGauge(t, v), want) })
	sum, err := bootstrap.NewRosterView(v.n.Store()).Read()
	if err != nil {
		t.Fatal(err)
	}
	counts := sum.ByStatus
	for st, n := range want {
		if counts[st] != int64(n) {
			t.Errorf("/status roster counts %v, want %v", counts, want)
			break
		}
	}
}

// TestRelayAskedAfterHostsBootstrap: a node bootstraps in hosts mode (the
// roster recorded in host/ rows) and is restarted as merging begins, on
// the same store, with --enumerate relay: the operator asks for the
// relay's listing everywhere. Discovery and the audits after the restart
// read no roster (no listHosts request: oracle FailListHosts counts each
// as it refuses it), ask no host (oracle DownHost counts each request to
// a host), list the relay's listRepos, and log no accountCount WARN (the
// mode is the operator's, not a fallback); an audit's gap closes, the
// host/ rows stay as recorded, and /subscribe folds to the network. On
// main the recorded roster kept discovery and every pass in hosts mode
// whatever the flag said.
func TestRelayAskedAfterHostsBootstrap(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const hosts = 2
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: hosts, Seed: 53})
	dir := t.TempDir()
	first, stop := context.WithCancel(ctx)
	v1, _ := startHostsNode(t, first, net, func(c *node.Config) { c.DataDir = dir }, atMerging(stop))
	select {
	case <-v1.runErr:
	case <-v1.deadline:
		t.Fatal("the hosts-mode node did not stop as merging began")
	}
	if p, err := v1.n.Store().Phase(); err != nil || p != archive.PhaseMerging {
		t.Fatalf("the hosts-mode node stopped in phase %q (%v), want merging: the restart runs discovery", p, err)
	}
	if err := v1.n.Close(); err != nil {
		t.Fatal(err)
	}
	f := net.Faults()
	f.FailListHosts(http.StatusInternalServerError, -1)
	for h := range hosts {
		f.DownHost(h, 10*time.Minute)
	}
	asked := func() (listHosts, hostRequests int64) {
		return f.Fired(oracle.FaultListHostsFailing), f.Fired(oracle.FaultHostDown)
	}
	logger, logs := fileLogger(t)
	v, phase := startHostsNode(t, ctx, net, func(c *node.Config) {
		c.DataDir, c.Bootstrap.Enumerate, c.Logger = dir, bootstrap.EnumerateRelay, logger
	})
	v.waitFor("steady state and an audit gap closed, or a listHosts or host request", func() bool {
		if lh, hr := asked(); lh > 0 || hr > 0 {
			return true
		}
		return phase.Load() == archive.PhaseSteadyState && promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= 1
	})
	if lh, hr := asked(); lh != 0 || hr != 0 {
		t.Fatalf("after the restart with --enumerate relay: %d listHosts requests and %d requests to a host, want 0 and 0", lh, hr)
	}
	// Discovery's page and the closed pass's, at least; no host answers.
	if got := promtest.Value(t, v.reg, "backstream_upstream_requests_total", map[string]string{"endpoint": "listRepos", "result": "ok"}); got < 2 {
		t.Errorf("relay listRepos pages answered after the restart: %v, want at least 2 (discovery's and the pass's)", got)
	}
	if rs, err := v.n.Store().RosterEntries(); err != nil || len(rs) != hosts {
		t.Errorf("roster after the restart: %v, %v; want both hosts as recorded", rs, err)
	}
	for line := range bytes.Lines(logs()) {
		if bytes.Contains(line, []byte("accountCount")) {
			t.Errorf("a WARN about account counts under --enumerate relay: %s", line)
		}
	}
	fold, _ := v.subscribeFold()
	if checked, mism := check.Compare(fold, net.World(), nil); len(mism) > 0 {
		t.Errorf("%d of %d accounts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
}

// TestHostsOfEveryStatusButBannedListed: a hosts-mode node bootstraps a
// network whose relay's listHosts gives one host each of the statuses a
// relay gives a host it still indexes (active, idle, offline, throttled),
// one banned, and one a word the lexicon does not name ("paused"; its
// host statuses are open). oracle SetHostStatus changes only what
// listHosts says: every host answers its listRepos and getRepo. In
// steady state every account of every host but the banned one is
// archived and /subscribe folds to the network for them; the banned host
// is never asked (oracle SlowHost's 1 ms delay counts its requests, none)
// and none of its accounts is recorded, through bootstrap, discovery and
// two audits. Only the banned host is counted skipped. On main only
// active hosts were listed: the idle, offline, throttled and unknown
// hosts' accounts were never archived (the relay's listing is read only
// when no host listed anything, and the firehose never names an idle
// host's accounts).
func TestHostsOfEveryStatusButBannedListed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	statuses := []string{"active", "idle", "offline", "throttled", "banned", "paused"}
	const banned = 4
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 36, RecordsMean: 3, Hosts: len(statuses), Seed: 53})
	f := net.Faults()
	for h, st := range statuses {
		f.SetHostStatus(h, st)
	}
	f.SlowHost(banned, time.Millisecond)
	hostOf := map[string]int{}
	for h := range statuses {
		for _, did := range hostAccounts(t, net, h) {
			hostOf[did] = h
		}
	}
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	v.waitFor("two audit gaps closed", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+2
	})
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	for h, st := range statuses {
		dids := hostAccounts(t, net, h)
		got := completeCount(v.n.Store(), dids)
		if h != banned && got != len(dids) {
			t.Errorf("accounts of the %s host archived in steady state: %d of %d", st, got, len(dids))
		}
		if h == banned {
			for _, did := range dids {
				if st, err := v.n.Store().RepoState(did); err == nil {
					t.Errorf("%s of the banned host recorded: %+v", did, st)
				}
			}
		}
	}
	if got := f.Fired(oracle.FaultSlowHost); got != 0 {
		t.Errorf("requests to the banned host: %d, want 0", got)
	}
	if got := promtest.Value(t, v.reg, "backstream_bootstrap_hosts_skipped_total", nil); got != 1 {
		t.Errorf("hosts skipped by bootstrap: %v, want 1 (the banned one)", got)
	}
	fold, _ := v.subscribeFold()
	listed := func(a world.Account) bool { h, ok := hostOf[a.DID]; return ok && h != banned }
	if checked, mism := check.Compare(fold, net.World(), listed); len(mism) > 0 || checked == 0 {
		t.Errorf("%d of %d accounts of the listed hosts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
}

// TestDownOfflineHostLeavesAuditsWhole: a roster host the relay gives as
// offline after bootstrap and that is really down (oracle SetHostStatus
// and DownHost: every request to it answered 503) is listed by every
// audit (every status but banned is), fails and is cut, answering
// nothing. A listing that named nothing is as a host not listed: the pass
// stays complete, so it still checks the accounts absent from its
// listings (the down host's among them, asked of the relay's
// getRepoStatus, which still says active at the archived rev: none taken
// down, marked or fetched). Had the cut made every such pass incomplete,
// a roster with one host down, as the real network always has, would
// never check an absent account again: a deletion lost in a gap would
// never be archived.
func TestDownOfflineHostLeavesAuditsWhole(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const down = 2
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 24, RecordsMean: 3, Hosts: 3, Seed: 53})
	gone := hostAccounts(t, net, down)
	// A failed listRepos try waits 5 ms at most for the next (the waits
	// are not what this test is about): a pass cuts the down host after
	// its 8 failed steps, 100 ms apart.
	short := func(c *node.Config) {
		c.Bootstrap.Sleep = func(ctx context.Context, d time.Duration) error {
			return backoff.Sleep(ctx, min(d, 5*time.Millisecond))
		}
	}
	v, phase := startHostsNode(t, ctx, net, short)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	v.waitFor("the down host's accounts archived", func() bool { return completeCount(v.n.Store(), gone) == len(gone) })
	f := net.Faults()
	f.SetHostStatus(down, "offline")
	f.DownHost(down, 10*time.Minute)
	asked := f.Fired(oracle.FaultHostDown)
	checked := promtest.Value(t, v.reg, "backstream_repair_absent_total", map[string]string{"result": "checked"})
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	v.waitFor("three more audit gaps closed", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+3
	})
	if f.Fired(oracle.FaultHostDown) == asked {
		t.Fatal("no request to the offline host in three audits: it is not listed")
	}
	// The first of the three passes may have begun before the host went down.
	if got := promtest.Value(t, v.reg, "backstream_repair_absent_total", map[string]string{"result": "checked"}) - checked; got < float64(2*len(gone)) {
		t.Errorf("absent accounts checked in 3 audits with an offline host down: %v, want at least %d (the down host's %d, each complete pass)", got, 2*len(gone), len(gone))
	}
	for _, did := range gone {
		if st, err := v.n.Store().RepoState(did); err != nil || st.Status != archive.StatusComplete || !st.Active || st.Refetch != archive.RefetchNone {
			t.Errorf("%s of the down host: %+v, %v; want complete, active, not marked", did, st, err)
		}
	}
}
