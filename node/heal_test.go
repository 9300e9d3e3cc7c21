package node_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
)

var testLogger = quiet

// healNode is a node over dir following net, run until stop.
type healNode struct {
	n      *node.Node
	cancel context.CancelFunc
	done   chan error
	steady chan struct{}
}

func startHealNode(t *testing.T, net *oracle.Network, dir string, audit ...time.Duration) *healNode {
	t.Helper()
	return startHealNodeWith(t, net, dir, func(c *node.Config) {
		if len(audit) > 0 {
			c.AuditInterval = audit[0]
		}
	})
}

// startHealNodeWith is startHealNode with its config changed by set.
func startHealNodeWith(t *testing.T, net *oracle.Network, dir string, set func(*node.Config)) *healNode {
	t.Helper()
	steady := make(chan struct{})
	var once bool
	cfg := node.Config{
		DataDir: dir, Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(), Store: archive.Options{Logger: quiet},
		Bootstrap:      bootstrap.Config{Workers: 8},
		CaptureWait:    time.Second,
		JobBackoffBase: 10 * time.Millisecond, JobBackoffMax: 50 * time.Millisecond,
		RetryInterval: 100 * time.Millisecond, RetryMaxDelay: 300 * time.Millisecond, RetryScanPeriod: 100 * time.Millisecond,
		RepairPeriod: 100 * time.Millisecond,
		Logger:       testLogger,
		OnPhase: func(p archive.Phase) {
			if p == archive.PhaseSteadyState && !once {
				once = true
				close(steady)
			}
		},
	}
	set(&cfg)
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &healNode{n: n, cancel: cancel, done: make(chan error, 1), steady: steady}
	go func() { h.done <- n.Run(ctx) }()
	t.Cleanup(func() { h.stop(t) })
	return h
}

func (h *healNode) stop(t *testing.T) {
	t.Helper()
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	if err := <-h.done; err != nil {
		t.Errorf("node run: %v", err)
	}
	if err := h.n.Close(); err != nil {
		t.Errorf("node close: %v", err)
	}
}

