package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// listingPage is the page size of the hostile-listing runs: a 60-account
// world lists in three pages.
const listingPage = 20

// hostileListing is one hostile listRepos shape and what a cut says.
type hostileListing struct {
	shape  oracle.FaultKind
	reason string // the cut reason counted
	// usable: the hostile page's repos are valid (only its cursor is not),
	// so bootstrap keeps the page, and discovery's page from the same
	// cursor — 1000 entries, the rest of this world — records every
	// account after it.
	usable bool
}

var hostileListings = []hostileListing{
	{oracle.FaultListReposHugeCursor, upstream.CutCursorTooLong, true},
	{oracle.FaultListReposHugeBody, upstream.CutTooLarge, false},
	{oracle.FaultListReposMalformed, upstream.CutMalformed, false},
}

// TestHostileListingIsNotFatal: a relay whose listRepos pages after the
// first carry a 10 MiB cursor, a 33 MiB body or a body that is not JSON —
// every time, so a restart would meet it again — used to stop the process
// at start ("malformed response … cursor of 10485760 bytes"). Now the
// listing ends at the bad page, counted once by reason, bootstrap archives
// what it listed, discovery meets the page again and ends (counted once),
// and the node reaches steady state and keeps running. The accounts the
// relay would list after an unusable page are not in the store: nothing
// names them (those after a page whose repos are usable are, through
// discovery's page from the same cursor).
func TestHostileListingIsNotFatal(t *testing.T) {
	for _, tc := range hostileListings {
		t.Run(string(tc.shape), func(t *testing.T) {
			net := listingNetwork(t)
			kept := 1
			if tc.usable {
				kept = 2
			}
			listed := listedDIDs(t, net, kept)
			if err := net.Faults().HostileListRepos(tc.shape, oracle.Always); err != nil {
				t.Fatal(err)
			}
			n, reg, run := runListingNode(t, net)
			defer run.stop(t)
			store := n.Store()

			if got := promtest.Value(t, reg, "backstream_listrepos_cut_total", map[string]string{"reason": tc.reason}); got != 1 {
				t.Errorf("bootstrap cut{%s} = %v, want 1", tc.reason, got)
			}
			if got := promtest.Value(t, reg, "backstream_discovery_cut_total", map[string]string{"reason": tc.reason}); got != 1 {
				t.Errorf("discovery cut{%s} = %v, want 1", tc.reason, got)
			}
			// bootstrap's request and discovery's, nothing retried
			if got := net.Faults().Fired(tc.shape); got != 2 {
				t.Errorf("hostile page served %d times, want 2", got)
			}
			checked := checkListed(t, store, net, func(a world.Account) bool { return listed[a.DID] })
			after := 0
			for _, a := range net.World().Accounts() {
				if listed[a.DID] || a.Status == world.StatusDeleted {
					continue
				}
				after++
				st, err := store.RepoState(a.DID)
				switch {
				case !tc.usable && !errors.Is(err, archive.ErrNotFound):
					t.Fatalf("%s, listed only after the bad page, is in the store: %+v %v", a.DID, st, err)
				case tc.usable && (err != nil || st.Status != archive.StatusComplete && st.Refetch != archive.RefetchDiscovered):
					t.Fatalf("%s, on discovery's page, is not recorded as discovered: %+v %v", a.DID, st, err)
				}
			}
			if checked < listingPage*kept*3/4 || after == 0 {
				t.Fatalf("%d listed accounts checked, %d after the bad page: the world does not exercise the cut", checked, after)
			}
			run.stillRunning(t)
		})
	}
}

// TestCutListingHealsThroughDiscovery: the relay sends one bad page, to
// bootstrap. Bootstrap cuts its listing there, but its checkpoint stays at
// the bad page's cursor (never "finished"): discovery lists again from it
// after bootstrap, records every account after it, and the retry runner
// archives them, so the archive folds to the whole world.
func TestCutListingHealsThroughDiscovery(t *testing.T) {
	net := listingNetwork(t)
	if err := net.Faults().HostileListRepos(oracle.FaultListReposMalformed, 1); err != nil {
		t.Fatal(err)
	}
	n, reg, run := runListingNode(t, net)
	defer run.stop(t)
	if got := promtest.Value(t, reg, "backstream_listrepos_cut_total", map[string]string{"reason": upstream.CutMalformed}); got != 1 {
		t.Fatalf("bootstrap cut{malformed} = %v, want 1", got)
	}
	if got := promtest.Sum(t, reg, "backstream_discovery_cut_total"); got != 0 {
		t.Fatalf("discovery cut = %v, want 0 (the relay healed)", got)
	}
	retrier := n.Retrier()
	deadline := time.Now().Add(time.Minute)
	for drained := retryDrained(retrier); !drained(); {
		if time.Now().After(deadline) {
			t.Fatalf("retry never drained: %+v", retrier.Status())
		}
		run.stillRunning(t)
		time.Sleep(20 * time.Millisecond)
	}
	if checked := checkListed(t, n.Store(), net, nil); checked < 50 {
		t.Fatalf("only %d accounts checked", checked)
	}
}

