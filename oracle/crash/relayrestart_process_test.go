package crash_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// heldUnits reads backstream_archive_held_units from the admin listener
// (-1 when it does not answer).
func heldUnits(p *crash.Proc) float64 { return metricValue(p, "backstream_archive_held_units") }

// metricValue reads an unlabelled metric from p's admin listener (-1 when
// it does not answer or has no such metric).
func metricValue(p *crash.Proc, name string) float64 {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.Admin + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return -1
			}
			return f
		}
	}
	return -1
}

// gapRows is the open gaps /status lists, with their seqs.
type gapRows struct {
	Gaps *struct {
		List []struct {
			ID    uint64 `json:"id"`
			ToSeq uint64 `json:"to_seq"`
		} `json:"open_gaps"`
	} `json:"gaps"`
}

func readGapRows(listen string) (gapRows, bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + listen + "/status")
	if err != nil {
		return gapRows{}, false
	}
	defer resp.Body.Close()
	var r gapRows
	return r, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&r) == nil && r.Gaps != nil
}

// waitLog waits until p's log holds line.
func waitLog(t *testing.T, p *crash.Proc, line string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(p.Log); err == nil && strings.Contains(string(b), line) {
			return
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("no %q in the log (exited %v):\n%s", line, p.Exited(), p.Tail())
		}
	}
}

// emitCommit makes one new record for did and returns its event.
func emitCommit(t *testing.T, net *oracle.Network, did, text string) oracle.Emitted {
	t.Helper()
	em, err := net.Emit(func(w *world.World) (world.Event, error) {
		return w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": text, "createdAt": "2024-01-01T00:00:00Z"})
	})
	if err != nil {
		t.Fatal(err)
	}
	return em
}

// restartDuringHold starts serve (stopped, with an old sequence of 40
// frames of other and a #sync of tgt waiting at the relay) armed to hold
// the replacement of tgt right after its first unit is durable (the
// account held), then emits a commit of tgt (it waits behind the
// replacement), restarts the relay's sequence, and emits a commit of other
// as the new sequence's first frame. It returns once the unit resetting
// cursor/relay (that frame's, with the restart's gap) is durable: /status
// lists the gap up to that frame, and cursor/relay is still just below
// the waiting commit, in the old sequence. The replacement still holds.
func restartDuringHold(t *testing.T, h *crash.Harness, tgt, other string) (p *crash.Proc, held, first oracle.Emitted) {
	t.Helper()
	net := h.Net
	for i := 0; i < 40; i++ {
		emitOne(t, net, other)
	}
	if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(tgt, 300) }); err != nil {
		t.Fatal(err)
	}
	oldHead := uint64(net.Status().Seq)
	// The run's first replacement chunk is tgt's sync row: no other
	// replacement is due after convergence.
	p = h.Start(crashpoint.EnvVar + "=" + crashpoint.RepoChunk + ":1:hold")
	waitLog(t, p, "crashpoint: holding at "+crashpoint.RepoChunk, 2*time.Minute)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if st, ok := p.Status(); ok && st.RelayCursor() == oldHead {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the old sequence never durable up to %d (exited %v):\n%s", oldHead, p.Exited(), p.Tail())
		}
	}
	held = emitCommit(t, net, tgt, "held")
	for deadline := time.Now().Add(time.Minute); heldUnits(p) < 1; time.Sleep(10 * time.Millisecond) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the commit of %s never waited behind its replacement (exited %v):\n%s", tgt, p.Exited(), p.Tail())
		}
	}
	gapsBefore := 0
	if g, ok := readGapRows(p.Listen); ok {
		gapsBefore = len(g.Gaps.List)
	}
	conns := net.FirehoseConnections()
	net.RestartSequence()
	// The consumer re-dials, hears FutureCursor, records the gap on its
	// own and follows the new tip.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if g, ok := readGapRows(p.Listen); ok && len(g.Gaps.List) > gapsBefore && net.FirehoseConnections() > conns {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the consumer never recorded the restart's gap and followed the new tip (exited %v):\n%s", p.Exited(), p.Tail())
		}
	}
	first = emitCommit(t, net, other, "new")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
		g, ok := readGapRows(p.Listen)
		done := false
		for _, r := range g.Gaps.List {
			done = done || ok && r.ToSeq == uint64(first.Seq)
		}
		if done {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the unit resetting cursor/relay (seq %d of the new sequence) never durable (exited %v):\n%s", first.Seq, p.Exited(), p.Tail())
		}
	}
	if n := heldUnits(p); n < 1 {
		t.Fatalf("the replacement no longer holds (%v units wait): the hold point did not hold it", n)
	}
	return p, held, first
}

// killedStore reads what a killed run left: cursor/relay, whether the row
// of ev is durable (a row of its DID from its relay seq), the gaps.
func killedStore(t *testing.T, h *crash.Harness, ev oracle.Emitted, other oracle.Emitted) (cur uint64, evDurable, otherDurable bool, gs []archive.Gap) {
	t.Helper()
	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cur, err = s.RelayCursor(); err != nil {
		t.Fatal(err)
	}
	rows, err := check.Rows(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Source != archive.SourceLive {
			continue
		}
		if r.DID == ev.DID && r.UpstreamSeq == ev.Seq && r.Rev == ev.Commit.Rev {
			evDurable = true
		}
		if r.DID == other.DID && r.UpstreamSeq == other.Seq && r.Rev == other.Commit.Rev {
			otherDurable = true
		}
	}
	if gs, err = s.Gaps(); err != nil {
		t.Fatal(err)
	}
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatal(err)
	}
	return cur, evDurable, otherDurable, gs
}

