package node_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
)

// endlessHost is the roster host whose listing never ends.
const endlessHost = 1

// pagesOfBound is how many 1,000-entry pages one listing of host may name
// (upstream.HostListingBound of the accounts the simulated relay's
// listHosts gives it), the page that goes past included.
func pagesOfBound(net *oracle.Network, host int) int64 {
	var accounts uint64
	for _, a := range net.World().Accounts() {
		if a.Host == host && a.Status != "deleted" {
			accounts++
		}
	}
	return int64(2*accounts+hostListingSlack)/1000 + 1
}

// hostListingSlack and cutTooManyEntries are upstream.HostListingSlack and
// upstream.CutTooManyEntries, spelt out so that the test also builds
// against a tree without them.
const (
	hostListingSlack  = 10_000
	cutTooManyEntries = "too_many_entries"
)

// startHostsNode runs a verifying hosts-mode node on net, auditing every
// 300 ms once in steady state, and returns it with its phase. opts adjust
// its configuration before it starts.
func startHostsNode(t *testing.T, ctx context.Context, net *oracle.Network, opts ...func(*node.Config)) (*verifying, *atomic.Value) {
	t.Helper()
	var phase atomic.Value
	phase.Store(archive.Phase(""))
	v := &verifying{reg: prometheus.NewRegistry(), runErr: make(chan error, 1), deadline: time.After(2 * time.Minute), t: t}
	cfg := node.Config{Registry: v.reg,
		DataDir: t.TempDir(), Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(), Store: archive.Options{Logger: quiet},
		Bootstrap:   bootstrap.Config{Workers: 8, PageLimit: 1000, Enumerate: bootstrap.EnumerateHosts},
		CaptureWait: 500 * time.Millisecond, JobBackoffBase: 10 * time.Millisecond, JobBackoffMax: 50 * time.Millisecond,
		RetryInterval: 200 * time.Millisecond, RetryMaxDelay: time.Second, RetryScanPeriod: 100 * time.Millisecond,
		RepairPeriod: 100 * time.Millisecond, AuditInterval: 300 * time.Millisecond,
		Logger: quiet, OnPhase: func(p archive.Phase) { phase.Store(p) },
		Verify: &ident.Config{PLC: net.RelayURL(), Web: net.RelayURL(), Mode: ident.ModeStrict},
	}
	for _, o := range opts {
		o(&cfg)
	}
	v.launch(ctx, cfg)
	return v, &phase
}

// TestEndlessHostListingBootstrapEnds: a roster host's listRepos never
// ends (every page full, a cursor never seen before: oracle
// EndlessListing). Bootstrap's lane for it and discovery after it each
// list at most upstream.HostListingBound entries of it, then cut it
// (counted, reason too_many_entries): the node reaches steady state, and
// the other host's accounts are archived. On main the lane listed for
// ever and bootstrap never ended.
func TestEndlessHostListingBootstrapEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 53})
	f := net.Faults()
	f.EndlessListing(endlessHost, fabricatedDIDs(3))
	bound := pagesOfBound(net, endlessHost)
	v, phase := startHostsNode(t, ctx, net)
	// Bootstrap and discovery may each list one bound's worth; five times
	// that without steady state is a listing without end.
	v.waitFor("steady state, or five bounds of the endless listing", func() bool {
		return phase.Load() == archive.PhaseSteadyState || f.EndlessPages(endlessHost) >= 5*bound
	})
	if p, pages := phase.Load(), f.EndlessPages(endlessHost); p != archive.PhaseSteadyState || pages > 2*bound {
		t.Fatalf("phase %q after the endless host served %d pages (its bound: %d a listing): a listing without end keeps the node from steady state",
			p, pages, bound)
	}
	if got := promtest.Value(t, v.reg, "backstream_listrepos_cut_total", map[string]string{"reason": cutTooManyEntries}); got != 1 {
		t.Errorf("bootstrap listings cut for too many entries: %v, want 1", got)
	}
	if got := promtest.Value(t, v.reg, "backstream_discovery_cut_total", map[string]string{"reason": cutTooManyEntries}); got != 1 {
		t.Errorf("discovery listings cut for too many entries: %v, want 1", got)
	}
	for _, a := range net.World().Accounts() {
		if a.Host == endlessHost || !a.Active {
			continue
		}
		if st, err := v.n.Store().RepoState(a.DID); err != nil || st.Status != archive.StatusComplete {
			t.Errorf("%s of the honest host: %+v %v, want complete", a.DID, st, err)
		}
	}
}

// TestEndlessHostListingAuditEnds: the listing of a roster host stops
// ending once the node is in steady state. Every scheduled audit lists it
// at most upstream.HostListingBound entries, then cuts it (counted), so
// the audits' gaps close and the node stays ready. On main the first
// audit's pass listed the host for ever: its gap never closed and /readyz
// stayed 503.
func TestEndlessHostListingAuditEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 53})
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	f := net.Faults()
	bound := pagesOfBound(net, endlessHost)
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	f.EndlessListing(endlessHost, fabricatedDIDs(3))
	// Three audits may list three bounds' worth; ten bounds with fewer
	// than three gaps closed is a pass that does not end.
	v.waitFor("three more gaps closed, or ten bounds of the endless listing", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+3 ||
			f.EndlessPages(endlessHost) >= 10*bound
	})
	if got, pages := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)-closed, f.EndlessPages(endlessHost); got < 3 {
		t.Fatalf("%v audit gaps closed while the endless host served %d pages (its bound: %d a listing): a listing without end holds a gap open",
			got, pages, bound)
	}
	if got := promtest.Value(t, v.reg, "backstream_repair_listing_cut_total", nil); got < 3 {
		t.Errorf("repair listings cut: %v, want 3 or more", got)
	}
}

