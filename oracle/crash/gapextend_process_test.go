package crash_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// Repair periods per run, through the flag's variable: a long one keeps a
// recorded gap's pass from beginning (the runner looks at the gaps at start
// and then once a period), so a later hole extends it; a short one lets it
// run.
const (
	repairHeld = "BACKSTREAM_REPAIR_PERIOD=10m"
	repairNow  = "BACKSTREAM_REPAIR_PERIOD=1s"
)

// emitted records the relay seqs of the events a test emitted (the relay's
// history keeps only its retention window).
type emitted map[int64]string

// one makes one new record for did and records its seq.
func (e emitted) one(t *testing.T, net *oracle.Network, did string) {
	t.Helper()
	em, err := net.Emit(func(w *world.World) (world.Event, error) {
		return w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "x", "createdAt": "2024-01-01T00:00:00Z"})
	})
	if err != nil {
		t.Fatal(err)
	}
	e[em.Seq] = did
}

// checkCursorCovered reads a killed run's store: every relay event at or
// below cursor/relay (those the test emitted, and the relay's retained
// history) has its row durable, unless a gap row covers it (after its
// FromSeq and before its ToSeq; to the end when ToSeq is 0). The relay's
// sequence must not have restarted (seqs are compared as one sequence).
func checkCursorCovered(t *testing.T, h *crash.Harness, sent emitted) uint64 {
	t.Helper()
	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cur, err := s.RelayCursor()
	if err != nil {
		t.Fatalf("cursor/relay after the kill: %v", err)
	}
	rows, err := check.Rows(s)
	if err != nil {
		t.Fatal(err)
	}
	durable := map[int64]bool{}
	for _, ev := range rows {
		if ev.UpstreamSeq > 0 {
			durable[ev.UpstreamSeq] = true
		}
	}
	gs, err := s.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	evs, err := h.Net.Events()
	if err != nil {
		t.Fatal(err)
	}
	all := map[int64]string{}
	for _, ev := range evs {
		all[ev.Seq] = ev.DID
	}
	for seq, did := range sent {
		all[seq] = did
	}
	checked := 0
	for seq, did := range all {
		if seq > int64(cur) || durable[seq] {
			continue
		}
		checked++
		covered := false
		for _, g := range gs {
			if uint64(seq) > g.FromSeq && (g.ToSeq == 0 || uint64(seq) < g.ToSeq) {
				covered = true
			}
		}
		if !covered {
			t.Fatalf("cursor/relay %d is durable past relay seq %d (%s), whose row is not and which no gap covers (gaps %+v)", cur, seq, did, gs)
		}
	}
	if checked == 0 {
		t.Fatalf("no relay event at or below cursor/relay %d lacks its row: the check is vacuous", cur)
	}
	return cur
}