// healAfter starts serve after a kill, lets the stream catch up (traffic
// starts only once the consumer streams: after kill 1 it re-dials the old
// sequence's cursor and must hear FutureCursor, so the new sequence stays
// below that cursor until then), and waits until every gap closed and the
// run converged.
func healAfter(t *testing.T, h *crash.Harness, seed int64) *crash.Proc {
	t.Helper()
	conns := h.Net.FirehoseConnections()
	p := h.Start()
	for deadline := time.Now().Add(time.Minute); h.Net.FirehoseConnections() <= conns; time.Sleep(10 * time.Millisecond) {
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("no firehose connection after the restart (exited %v):\n%s", p.Exited(), p.Tail())
		}
	}
	h.Traffic = crash.StartTraffic(h.Net, world.TrafficBasic, seed, 20)
	waitGaps(t, p, 2*time.Minute, "every gap closed", func(open, closed int) bool { return open == 0 && closed >= 1 })
	h.StopTraffic()
	return h.WaitConverged(p, 3*time.Minute)
}

// TestRelayRestartMidReplacementCrash (S5, G1, C1): the relay restarts its
// sequence while a whole-repo replacement holds an account whose live
// commit of the old sequence waits behind it (the replacement held right
// after its first unit by the repo-chunk point's hold mode, the rest of
// the process going on), and serve is SIGKILLed at the instants that
// matter. First right after the unit resetting cursor/relay is durable
// (the new sequence's first frame, another account's commit, with the
// restart's gap) while the old sequence's commit still waits: that commit
// is not durable, cursor/relay is exactly the seq before it, in the old
// sequence, the reset's gap row and the new frame's row are durable. The
// restart re-dials the old cursor, hears the restart again, records a
// gap; every gap closes and the run converges. Then the same with another
// account, the hold released: the run is SIGKILLed as soon as /status
// shows cursor/relay leave the old sequence; the waiting commit's row must
// be durable by then, and cursor/relay in the new sequence (at most its
// head), not a position of the old one. The last run closes every gap; the chain's
// archive folds to the network's records.
func TestRelayRestartMidReplacementCrash(t *testing.T) {
	citest.Long(t, "two relay restarts during held replacements, killed")
	net, h := stoppedAfterLive(t, oracle.Config{Accounts: 30, RecordsMean: 10, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 91}, healArgs)
	dids := activeDIDs(net)

	// 1. SIGKILL while the old sequence's commit waits and the reset is
	// durable.
	p, held, first := restartDuringHold(t, h, dids[0], dids[1])
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	cur, heldDurable, firstDurable, gs := killedStore(t, h, held, first)
	resetGap := false
	for _, g := range gs {
		resetGap = resetGap || g.Open() && g.ToSeq == uint64(first.Seq)
	}
	if heldDurable || cur != uint64(held.Seq-1) || !firstDurable || !resetGap {
		t.Fatalf("killed while seq %d of the old sequence waits, after the reset's unit (seq %d of the new): cursor/relay %d, waiting row durable %v, new frame's row durable %v, gaps %+v; want cursor/relay %d, the waiting row not durable, the new frame's row and its gap durable",
			held.Seq, first.Seq, cur, heldDurable, firstDurable, gs, held.Seq-1)
	}
	t.Logf("kill 1: cursor/relay %d in the old sequence below the waiting seq %d; the reset's gap and the new sequence's seq %d durable", cur, held.Seq, first.Seq)
	p = healAfter(t, h, 92)
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Tail())
	}

	// 2. The hold released: SIGKILL as soon as cursor/relay leaves the old
	// sequence.
	p, held, first = restartDuringHold(t, h, dids[2], dids[3])
	if err := p.Cmd.Process.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
		if st, ok := p.Status(); ok && st.RelayCursor() != uint64(held.Seq-1) {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("cursor/relay never left the old sequence after the release (exited %v):\n%s", p.Exited(), p.Tail())
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	newHead := uint64(net.Status().Seq)
	cur, heldDurable, firstDurable, gs = killedStore(t, h, held, first)
	if !heldDurable || !firstDurable || cur < uint64(first.Seq) || cur > newHead {
		t.Fatalf("killed once cursor/relay left the old sequence: cursor/relay %d, want in the new sequence (%d to its head %d); the old sequence's waiting row (seq %d) durable %v, the new frame's %v, gaps %+v",
			cur, first.Seq, newHead, held.Seq, heldDurable, firstDurable, gs)
	}
	t.Logf("kill 2: cursor/relay %d in the new sequence, the old sequence's seq %d durable", cur, held.Seq)
	p = healAfter(t, h, 93)
	res := h.Finish(p)
	t.Logf("%d gap rows, all closed; %d events, fold = ground truth for %d accounts", len(storeGaps(t, h)), res.Events, res.Checked)
}