// TestForeignHostClaimsAreIgnored: in steady state, a roster host lists an
// account of the other host as taken down, and another at a rev newer
// than its own (oracle ClaimAccount). Every scheduled audit lists both
// hosts; the account's own host says it is active and unchanged. The
// claims of a host that is not the account's are counted and ignored: no
// takedown row is archived, no replacement is made, and /subscribe still
// folds to the world. On main every audit archived the takedown (the
// account's records left the fold), then its own host's listing had it
// fetched again: an account row and a whole replacement a day per claimed
// account, for ever. The same holds when the accounts' own host turns idle
// as the claims begin (oracle SetHostStatus: the relay dropped its
// subscription; the host answers as before): an idle host is a roster
// host like an active one, listed and its accounts its own. When only
// active hosts were listed, the idle host was no roster host to the rule
// and every audit archived the takedown on the other host's word.
func TestForeignHostClaimsAreIgnored(t *testing.T) {
	for _, status := range []string{"active", "idle"} {
		t.Run(status, func(t *testing.T) { foreignHostClaimsIgnored(t, status) })
	}
}

// foreignHostClaimsIgnored is TestForeignHostClaimsAreIgnored with the
// claimed accounts' host given status by listHosts as the claims begin.
func foreignHostClaimsIgnored(t *testing.T, status string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 53})
	var victims []string
	for _, did := range live {
		if a, _ := net.World().Account(did); a.Host == 0 && a.Records > 0 && len(victims) < 2 {
			victims = append(victims, did)
		}
	}
	if len(victims) < 2 {
		t.Fatalf("want two active accounts with records on host 0, have %v", victims)
	}
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	f := net.Faults()
	f.SetHostStatus(0, status)
	f.ClaimAccount(endlessHost, victims[0], false, "takendown")
	f.ClaimAccount(endlessHost, victims[1], true, "")
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	v.waitFor("three more audit gaps closed", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+3
	})
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	if got := promtest.Value(t, v.reg, "backstream_repair_accounts_total", map[string]string{"reason": "inactive"}); got != 0 {
		t.Errorf("account rows archived on another host's word: %v, want 0", got)
	}
	for _, reason := range []string{"reactivated", "newer_rev"} {
		if got := promtest.Value(t, v.reg, "backstream_repair_accounts_total", map[string]string{"reason": reason}); got != 0 {
			t.Errorf("accounts marked %s: %v, want 0 (only another host's claims changed)", reason, got)
		}
	}
	if got := promtest.Value(t, v.reg, "backstream_repair_accounts_total", map[string]string{"reason": "foreign"}); got < 6 {
		t.Errorf("claims of a host about another's accounts counted: %v, want 6 or more (2 a pass)", got)
	}
	for _, did := range victims {
		if st, err := v.n.Store().RepoState(did); err != nil || !st.Active || st.Status != archive.StatusComplete {
			t.Errorf("%s: %+v %v, want active and complete", did, st, err)
		}
	}
	fold, _ := v.subscribeFold()
	if checked, mism := check.Compare(fold, net.World(), nil); len(mism) > 0 {
		t.Errorf("%d of %d accounts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
}

// TestForeignHostNotFoundIsNotBelieved: in a hosts-mode bootstrap, a
// roster host lists an account of the other host (oracle ClaimAccount)
// and answers its getRepo RepoNotFound, as a host that does not hold it
// does; the account's own host is slow, so the claim is dispatched first.
// A "not found" from a host that is not the PDS the account's DID document
// names is no answer about the account: the repo is fetched from its own
// host (the retry runner, through the relay) and archived with its
// records. On main it ended complete with no rows, and its own host's
// listing, coming later, found it known: archived empty.
func TestForeignHostNotFoundIsNotBelieved(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 53})
	victim := ""
	for _, did := range live {
		if a, _ := net.World().Account(did); a.Host == 0 && a.Records > 0 {
			victim = did
			break
		}
	}
	if victim == "" {
		t.Fatal("no active account with records on host 0")
	}
	f := net.Faults()
	f.ClaimAccount(endlessHost, victim, true, "")
	f.SlowHost(0, 300*time.Millisecond)
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	f.SlowHost(0, 0)
	if got := net.FetchedFrom(victim)[endlessHost]; got == 0 {
		t.Fatalf("the claiming host was never asked for %s: the claim was not dispatched first", victim)
	}
	a, _ := net.World().Account(victim)
	v.waitFor("the victim complete with its records, or settled otherwise", func() bool {
		st, err := v.n.Store().RepoState(victim)
		return err == nil && (st.Status == archive.StatusComplete && st.Refetch == archive.RefetchNone || st.Status == archive.StatusUnavailable)
	})
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	if st, err := v.n.Store().RepoState(victim); err != nil || st.Status != archive.StatusComplete || st.Records != uint64(a.Records) {
		t.Errorf("%s: %+v %v; want complete with its %d records", victim, st, err, a.Records)
	}
	fold, _ := v.subscribeFold()
	if checked, mism := check.Compare(fold, net.World(), nil); len(mism) > 0 {
		t.Errorf("%d of %d accounts differ:\n%s", len(mism), checked, check.Describe(mism, 5))
	}
}
