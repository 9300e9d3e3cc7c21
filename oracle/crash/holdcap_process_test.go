package crash_test

import (
	"strings"
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

// TestHoldCapTakedownCrash (S5): while a replacement holds an account (held
// right after its sync row by repo-chunk:1:hold), the account's live
// commits wait behind it until they pass the per-account hold cap (4 MiB:
// large creates, then deletes until the writer drops one), and then the
// account is taken down. The takedown's unit ends the hold and goes at
// once with every unit waiting for it (endFor); serve is SIGKILLed as soon
// as cursor/relay is durable at the takedown's seq. The killed store holds
// the takedown's account row and the row of every event at or below
// cursor/relay except exactly the rows the writer dropped at the cap
// (backstream_archive_hold_dropped_rows_total). The restart converges: the
// taken-down account folds to nothing, every other account to its
// records.
func TestHoldCapTakedownCrash(t *testing.T) {
	citest.Long(t, "4 MiB of live units behind a held replacement, killed")
	net, h := stoppedAfterLive(t, oracle.Config{Accounts: 20, RecordsMean: 10, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 95}, healArgs)
	tgt := activeDIDs(net)[0]
	if _, err := net.Emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(tgt, 600) }); err != nil {
		t.Fatal(err)
	}
	head := uint64(net.Status().Seq)
	p := h.Start(crashpoint.EnvVar + "=" + crashpoint.RepoChunk + ":1:hold")
	waitLog(t, p, "crashpoint: holding at "+crashpoint.RepoChunk, 2*time.Minute)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		if st, ok := p.Status(); ok && st.RelayCursor() == head {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the #sync never durable (exited %v):\n%s", p.Exited(), p.Tail())
		}
	}
	sent := emitted{}
	// taken waits until the writer has taken n units of tgt: each waits or
	// loses its rows at the cap.
	taken := func(n int) float64 {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(5 * time.Millisecond) {
			held, dropped := heldUnits(p), metricValue(p, "backstream_archive_hold_dropped_rows_total")
			if held+dropped == float64(n) {
				return dropped
			}
			if p.Exited() || time.Now().After(deadline) {
				t.Fatalf("%d units of %s sent: %v wait, %v rows dropped (exited %v):\n%s", n, tgt, held, dropped, p.Exited(), p.Tail())
			}
		}
	}
	big := strings.Repeat("x", 60_000)
	n := 0
	for {
		em, err := net.Emit(func(w *world.World) (world.Event, error) {
			return w.CreateRecord(tgt, "com.example.blob", "", map[string]any{"$type": "com.example.blob", "text": big})
		})
		if err != nil {
			t.Fatal(err)
		}
		sent[em.Seq], n = tgt, n+1
		if taken(n) > 0 {
			break
		}
	}
	var paths []string
	for path := range net.World().Records(tgt) {
		if strings.HasPrefix(path, "app.") {
			paths = append(paths, path)
		}
	}
	for dropped := 1.0; dropped < 2; {
		if len(paths) == 0 {
			t.Fatal("no record left to delete before the cap")
		}
		path := paths[0]
		paths = paths[1:]
		em, err := net.Emit(func(w *world.World) (world.Event, error) { return w.DeleteRecord(tgt, path) })
		if err != nil {
			t.Fatal(err)
		}
		sent[em.Seq], n = tgt, n+1
		dropped = taken(n)
	}
	waiting := heldUnits(p)
	down, err := net.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(tgt, world.StatusTakendown) })
	if err != nil {
		t.Fatal(err)
	}
	sent[down.Seq] = tgt
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
		if st, ok := p.Status(); ok && st.RelayCursor() == uint64(down.Seq) {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("cursor/relay never reached the takedown's seq %d: its unit did not end the hold and release the %v units waiting (exited %v):\n%s", down.Seq, heldUnits(p), p.Exited(), p.Tail())
		}
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}

	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	cur, err := s.RelayCursor()
	if err != nil {
		t.Fatal(err)
	}
	rows, err := check.Rows(s)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	durable, takedown := map[int64]bool{}, false
	for _, r := range rows {
		durable[r.UpstreamSeq] = true
		takedown = takedown || r.DID == tgt && r.Kind == archive.KindAccount && r.UpstreamSeq == down.Seq
	}
	missing := 0
	for seq := range sent {
		if seq <= int64(cur) && !durable[seq] {
			missing++
		}
	}
	if cur != uint64(down.Seq) || !takedown || missing != 2 {
		t.Fatalf("killed once cursor/relay reached the takedown (seq %d): cursor/relay %d, takedown row durable %v, %d of %d events at or below it without a row; want exactly the 2 the writer dropped at the cap",
			down.Seq, cur, takedown, missing, len(sent))
	}
	t.Logf("%d live units of %s (%v waiting, 2 dropped at the cap), then its takedown: killed with cursor/relay %d, every waiting row and the takedown durable", n, tgt, waiting, cur)

	p = h.Converge(3 * time.Minute)
	res := h.Finish(p)
	t.Logf("%d events, fold = ground truth for %d accounts", res.Events, res.Checked)
}
