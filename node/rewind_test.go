package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
)

// rewindNet is a quiet network of 40 accounts on one host.
func rewindNet(t *testing.T, seed int64) *oracle.Network {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 40, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficNone, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	return net
}

// waitRedialed waits for a firehose connection after the conns-th: the
// relay has positioned it, so events emitted from then on reach it.
func (h *healNode) waitRedialed(t *testing.T, net *oracle.Network, conns int64) {
	t.Helper()
	h.waitUntil(t, time.Minute, "the live consumer's connection", func() bool { return net.FirehoseConnections() > conns })
}

// rewoundGap fails t unless the store holds one gap, a seq_regression
// from seq from.
func rewoundGap(t *testing.T, s *archive.Store, from uint64) {
	t.Helper()
	gs, err := s.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Kind != archive.GapSeqRegression || gs[0].FromSeq != from {
		t.Fatalf("gaps %+v, want one seq_regression gap from %d", gs, from)
	}
}

// noEventTwice fails t when two live rows of the archive are one commit
// op (account, rev, record path): an event archived twice.
func noEventTwice(t *testing.T, s *archive.Store) {
	t.Helper()
	rows, err := check.Rows(s)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]archive.Event{}
	for _, r := range rows {
		if r.Source != archive.SourceLive || !r.Kind.IsCommit() {
			continue
		}
		k := fmt.Sprintf("%s %s %s/%s", r.DID, r.Rev, r.Collection, r.RKey)
		if o, ok := seen[k]; ok {
			t.Fatalf("%s archived twice: rows %d (relay seq %d) and %d (relay seq %d)", k, o.Seq, o.UpstreamSeq, r.Seq, r.UpstreamSeq)
		}
		seen[k] = r
	}
}

// TestRewoundRelayConnected: the relay is restored from a backup 20
// events old while backstream follows it: the connection drops, the
// consumer redials its cursor (30), which the restored relay serves from
// its live tip without a word, and the world's next changes arrive under
// seqs 11 to 15, which the consumer accepted before for other events.
// The consumer follows the relay back at once (the frame under 11 is not
// the one it accepted there): the changes are archived, once, cursor/relay
// follows the new sequence, one seq_regression gap is recorded and healed,
// and the fold equals the network.
func TestRewoundRelayConnected(t *testing.T) {
	net := rewindNet(t, 21)
	h := startHealNode(t, net, t.TempDir())
	h.waitLive(t, net, 2) // capture's connection, then the live one
	changeAccounts(t, net, 0, 15)
	changeAccounts(t, net, 0, 15) // seqs 1 to 30
	h.atHead(t, net)

	conns := net.FirehoseConnections()
	net.Faults().RewindSequence(20)
	h.waitRedialed(t, net, conns)
	changeAccounts(t, net, 20, 5) // new events under seqs 11 to 15
	h.atHead(t, net)
	rewoundGap(t, h.n.Store(), 30)
	if net.Faults().Fired(oracle.FaultSilentFutureCursor) == 0 {
		t.Fatal("the consumer never redialed above the restored relay's head: the test proves nothing")
	}
	h.healed(t)
	checkTruth(t, h.n.Store(), net, "a relay restored from a backup while connected")
	noEventTwice(t, h.n.Store())
}

// TestRewoundRelayAfterRestart: the relay is restored from a backup 20
// events old while backstream is stopped at cursor 30; 3 accounts change
// before backstream starts again (seqs 11 to 13), then 4 more once its
// consumer has redialed cursor 30, which the restored relay serves from
// its live tip without a word: their commits come under seqs 14 to 17,
// below the cursor, with a window of accepted frames empty after the
// restart. Their revs are newer than the archive's: the relay went back
// in its sequence, and the consumer follows it from the first of them
// (cursor/relay in the new sequence), with a seq_regression gap whose
// repair pass fetches the 3 accounts the stream never brought. Every
// commit is archived once, and the fold equals the network.
func TestRewoundRelayAfterRestart(t *testing.T) {
	net := rewindNet(t, 22)
	dir := t.TempDir()
	followThenStop(t, net, dir, 2, nil) // seqs 1 to 30

	net.Faults().RewindSequence(20)
	before := net.AllRepoCounts()
	unseen := changeAccounts(t, net, 20, 3) // seqs 11 to 13, before backstream redials
	conns := net.FirehoseConnections()
	h := startHealNode(t, net, dir)
	h.waitRedialed(t, net, conns)
	changeAccounts(t, net, 23, 4) // seqs 14 to 17, below the cursor
	changeAccounts(t, net, 0, 15) // seqs 18 to 32: past the cursor
	h.atHead(t, net)
	rewoundGap(t, h.n.Store(), 30)
	h.healed(t)
	checkTruth(t, h.n.Store(), net, "a relay restored from a backup while backstream was stopped")
	noEventTwice(t, h.n.Store())
	if err := check.FetchedOnce(net.FetchedSince(before), unseen); err != nil {
		t.Error(err)
	}
}

