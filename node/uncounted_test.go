package node_test

import (
	"context"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
)

// uncountedNetwork is a network whose relay's listHosts gives no
// accountCount (oracle OmitAccountCounts) and whose host 1 lists more
// entries than the 10,000 a host without a count may name (oracle
// GrowHost: 12,000 deactivated accounts sorting before its own), and its
// active accounts.
func uncountedNetwork(t *testing.T, ctx context.Context) (*oracle.Network, []string) {
	t.Helper()
	net, live := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 53})
	f := net.Faults()
	f.OmitAccountCounts(true)
	f.GrowHost(1, 12_000)
	return net, live
}

// startUncounted runs a verifying node on net with --enumerate mode and
// returns it, its phase, and how many of live were complete when
// bootstrap ended (read as merging begins, before discovery lists
// anything; received once the node is in merging).
func startUncounted(t *testing.T, ctx context.Context, net *oracle.Network, mode string, live []string) (*verifying, func() bool, <-chan int) {
	t.Helper()
	stores := make(chan *archive.Store, 1) // the node's, once it is built
	atBootstrapEnd := make(chan int, 1)
	v, phase := startHostsNode(t, ctx, net, func(c *node.Config) {
		c.Bootstrap.Enumerate = mode
		onPhase := c.OnPhase
		c.OnPhase = func(p archive.Phase) {
			if p == archive.PhaseMerging && len(atBootstrapEnd) == 0 {
				atBootstrapEnd <- completeCount(<-stores, live)
			}
			onPhase(p)
		}
	})
	stores <- v.n.Store()
	return v, func() bool { return phase.Load() == archive.PhaseSteadyState }, atBootstrapEnd
}

// TestUncountedRosterBootstrapsThroughRelay: behind a relay whose
// listHosts gives no accountCount, bootstrap in the default mode (no
// --enumerate) enumerates through the relay's listRepos instead of
// listing each host with a bound it cannot know: when bootstrap ends
// every active account is archived, no listing was cut, and no roster
// is recorded (so discovery and the repair
// passes list the relay too). On main the big host's lane was cut at
// 10,000 entries (too_many_entries) and bootstrap ended without the
// accounts it lists after them (discovery found them later).
func TestUncountedRosterBootstrapsThroughRelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := uncountedNetwork(t, ctx)
	v, steady, atBootstrapEnd := startUncounted(t, ctx, net, "", live)
	v.waitFor("steady state", steady)
	select {
	case got := <-atBootstrapEnd:
		if got != len(live) {
			t.Errorf("active accounts complete when bootstrap ended: %d of %d", got, len(live))
		}
	default:
		t.Fatal("steady state without a merging phase")
	}
	if got := promtest.Value(t, v.reg, "backstream_listrepos_cut_total", map[string]string{"reason": cutTooManyEntries}); got != 0 {
		t.Errorf("bootstrap listings cut for too many entries: %v, want 0", got)
	}
	if rs, err := v.n.Store().RosterEntries(); err != nil || len(rs) != 0 {
		t.Errorf("roster recorded: %v, %v; want none", rs, err)
	}
}

// TestUncountedRosterHostsAsked: the same network with --enumerate hosts
// asked for: the hosts are listed, each bounded at 10,000 entries as
// before, so the big host's lane is cut (counted), and the roster is
// recorded. The cut host's accounts past the cut are listed by the
// relay's listRepos after the hosts' (the relay fallback, counted): every
// active account is archived when bootstrap ends. On main no listing
// named them: bootstrap ended without them (discovery found them later).
func TestUncountedRosterHostsAsked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, live := uncountedNetwork(t, ctx)
	v, steady, atBootstrapEnd := startUncounted(t, ctx, net, bootstrap.EnumerateHosts, live)
	v.waitFor("steady state", steady)
	if got := <-atBootstrapEnd; got != len(live) {
		t.Errorf("active accounts complete when bootstrap ended: %d of %d", got, len(live))
	}
	if got := promtest.Value(t, v.reg, "backstream_bootstrap_relay_fallback_total", nil); got != 1 {
		t.Errorf("bootstrap relay fallbacks: %v, want 1", got)
	}
	if got := promtest.Value(t, v.reg, "backstream_listrepos_cut_total", map[string]string{"reason": cutTooManyEntries}); got != 1 {
		t.Errorf("bootstrap listings cut for too many entries: %v, want 1", got)
	}
	if rs, err := v.n.Store().RosterEntries(); err != nil || len(rs) != 2 {
		t.Errorf("roster recorded: %v, %v; want both hosts", rs, err)
	}
}

// TestUncountedRosterAfterBootstrapPassListsRelay: bootstrap in the
// default mode lists the hosts (listHosts serves account counts, the
// roster is recorded); then the relay stops serving accountCount (oracle
// OmitAccountCounts) and host 1 grows past the 10,000 entries a host
// without a count may name (oracle GrowHost). Each repair pass reads the
// roster, finds it uncounted, and compares the relay's listing instead,
// as bootstrap would: no listing is cut, so the accounts the host lists
// past 10,000 are compared. On main every pass listed the host bounded at
// 10,000 and cut it there (too_many_entries), never comparing the rest.
func TestUncountedRosterAfterBootstrapPassListsRelay(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 16, RecordsMean: 3, Hosts: 2, Seed: 53})
	v, phase := startHostsNode(t, ctx, net, func(c *node.Config) { c.Bootstrap.Enumerate = "" })
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	if rs, err := v.n.Store().RosterEntries(); err != nil || len(rs) != 2 {
		t.Fatalf("roster recorded by bootstrap: %v, %v; want both hosts", rs, err)
	}
	f := net.Faults()
	f.OmitAccountCounts(true)
	f.GrowHost(1, 12_000)
	cuts := promtest.Value(t, v.reg, "backstream_repair_listing_cut_total", nil)
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	// The first pass after the change may have begun before it.
	v.waitFor("four more audit gaps closed", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+4
	})
	if got := promtest.Value(t, v.reg, "backstream_repair_listing_cut_total", nil) - cuts; got > 1 {
		t.Errorf("repair listings cut in 4 audits after the relay stopped serving account counts and a host grew past 10,000 entries: %v, want at most 1 (the pass begun before)", got)
	}
}