// waitUntil polls cond every few ms until it holds, failing t after d or
// when the node stopped.
func (h *healNode) waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(d)
	for !cond() {
		select {
		case err := <-h.done:
			t.Fatalf("node stopped waiting for %s: %v", what, err)
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitSteady waits for steady state.
func (h *healNode) waitSteady(t *testing.T) {
	t.Helper()
	h.waitUntil(t, time.Minute, "steady state", func() bool {
		select {
		case <-h.steady:
			return true
		default:
			return false
		}
	})
}

// waitLive waits for steady state and the live consumer's connection
// (the relay's want-th): events emitted from then on reach it.
func (h *healNode) waitLive(t *testing.T, net *oracle.Network, want int64) {
	t.Helper()
	h.waitSteady(t)
	h.waitUntil(t, time.Minute, "the live connection", func() bool { return net.FirehoseConnections() >= want })
}

// atHead waits for cursor/relay at the relay's head.
func (h *healNode) atHead(t *testing.T, net *oracle.Network) {
	t.Helper()
	h.waitUntil(t, time.Minute, "the live cursor at the relay's head", func() bool {
		c, _ := h.n.Store().RelayCursor()
		return c == uint64(net.Status().Seq)
	})
}

// healed waits until every gap is closed and the node is not lagging.
func (h *healNode) healed(t *testing.T) []archive.Gap {
	t.Helper()
	var gs []archive.Gap
	h.waitUntil(t, time.Minute, "every gap closed", func() bool {
		var err error
		if gs, err = h.n.Store().Gaps(); err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Open() {
				return false
			}
		}
		return len(gs) > 0 && h.n.Lagging() == nil
	})
	return gs
}

// changeAccountsList is the DIDs changeAccounts(skip, k) changes.
func changeAccountsList(net *oracle.Network, skip, k int) []string {
	return activeDIDs(net)[skip : skip+k]
}

// activeDIDs is every active account's DID, in order.
func activeDIDs(net *oracle.Network) []string {
	var dids []string
	for _, a := range net.World().Accounts() {
		if a.Active && a.Status == "" {
			dids = append(dids, a.DID)
		}
	}
	sort.Strings(dids)
	return dids
}

// changeAccounts emits one new record for each of the first k active
// accounts (in DID order, skipping skip of them) and returns their DIDs.
func changeAccounts(t *testing.T, net *oracle.Network, skip, k int) []string {
	t.Helper()
	dids := changeAccountsList(net, skip, k)
	for _, did := range dids {
		if _, err := net.Emit(func(w *world.World) (world.Event, error) {
			return w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "in the gap", "createdAt": "2024-01-01T00:00:00Z"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	return dids
}

// resumeStream changes account skip until one of its events is archived
// through the stream (cursor/relay at the relay's head after it: the
// consumer redials after a backoff, and events before are in the gap). It
// returns the account, once.
func resumeStream(t *testing.T, h *healNode, net *oracle.Network, skip int) []string {
	t.Helper()
	var dids []string
	h.waitUntil(t, time.Minute, "an event through the resumed stream", func() bool {
		dids = changeAccounts(t, net, skip, 1)
		head := uint64(net.Status().Seq)
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			if c, _ := h.n.Store().RelayCursor(); c == head {
				return true
			}
		}
		return false
	})
	return dids
}

func checkTruth(t *testing.T, s *archive.Store, net *oracle.Network, after string) {
	t.Helper()
	f, _, err := check.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	if checked, bad := check.Compare(f, net.World(), nil); len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ after %s:\n%s", len(bad), checked, after, check.Describe(bad, 5))
	}
}

// TestHealRelaySequenceRestart: the relay is rebuilt with a fresh sequence
// while backstream runs; accounts change before backstream reconnects.
// Before, the consumer redialed its old cursor forever (FutureCursor) and
// the probes said ready. Now the gap is recorded, /readyz says lagging
// until the repair pass and its replacements finish, the stream follows
// the new sequence, the fold equals the ground truth, and getRepo was
// called once for each changed account and for no other.
func TestHealRelaySequenceRestart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 40, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := startHealNode(t, net, t.TempDir())
	h.waitLive(t, net, 2) // capture's connection, then the live one
	// Live traffic before the restart: the cursor ends well above the
	// restarted relay's head (a real relay's is in the billions).
	changeAccounts(t, net, 0, 15)
	changeAccounts(t, net, 0, 15)
	h.atHead(t, net)
	if err := h.n.Lagging(); err != nil {
		t.Fatalf("lagging before any gap: %v", err)
	}
	before := net.AllRepoCounts()

	net.RestartSequence()
	changed := changeAccounts(t, net, 5, 6) // before backstream reconnects: a real hole
	h.waitUntil(t, time.Minute, "the gap recorded", func() bool {
		gs, err := h.n.Store().Gaps()
		return err == nil && len(gs) == 1
	})
	if err := h.n.Lagging(); err == nil || !strings.Contains(err.Error(), "gap") {
		t.Fatalf("/readyz's lagging check with the gap open: %v", err)
	}
	// The stream resumes at the new sequence's tip once an event arrives
	// after the redial; then the repair pass starts.
	changed = append(changed, resumeStream(t, h, net, 30)...)
	gs := h.healed(t)
	if len(gs) != 1 || gs[0].Kind != archive.GapFutureCursor || gs[0].FromSeq != 30 || gs[0].ToSeq == 0 {
		t.Fatalf("gaps %+v, want one future_cursor gap from 30 into the new sequence", gs)
	}
	h.atHead(t, net)
	checkTruth(t, h.n.Store(), net, "a relay sequence restart")
	if err := check.FetchedOnce(net.FetchedSince(before), changed); err != nil {
		t.Error(err)
	}
	if c, _ := h.n.Store().RelayCursor(); c >= 30 {
		t.Fatalf("cursor/relay %d: not in the new sequence", c)
	}
}

// TestHealOutdatedCursor: backstream is stopped while the relay's replay
// window (Retention) is exceeded; on restart the relay answers
// OutdatedCursor and streams from its oldest retained event. Before, the
// events in between were lost silently. Now the gap is recorded and healed:
// fold = ground truth, getRepo once per account whose commits fell out of
// the window and for no other (those replayed whole are not fetched).
func TestHealOutdatedCursor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 40, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 12, Retention: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	dir := t.TempDir()
	h := startHealNode(t, net, dir)
	h.waitLive(t, net, 2)         // capture's connection, then the live one
	changeAccounts(t, net, 30, 2) // a firehose position to resume from
	h.atHead(t, net)
	h.stop(t)
	before := net.AllRepoCounts()

	// 12 events, 8 retained: the commits of accounts 0-3 fall out of the
	// window (0 and 1 change again inside it, their since naming the lost
	// commit); accounts 4-9 come through the replay whole.
	changeAccounts(t, net, 0, 10)
	changeAccounts(t, net, 0, 2)
	lost := changeAccountsList(net, 0, 4)

	h = startHealNode(t, net, dir)
	gs := h.healed(t)
	if len(gs) != 1 || gs[0].Kind != archive.GapOutdatedCursor {
		t.Fatalf("gaps %+v, want one outdated_cursor gap", gs)
	}
	h.atHead(t, net)
	checkTruth(t, h.n.Store(), net, fmt.Sprintf("an outage past the replay window (gap %+v)", gs[0]))
	if err := check.FetchedOnce(net.FetchedSince(before), lost); err != nil {
		t.Error(err)
	}
}