// TestGapExtensionCrash (G1, G2): two holes in one run extend one gap row,
// and SIGKILLs at the instants that matter lose nothing. Serve is stopped
// while 25 accounts change on a relay whose replay window holds 10 events
// (15 commits lost: OutdatedCursor at the restart). The restart records the
// gap; its repair pass is held back (a 10-minute repair period), and the
// relay then drops 5 frames (5 more accounts' commits lost: a seq skip
// above --gap-threshold 3). The frame after them extends the waiting gap's
// row instead of adding one, and the run is SIGKILLed as soon as
// cursor/relay is durable at it: the store holds exactly one open gap, from
// the first hole's FromSeq to that frame, no pass begun (no audit row), and
// no relay event at or below cursor/relay lacks its row without the gap
// covering it. The next run (repair period 1 s, traffic running so the
// stream catches up past the gap) is SIGKILLed right after its pass's
// first durable page (repair-page); the run after resumes the pass, the
// gap closes, no other gap is open, every lost account was fetched again,
// and the archive folds to the network's records.
func TestGapExtensionCrash(t *testing.T) {
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 60, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 73, Retention: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	args := append(append([]string(nil), serveArgs...), "--gap-threshold", "3")
	h := crash.New(t, net, crash.Options{Args: args, Settle: time.Second})
	dids := activeDIDs(net)

	p := h.Start(repairHeld)
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	waitLive(t, net, p)
	liveEvent(t, net, p, dids[len(dids)-1])
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Tail())
	}
	from := uint64(net.Status().Seq) // cursor/relay at the stop

	// Hole 1: past the replay window while serve is down.
	before := net.AllRepoCounts()
	sent := emitted{}
	for _, did := range dids[:25] {
		sent.one(t, net, did)
	}
	lost := append([]string(nil), dids[:15]...)
	p = h.Start(repairHeld)
	head := uint64(net.Status().Seq)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		g, gok := readGaps(p.Listen)
		st, ok := p.Status()
		if gok && ok && g.Gaps.Open == 1 && st.RelayCursor() == head {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the first hole's gap and the replayed window never durable (exited %v):\n%s", p.Exited(), p.Tail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Hole 2: the relay drops 5 frames; the next one extends the gap.
	// The relay sends frames on its own goroutine: the fault stays on until
	// it has swallowed all 5 (serve's live stream is the only subscriber).
	dropped := net.Faults().Fired(oracle.FaultDroppedFrame)
	net.Faults().DropFrames(1)
	for _, did := range dids[25:30] {
		sent.one(t, net, did)
	}
	for deadline := time.Now().Add(time.Minute); net.Faults().Fired(oracle.FaultDroppedFrame) < dropped+5; time.Sleep(5 * time.Millisecond) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the relay dropped %d of the 5 frames (exited %v):\n%s", net.Faults().Fired(oracle.FaultDroppedFrame)-dropped, p.Exited(), p.Tail())
		}
	}
	net.Faults().DropFrames(0)
	lost = append(lost, dids[25:30]...)
	sent.one(t, net, dids[30])
	head = uint64(net.Status().Seq)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		if st, ok := p.Status(); ok && st.RelayCursor() == head {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the frame after the second hole never durable (exited %v):\n%s", p.Exited(), p.Tail())
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	cur := checkCursorCovered(t, h, sent)
	gs := storeGaps(t, h)
	if len(gs) != 1 || !gs[0].Open() || gs[0].Kind != archive.GapOutdatedCursor || gs[0].FromSeq != from || gs[0].ToSeq != head {
		t.Fatalf("gaps after the kill %+v; want one open outdated_cursor gap from %d to %d (the second hole extending the first)", gs, from, head)
	}
	func() {
		s, err := crash.OpenStore(h.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if a, err := s.Audit(gs[0].ID); !errors.Is(err, archive.ErrNotFound) {
			t.Fatalf("the gap's pass had begun before the kill (audit %+v, %v): the extension is not what was killed", a, err)
		}
	}()

	// The pass of the extended gap, SIGKILLed after its first page.
	h.Traffic = crash.StartTraffic(net, world.TrafficBasic, 74, 20)
	h.KillRun(crash.Kill{Kind: crash.KillPoint, Point: crashpoint.RepairPage, Env: []string{repairNow}})
	h.StopTraffic()

	p = h.Start(repairNow)
	waitGaps(t, p, 2*time.Minute, "every gap closed", func(open, closed int) bool { return open == 0 && closed >= 1 })
	h.WaitConverged(p, 2*time.Minute)
	res := h.Finish(p)
	gs = storeGaps(t, h)
	for _, g := range gs {
		if g.Open() {
			t.Fatalf("gap %+v still open", g)
		}
	}
	fetched := net.FetchedSince(before)
	for _, did := range lost {
		if fetched[did] == 0 {
			t.Errorf("%s lost a commit in a hole and was never fetched again", did)
		}
	}
	t.Logf("two holes, one gap row (%d..%d, cursor/relay %d at the kill); its pass killed after its first page and resumed; %d gap rows in the end, all closed; %d events, fold = ground truth for %d accounts; %d accounts fetched",
		from, head, cur, len(gs), res.Events, res.Checked, len(fetched))
}