// listingNetwork is a quiet 60-account world on two hosts.
func listingNetwork(t *testing.T) *oracle.Network {
	t.Helper()
	net, err := oracle.Start(context.Background(), oracle.Config{Accounts: 60, RecordsMean: 4, Hosts: 2, Seed: 14, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	return net
}

// listedDIDs lists the first pages of the relay's listing, as bootstrap
// pages it, before any fault is armed.
func listedDIDs(t *testing.T, net *oracle.Network, pages int) map[string]bool {
	t.Helper()
	c, err := upstream.New(net.RelayURL(), upstream.Options{ScratchDir: t.TempDir(), LoopbackHosts: net.LoopbackHosts()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	out := map[string]bool{}
	cursor := ""
	for range pages {
		pg, err := c.ListRepos(t.Context(), cursor, listingPage)
		if err != nil || pg.Cursor == "" {
			t.Fatalf("listing page: %v (cursor %q)", err, pg.Cursor)
		}
		for _, r := range pg.Repos {
			out[r.DID] = true
		}
		cursor = pg.Cursor
	}
	return out
}

// listingRun is a node running in the background.
type listingRun struct {
	cancel context.CancelFunc
	err    chan error
}

// stillRunning fails t if Run has returned.
func (r *listingRun) stillRunning(t *testing.T) {
	t.Helper()
	select {
	case err := <-r.err:
		r.err <- err
		t.Fatalf("the node stopped: %v", err)
	default:
	}
}

func (r *listingRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	if err := <-r.err; err != nil {
		t.Errorf("run: %v", err)
	}
}

// runListingNode runs a node over net until it reaches steady state.
func runListingNode(t *testing.T, net *oracle.Network) (*node.Node, *prometheus.Registry, *listingRun) {
	t.Helper()
	reg := prometheus.NewRegistry()
	phases := make(chan archive.Phase, 8)
	cfg := node.Config{
		DataDir: t.TempDir(), Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(), Store: archive.Options{Logger: quiet, CacheSize: 8 << 20},
		Bootstrap:   bootstrap.Config{Workers: 8, PageLimit: listingPage, Enumerate: bootstrap.EnumerateRelay}, // the relay's listing is under test
		CaptureWait: 100 * time.Millisecond, Registry: reg, Logger: quiet,
		JobBackoffBase: 10 * time.Millisecond, JobBackoffMax: 50 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond, RetryMaxDelay: 300 * time.Millisecond, RetryScanPeriod: 100 * time.Millisecond,
		OnPhase: func(p archive.Phase) { phases <- p },
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	run := &listingRun{cancel: cancel, err: make(chan error, 1)}
	go func() { run.err <- n.Run(ctx) }()
	deadline := time.After(time.Minute)
	for {
		select {
		case p := <-phases:
			if p == archive.PhaseSteadyState {
				return n, reg, run
			}
		case err := <-run.err:
			cancel()
			t.Fatalf("the node stopped before steady state: %v", err)
		case <-deadline:
			cancel()
			<-run.err
			t.Fatal("no steady state within a minute")
		}
	}
}

// checkListed fails t unless the archive folds to the world's records for
// every active (or deleted) account include accepts (nil: all); it returns
// how many it checked.
func checkListed(t *testing.T, store *archive.Store, net *oracle.Network, include func(world.Account) bool) int {
	t.Helper()
	f, _, err := check.Archive(store)
	if err != nil {
		t.Fatal(err)
	}
	checked, bad := check.Compare(f, net.World(), func(a world.Account) bool {
		return (include == nil || include(a)) && (a.Active || a.Status == world.StatusDeleted)
	})
	if len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ:\n%s", len(bad), checked, check.Describe(bad, 5))
	}
	return checked
}