// TestHealDroppedFrames: the relay silently drops 1% of its frames. A
// dropped commit followed by another of the same account is a hole the
// next commit's since names (the writer marks the account at once); one
// that was the account's last is found by the scheduled audit's listing.
// Fold = ground truth, and getRepo went only to accounts the traffic
// changed: every other account was fetched once, by bootstrap.
func TestHealDroppedFrames(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 60, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficBasic, Rate: 400, Events: 1500, Seed: 13})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	net.Faults().DropFrames(0.01)
	h := startHealNode(t, net, t.TempDir(), 2*time.Second)
	h.waitSteady(t)
	h.waitUntil(t, time.Minute, "the traffic to end", func() bool { return net.Status().Done })
	net.Faults().DropFrames(0)
	doneAt := time.Now()
	if net.Faults().Fired(oracle.FaultDroppedFrame) == 0 {
		t.Fatal("no frame dropped: the test proves nothing")
	}
	h.waitUntil(t, 2*time.Minute, "an audit after the traffic, closed", func() bool {
		gs, err := h.n.Store().Gaps()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range gs {
			if g.Kind == archive.GapAudit && time.UnixMicro(g.FirstSeenUS).After(doneAt) && !g.Open() {
				return true
			}
		}
		return false
	})
	// The audit closes once its own marks are fetched; a replacement the
	// writer marked (a live commit past a dropped one) or one that failed
	// is the retry runner's: under two CPU hogs 1 of 10 runs still had one
	// due when the audit closed.
	h.waitUntil(t, time.Minute, "the retry runner drained", retryDrained(h.n.Retrier()))
	// Every active account folds to the truth. A dropped #account deletion
	// is not healed yet: listRepos does not list deleted accounts, and the
	// pass does not look for archived accounts missing from the listing.
	f, _, err := check.Archive(h.n.Store())
	if err != nil {
		t.Fatal(err)
	}
	active := func(a world.Account) bool { return a.Active }
	if checked, bad := check.Compare(f, net.World(), active); len(bad) > 0 {
		t.Fatalf("%d of %d active accounts differ after %d dropped frames:\n%s", len(bad), checked, net.Faults().Fired(oracle.FaultDroppedFrame), check.Describe(bad, 5))
	}
	if _, bad := check.Compare(f, net.World(), nil); len(bad) > 0 {
		t.Logf("known gap: %d deleted accounts still hold records (their dropped deletion is not healed):\n%s", len(bad), check.Describe(bad, 5))
	}
	evs, err := net.Events()
	if err != nil {
		t.Fatal(err)
	}
	touched := map[string]bool{}
	for _, e := range evs {
		touched[e.DID] = true
	}
	refetched := 0
	for did, c := range net.AllRepoCounts() {
		if !touched[did] && c.RelayRequests > 1 {
			t.Errorf("%s: getRepo %d times, but the traffic never changed it", did, c.RelayRequests)
		}
		if touched[did] && c.RelayRequests > 1 {
			refetched++
		}
	}
	t.Logf("%d frames dropped; %d changed accounts fetched again", net.Faults().Fired(oracle.FaultDroppedFrame), refetched)
}
