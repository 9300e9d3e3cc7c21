package crash_test

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
)

// healArgs are the serve flags of the heal tests: quick repair and retry
// passes. The repair period is 1 s, not less: a pass also starts once the
// stream has been quiet for a period, and under load a pause of 100 ms
// inside the relay's replayed backlog would start it before the replay is
// in, fetching accounts these tests count exactly.
var healArgs = append(append([]string(nil), serveArgs...), "--repair-period", "1s",
	"--retry-scan-period", "200ms", "--retry-interval", "200ms", "--retry-max-delay", "1s")

// activeDIDs is the network's active accounts in DID order.
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

// waitLive waits for serve's live firehose connection (the relay's
// second, after capture's): a live stream that starts at the relay's tip
// misses every event emitted before it.
func waitLive(t *testing.T, net *oracle.Network, p *crash.Proc) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); net.FirehoseConnections() < 2; time.Sleep(10 * time.Millisecond) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("no live firehose connection (exited %v):\n%s", p.Exited(), p.Tail())
		}
	}
}

// liveEvent emits events for did until one is archived through the live
// stream (cursor/relay at the relay's head): a durable position to resume
// from.
func liveEvent(t *testing.T, net *oracle.Network, p *crash.Proc, did string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		emitOne(t, net, did)
		head := uint64(net.Status().Seq)
		for end := time.Now().Add(300 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			if st, ok := p.Status(); ok && st.RelayCursor() == head {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no event through the live stream:\n%s", p.Tail())
		}
	}
}