// TestRewoundRelayLateStreamNotBehind: the relay is restored from a
// backup 140 events old while backstream is stopped at cursor 150, and
// after backstream redials it streams the world's changes steadily, all
// under seqs below that cursor. The archive is then as current as the
// relay: /readyz must not call it behind (max stale 1s),
// and the gap's repair pass, which waits for the stream to bring an event
// stamped after the gap was found, must finish while the relay is still
// below the cursor. Then the fold equals the network.
func TestRewoundRelayLateStreamNotBehind(t *testing.T) {
	net := rewindNet(t, 23)
	dir := t.TempDir()
	set := func(c *node.Config) { c.MaxStale = time.Second }
	followThenStop(t, net, dir, 10, set) // seqs 1 to 150

	net.Faults().RewindSequence(140)
	changeAccounts(t, net, 20, 3) // seqs 11 to 13, before backstream redials
	conns := net.FirehoseConnections()
	h := startHealNodeWith(t, net, dir, set)
	h.waitRedialed(t, net, conns)
	dids := changeAccountsList(net, 0, 15)
	for i := 0; ; i++ {
		if net.Status().Seq >= 150 {
			gs, _ := h.n.Store().Gaps()
			t.Fatalf("the relay's sequence reached the cursor (150) with the gap still open: %+v", gs)
		}
		did := dids[i%len(dids)]
		e, err := net.Emit(func(w *world.World) (world.Event, error) {
			return w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "late", "createdAt": "2024-01-01T00:00:00Z"})
		})
		if err != nil {
			t.Fatal(err)
		}
		h.waitUntil(t, time.Minute, "the late commit archived", func() bool {
			rev, err := h.n.Store().Rev(did)
			return err == nil && rev == e.Commit.Rev
		})
		if err := h.n.Lagging(); err != nil && strings.Contains(err.Error(), "behind") {
			t.Fatalf("after %d late commits (relay seq %d), each archived: /readyz says %v", i+1, e.Seq, err)
		}
		gs, err := h.n.Store().Gaps()
		if err != nil {
			t.Fatal(err)
		}
		if len(gs) > 0 && !gs[0].Open() {
			break
		}
		time.Sleep(30 * time.Millisecond) // a steady stream: no pause of a repair period
	}
	for net.Status().Seq <= 150 {
		changeAccounts(t, net, 0, 15)
	}
	h.atHead(t, net)
	h.healed(t)
	rewoundGap(t, h.n.Store(), 150)
	checkTruth(t, h.n.Store(), net, "a relay restored from a backup streaming below the cursor")
	noEventTwice(t, h.n.Store())
}

// TestRewoundRelayAccountBelowCursor: the relay is restored from a backup
// 20 events old while backstream is stopped at cursor 30. After backstream
// redials, the relay's new events come under seqs below that cursor: 19
// commits (11 to 29), then, once the gap they revealed is repaired, the
// takedown of an account under 30 (an #account frame, which has no rev to
// tell it from a replay), then events past the cursor. The takedown is an
// event of the relay's new sequence like the commits before it: the fold
// must equal the network (the account's records erased).
func TestRewoundRelayAccountBelowCursor(t *testing.T) {
	net := rewindNet(t, 24)
	dir := t.TempDir()
	followThenStop(t, net, dir, 2, nil) // seqs 1 to 30

	net.Faults().RewindSequence(20)
	conns := net.FirehoseConnections()
	h := startHealNode(t, net, dir)
	h.waitRedialed(t, net, conns)
	changeAccounts(t, net, 0, 15) // seqs 11 to 25
	changeAccounts(t, net, 15, 4) // seqs 26 to 29
	h.waitUntil(t, time.Minute, "the gap the commits revealed, repaired", func() bool {
		gs, err := h.n.Store().Gaps()
		return err == nil && len(gs) == 1 && !gs[0].Open()
	})
	victim := changeAccountsList(net, 25, 1)[0]
	if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(victim, world.StatusTakendown) }); err != nil {
		t.Fatal(err) // seq 30
	}
	changeAccounts(t, net, 0, 5) // seqs 31 to 35
	h.atHead(t, net)
	h.healed(t)
	checkTruth(t, h.n.Store(), net, fmt.Sprintf("a takedown under relay seq 30, the cursor (gaps %v)", gapsString(t, h.n.Store())))
}

// gapsString renders the store's gaps for a failure.
func gapsString(t *testing.T, s *archive.Store) string {
	t.Helper()
	gs, err := s.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%+v", gs)
}

// followThenStop runs a node on dir (its config changed by set, if any)
// while the network's accounts change rounds times 15 times (seqs 1 to
// 15·rounds), and stops it once it holds the relay's head.
func followThenStop(t *testing.T, net *oracle.Network, dir string, rounds int, set func(*node.Config)) {
	t.Helper()
	h := startHealNodeWith(t, net, dir, func(c *node.Config) {
		if set != nil {
			set(c)
		}
	})
	h.waitLive(t, net, 2)
	for range rounds {
		changeAccounts(t, net, 0, 15)
	}
	h.atHead(t, net)
	h.stop(t)
}
