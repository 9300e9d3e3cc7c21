package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
)

// TestUnlistedAccountArchivedOnItsCommit: accounts the relay's listRepos
// never names (a fifth of them here) are neither bootstrapped nor found by
// discovery when the network is enumerated through the relay. Their first live commit comes with a since: the archive holds
// nothing before it, so the account is discovered then and replaced whole,
// without waiting for a scheduled audit (none runs here): the fold equals
// the network's records for every account.
func TestUnlistedAccountArchivedOnItsCommit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 40, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 14, RelayIndexMissing: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := startHealNodeWith(t, net, t.TempDir(), func(c *node.Config) { c.Bootstrap.Enumerate = bootstrap.EnumerateRelay })
	h.waitLive(t, net, 2) // capture's connection, then the live one
	changeAccounts(t, net, 0, len(activeDIDs(net)))
	h.atHead(t, net)
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		f, _, err := check.Archive(h.n.Store())
		if err != nil {
			t.Fatal(err)
		}
		if _, bad := check.Compare(f, net.World(), nil); len(bad) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	checkTruth(t, h.n.Store(), net, "a live commit of every account, a fifth of them never listed")
}
