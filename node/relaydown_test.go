package node_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
)

// TestRelayFirehoseDownThroughBootstrap: the relay's firehose refuses
// every connection from the start (its listRepos and the hosts' getRepo
// answer), so capture's wait expires and bootstrap downloads every account
// without a firehose position; some downloaded accounts change while the
// firehose is down; it comes back during bootstrap (capture joins at the
// live tip) or only in steady state (the live consumer does). The events
// between an account's download and that moment reach the archive through
// no stream: before, nothing recorded the hole, and the accounts stayed
// stale until a scheduled audit, if any. Now one no_cursor gap is
// recorded, its pass fetches exactly the changed accounts, and the
// archive and a replay from cursor 0 fold to the network. A relay that
// is reachable but silent while the wait expires loses nothing: no gap.
func TestRelayFirehoseDownThroughBootstrap(t *testing.T) {
	for _, tc := range []struct {
		name string
		// down: the firehose refuses connections from the start.
		down bool
		// backInBootstrap: it comes back while a held download keeps
		// bootstrap running, and capture accepts a frame before that
		// download ends; else it comes back in steady state.
		backInBootstrap bool
	}{
		{name: "back in steady state", down: true},
		{name: "back during bootstrap", down: true, backInBootstrap: true},
		{name: "reachable but silent", backInBootstrap: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			net, err := oracle.Start(ctx, oracle.Config{Accounts: 30, RecordsMean: 4, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 23})
			if err != nil {
				t.Fatal(err)
			}
			defer net.Close()
			net.Faults().RefuseFirehose(tc.down)
			dids := activeDIDs(net)
			held := dids[len(dids)-1]
			var gate *oracle.BodyGate
			if tc.backInBootstrap {
				gate = net.Faults().GateBody(held)
				defer gate.Release()
			}
			h := startHealNodeWith(t, net, t.TempDir(), func(c *node.Config) { c.CaptureWait = 300 * time.Millisecond })
			store := h.n.Store()
			if tc.backInBootstrap {
				h.waitUntil(t, time.Minute, "every account but the held one downloaded", func() bool {
					for _, did := range dids[:len(dids)-1] {
						if st, err := store.RepoState(did); err != nil || st.Status != archive.StatusComplete {
							return false
						}
					}
					return true
				})
			} else {
				h.waitSteady(t)
			}
			if tc.down && net.FirehoseConnections() != 0 {
				t.Fatalf("%d firehose connections while the firehose refuses them", net.FirehoseConnections())
			}
			before := net.AllRepoCounts()
			changed := changeAccounts(t, net, 0, 5) // downloaded, changed while no stream follows the relay
			net.Faults().RefuseFirehose(false)
			if tc.backInBootstrap {
				// Capture accepts a frame (its position), then bootstrap ends.
				h.waitUntil(t, time.Minute, "capture's connection", func() bool { return net.FirehoseConnections() >= 1 })
				resumeStream(t, h, net, 10)
				gate.Release()
				h.waitLive(t, net, 2)
			} else {
				h.waitUntil(t, time.Minute, "the live connection", func() bool { return net.FirehoseConnections() >= 1 })
			}
			resumeStream(t, h, net, 11)
			h.atHead(t, net)
			gs, err := store.Gaps()
			if err != nil {
				t.Fatal(err)
			}
			if !tc.down {
				h.waitUntil(t, time.Minute, "retry drained", retryDrained(h.n.Retrier()))
				if len(gs) != 0 {
					t.Fatalf("gaps %+v with a relay reachable while bootstrap ran, want none", gs)
				}
				checkTruth(t, store, net, "a relay reachable but silent while capture's wait expired")
				return
			}
			if len(gs) != 1 || gs[0].Kind != archive.GapNoCursor || gs[0].FromSeq != 0 {
				f, _, err := check.Archive(store)
				if err != nil {
					t.Fatal(err)
				}
				checked, bad := check.Compare(f, net.World(), nil)
				t.Fatalf("gaps %+v, want one no_cursor gap from 0 (the firehose unreachable while bootstrap downloaded); %d of %d accounts differ from the network:\n%s",
					gs, len(bad), checked, check.Describe(bad, 3))
			}
			gs = h.healed(t)
			if len(gs) != 1 {
				t.Fatalf("gaps after the repair %+v, want the one no_cursor gap", gs)
			}
			h.atHead(t, net)
			checkTruth(t, store, net, "a firehose down while bootstrap downloaded")
			if err := check.FetchedOnce(net.FetchedSince(before), changed); err != nil {
				t.Error(err)
			}
			replayFold(t, h.n, net)
		})
	}
}

// replayFold subscribes to n's /subscribe from cursor 0 until the
// archive's tip and fails t unless the replay folds to the network.
func replayFold(t *testing.T, n *node.Node, net *oracle.Network) {
	t.Helper()
	_, stats, err := check.Archive(n.Store())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(n.Handler())
	defer srv.Close()
	sub := crash.Follow(strings.TrimPrefix(srv.URL, "http://"))
	defer sub.Close()
	if err := sub.WaitFor(stats.Tip, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if checked, bad := check.Compare(sub.Fold(), net.World(), nil); len(bad) > 0 {
		t.Fatalf("the replay from cursor 0: %d of %d accounts differ:\n%s", len(bad), checked, check.Describe(bad, 3))
	}
}

// TestSilentRelayThenRestart: a relay reachable but silent through
// bootstrap leaves no cursor (and no gap: capture's connection covered the
// downloads); backstream stops in steady state, and accounts change while
// it is down. The restarted live consumer has no position and joins the
// relay's live tip: before, the changes were lost with no gap; now that
// start records one no_cursor gap, whose pass fetches exactly the changed
// accounts.
func TestSilentRelayThenRestart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 30, RecordsMean: 4, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	dir := t.TempDir()
	quick := func(c *node.Config) { c.CaptureWait = 300 * time.Millisecond }
	h := startHealNodeWith(t, net, dir, quick)
	h.waitLive(t, net, 2) // capture's connection, then the live one
	if gs, err := h.n.Store().Gaps(); err != nil || len(gs) != 0 {
		t.Fatalf("gaps %+v (%v) after a bootstrap with the relay reachable but silent, want none", gs, err)
	}
	h.stop(t)

	before := net.AllRepoCounts()
	changed := changeAccounts(t, net, 0, 5) // while backstream is down, with no position
	h = startHealNodeWith(t, net, dir, quick)
	h.waitLive(t, net, 3)
	resumeStream(t, h, net, 11)
	h.atHead(t, net)
	store := h.n.Store()
	gs, err := store.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Kind != archive.GapNoCursor || gs[0].FromSeq != 0 {
		f, _, err := check.Archive(store)
		if err != nil {
			t.Fatal(err)
		}
		checked, bad := check.Compare(f, net.World(), nil)
		t.Fatalf("gaps %+v after a restart with no position, want one no_cursor gap from 0; %d of %d accounts differ from the network:\n%s",
			gs, len(bad), checked, check.Describe(bad, 3))
	}
	h.healed(t)
	h.atHead(t, net)
	checkTruth(t, store, net, "a restart with no position after a silent bootstrap")
	if err := check.FetchedOnce(net.FetchedSince(before), changed); err != nil {
		t.Error(err)
	}
	replayFold(t, h.n, net)
}