// waitGaps polls /status until cond holds for its gaps section.
func waitGaps(t *testing.T, p *crash.Proc, d time.Duration, what string, cond func(open, closed int) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if g, ok := readGaps(p.Listen); ok && cond(g.Gaps.Open, g.Gaps.Closed) {
			return
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("waiting for %s (exited %v):\n%s", what, p.Exited(), p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// storeGaps is the gaps of the harness's data dir (no process may hold it).
func storeGaps(t *testing.T, h *crash.Harness) []archive.Gap {
	t.Helper()
	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	gs, err := s.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// stoppedAfterLive starts a network with cfg and serve with args, runs
// serve to steady state with an event archived through its live stream
// (a durable position to resume from), and stops it (SIGTERM).
func stoppedAfterLive(t *testing.T, cfg oracle.Config, args []string) (*oracle.Network, *crash.Harness) {
	t.Helper()
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	net, err := oracle.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	h := crash.New(t, net, crash.Options{Args: args, Settle: time.Second})
	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	waitLive(t, net, p)
	dids := activeDIDs(net)
	liveEvent(t, net, p, dids[len(dids)-1])
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Tail())
	}
	return net, h
}

// restartHealed starts serve after an outage past the relay's replay
// window and checks the heal: one outdated_cursor gap, closed; the fold
// equal to the ground truth; getRepo once for each lost account and for no
// other since before. It returns the converged run's result and the
// getRepo calls since before.
func restartHealed(t *testing.T, h *crash.Harness, before map[string]oracle.RepoCount, lost []string) (crash.Result, map[string]int) {
	t.Helper()
	p := h.Start()
	waitGaps(t, p, 2*time.Minute, "the gap closed", func(open, closed int) bool { return open == 0 && closed == 1 })
	h.WaitConverged(p, 2*time.Minute)
	res := h.Finish(p)
	gs := storeGaps(t, h)
	if len(gs) != 1 || gs[0].Kind != archive.GapOutdatedCursor || gs[0].Open() {
		t.Fatalf("gaps %+v, want one closed outdated_cursor gap", gs)
	}
	fetched := h.Net.FetchedSince(before)
	if err := check.FetchedOnce(fetched, lost); err != nil {
		t.Error(err)
	}
	return res, fetched
}

// TestProcessHealOutdatedCursor: serve is stopped (SIGTERM) while 24
// accounts change on a relay whose replay window holds 8 events. The
// restart meets OutdatedCursor and a replay from the oldest retained event:
// before, the 16 commits in between were lost silently. Now one
// outdated_cursor gap is recorded, its repair pass marks exactly the
// accounts whose listed rev is newer than the archive's, the gap closes,
// the archive folds to the network's records, and getRepo was called once
// for each of the 16 and for no other account.
func TestProcessHealOutdatedCursor(t *testing.T) {
	net, h := stoppedAfterLive(t, oracle.Config{Accounts: 40, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 41, Retention: 8}, healArgs)
	dids := activeDIDs(net)

	before := net.AllRepoCounts()
	for _, did := range dids[:24] {
		emitOne(t, net, did)
	}
	lost := dids[:16] // out of the 8-event window; the last 8 are replayed whole

	start := time.Now()
	res, fetched := restartHealed(t, h, before, lost)
	healed := time.Since(start)
	t.Logf("outage past the replay window healed %v after the restart: %d events, fold = ground truth for %d accounts; getRepo for %d accounts (%d lost, %d not)",
		healed.Round(time.Millisecond), res.Events, res.Checked, len(fetched), len(lost), len(dids)-len(lost))
}

// TestProcessHealDroppedFrames: the relay silently drops 1% of its frames
// while traffic runs. A dropped commit followed by another of the same
// account is named by the next commit's since; one that was the account's
// last is announced by nothing, and only the scheduled audit
// (--audit-interval) finds it. After the traffic ends, an audit recorded
// after it closes, and every active account folds to the network's
// records (deleted and taken-down ones to nothing); after bootstrap,
// getRepo went only to accounts the traffic changed.
func TestProcessHealDroppedFrames(t *testing.T) {
	crash.Binary(t)
	events := 1500
	if testing.Short() {
		events = 800
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 150, RecordsMean: 3, Hosts: 1, Traffic: oracle.TrafficBasic, Rate: 400, Events: events, Seed: 43})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	net.Faults().DropFrames(0.01)
	args := append(append([]string(nil), healArgs...), "--audit-interval", "2s")
	h := crash.New(t, net, crash.Options{Args: args, Settle: time.Second})

	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	steady := net.AllRepoCounts() // bootstrap's getRepo calls are behind
	for deadline := time.Now().Add(2 * time.Minute); !net.Status().Done; time.Sleep(20 * time.Millisecond) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the traffic did not end (exited %v):\n%s", p.Exited(), p.Tail())
		}
	}
	net.Faults().DropFrames(0)
	dropped := net.Faults().Fired(oracle.FaultDroppedFrame)
	if dropped == 0 {
		t.Fatal("no frame dropped: the test proves nothing")
	}
	// One frame after the drops stop: when the traffic's last frames were
	// the dropped ones, the stream's cursor could never reach the relay's
	// head, and convergence (cursor/relay at the head) never came
	// ("no convergence within 2m0s" with every audit finding nothing).
	emitOne(t, net, activeDIDs(net)[0])
	doneAt := time.Now()
	// Every gap counted now was recorded before the traffic ended; one more
	// closed is an audit recorded after it.
	var open0, closed0 int
	waitGaps(t, p, time.Minute, "the gaps section", func(open, closed int) bool {
		open0, closed0 = open, closed
		return true
	})
	waitGaps(t, p, 2*time.Minute, "an audit after the traffic, closed", func(open, closed int) bool {
		return open == 0 && closed > open0+closed0
	})
	audited := time.Since(doneAt)
	h.WaitConverged(p, 2*time.Minute)
	m := waitReplaced(t, p, 2*time.Minute)
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Tail())
	}

	gs := storeGaps(t, h)
	audits := 0
	for _, g := range gs {
		if g.Kind == archive.GapAudit && time.UnixMicro(g.FirstSeenUS).After(doneAt) && !g.Open() {
			audits++
		}
	}
	if audits == 0 {
		t.Fatalf("no closed audit recorded after the traffic ended: gaps %+v", gs)
	}
	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, _, err := check.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	// Every active account, and every deleted or taken-down one (a dropped
	// #account frame is healed by the audit: listed inactive, or absent
	// from every listing and asked).
	if checked, bad := check.Compare(f, net.World(), nil); len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ after %d dropped frames (%v chain breaks found in capture, %v live):\n%s",
			len(bad), checked, dropped, m[`backstream_firehose_anomalies_total{kind="chain_break"}`], m["backstream_archive_chain_breaks_total"],
			check.Describe(bad, 5))
	}
	evs, err := net.Events()
	if err != nil {
		t.Fatal(err)
	}
	touched := map[string]bool{}
	for _, e := range evs {
		touched[e.DID] = true
	}
	fetched := net.FetchedSince(steady)
	calls, unchanged := 0, 0
	for did, n := range fetched {
		calls += n
		if !touched[did] {
			unchanged++
			t.Errorf("%s: getRepo %d times after bootstrap, but the traffic never changed it", did, n)
		}
	}
	t.Logf("%d events, %d frames dropped; an audit after the traffic closed %v after it; %d gaps recorded; after bootstrap getRepo %d calls for %d of the %d changed accounts and %d of the %d unchanged",
		len(evs), dropped, audited.Round(time.Millisecond), len(gs), calls, len(fetched)-unchanged, len(touched), unchanged, len(net.World().Accounts())-len(touched))
}

