package node_test

import (
	"context"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
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
	const joining = 2
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: 24, RecordsMean: 3, Hosts: 3, Seed: 53})
	var joined []string
	for _, a := range net.World().Accounts() {
		if a.Host == joining && a.Active {
			joined = append(joined, a.DID)
		}
	}
	if len(joined) == 0 {
		t.Fatal("no active account on the joining host")
	}
	f := net.Faults()
	f.HideHost(joining, true)
	v, phase := startHostsNode(t, ctx, net)
	v.waitFor("steady state", func() bool { return phase.Load() == archive.PhaseSteadyState })
	for _, did := range joined {
		if st, err := v.n.Store().RepoState(did); err == nil && st.Status == archive.StatusComplete {
			t.Fatalf("%s of the host not yet on the roster archived by bootstrap: the host was listed", did)
		}
	}
	f.HideHost(joining, false)
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	v.waitFor("three more audit gaps closed", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+3
	})
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	archived := 0
	for _, did := range joined {
		if st, err := v.n.Store().RepoState(did); err == nil && st.Status == archive.StatusComplete {
			archived++
		}
	}
	if archived != len(joined) {
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