// waitReplaced waits until a candidate pass of the retry runner that
// started after the call found nothing due and no replacement runs or
// waits, and returns /metrics as then read.
func waitReplaced(t *testing.T, p *crash.Proc, d time.Duration) map[string]float64 {
	t.Helper()
	passes := metrics(t, p)["backstream_retry_passes_total"]
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		m := metrics(t, p)
		if m["backstream_retry_passes_total"] > passes+1 && crash.RetryIdle(m) {
			return m
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("replacements still due (exited %v): due %v, inflight %v, queued %v, parked hosts %v\n%s", p.Exited(),
				m["backstream_retry_due"], m["backstream_retry_inflight"], m["backstream_retry_queued"], m["backstream_retry_parked_hosts"], p.Tail())
		}
	}
}

// readyz is /readyz's status code (0 while not answering).
func readyz(p *crash.Proc) int {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.Listen + "/readyz")
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestProcessHealRelaySequenceRestart: the relay restarts its sequence
// while serve runs, and 6 accounts change before serve reconnects. Before,
// the consumer redialed its old cursor forever (FutureCursor) while the
// probes said ready. Now a future_cursor gap is recorded; while it is open
// /readyz answers 503 and /status's gaps section names it (its lagging
// reason and the open gap's kind); the stream follows the new sequence, the
// gap closes, /readyz is 200 again, the archive folds to the network's
// records, and getRepo went once to each account changed in the hole and
// to no other.
func TestProcessHealRelaySequenceRestart(t *testing.T) {
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 40, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: healArgs, Settle: time.Second})
	dids := activeDIDs(net)

	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	waitLive(t, net, p)
	// Live traffic first: the cursor ends well above the restarted relay's
	// head.
	for _, did := range dids[:20] {
		emitOne(t, net, did)
	}
	liveEvent(t, net, p, dids[len(dids)-1])
	old := uint64(net.Status().Seq)
	if code := readyz(p); code != http.StatusOK {
		t.Fatalf("/readyz %d before any gap:\n%s", code, p.Tail())
	}
	before := net.AllRepoCounts()

	start := time.Now()
	net.RestartSequence()
	changed := dids[5:11] // before serve reconnects: a real hole
	for _, did := range changed {
		emitOne(t, net, did)
	}
	var lagging, kinds string
	waitGaps(t, p, time.Minute, "the gap open, /readyz 503 and /status naming it", func(open, _ int) bool {
		if open == 0 || readyz(p) != http.StatusServiceUnavailable {
			return false
		}
		g, ok := readGaps(p.Listen)
		if !ok || len(g.Gaps.OpenGaps) == 0 {
			return false
		}
		lagging, kinds = g.Gaps.Lagging, g.Gaps.OpenGaps[0].Kind
		return true
	})
	if !strings.Contains(lagging, "gap") || kinds != archive.GapFutureCursor.String() {
		t.Errorf("/status while /readyz is 503: lagging %q, open gap kind %q; want the reason and a future_cursor gap", lagging, kinds)
	}
	// An event through the stream in the new sequence. If the consumer
	// resumes only once an event arrives, that account is in the hole too.
	liveEvent(t, net, p, dids[30])
	waitGaps(t, p, 2*time.Minute, "the gap closed", func(open, closed int) bool { return open == 0 && closed == 1 })
	healed := time.Since(start)
	for deadline := time.Now().Add(time.Minute); readyz(p) != http.StatusOK; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 after the gap closed:\n%s", p.Tail())
		}
	}
	h.WaitConverged(p, 2*time.Minute)
	res := h.Finish(p)

	gs := storeGaps(t, h)
	if len(gs) != 1 || gs[0].Kind != archive.GapFutureCursor || gs[0].FromSeq != old || gs[0].ToSeq == 0 || gs[0].ToSeq >= old || gs[0].Open() {
		t.Fatalf("gaps %+v, want one closed future_cursor gap from %d into the new sequence", gs, old)
	}
	fetched := net.FetchedSince(before)
	if fetched[dids[30]] == 1 {
		changed = append(changed, dids[30])
	}
	if err := check.FetchedOnce(fetched, changed); err != nil {
		t.Error(err)
	}
	t.Logf("relay sequence restart healed %v after it (/status said %q while /readyz was 503): %d events, fold = ground truth for %d accounts; getRepo for %d accounts (%d changed in the hole, %d not)",
		healed.Round(time.Millisecond), lagging, res.Events, res.Checked, len(fetched), len(changed), len(dids)-len(changed))
}
