package crash_test

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/internal/procenv"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// compactionReset runs `backstream compaction reset` on the harness's data
// dir with extra environment and returns its output and exit error.
func compactionReset(t *testing.T, h *crash.Harness, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(h.Bin, "compaction", "reset", "--data-dir", h.DataDir)
	cmd.Env = procenv.Clean(env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// indexMarkers reads both index markers of a data dir no process holds.
func indexMarkers(t *testing.T, h *crash.Harness) (idx archive.IndexMarker, idxErr error, replay archive.IndexMarker, replayErr error) {
	t.Helper()
	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	idx, idxErr = s.IndexMarker()
	replay, replayErr = s.ReplayIndexMarker()
	return
}

// trafficUntil drives full traffic on net until the run p has archived
// events more and a compaction pass has run since, then stops it.
func trafficUntil(t *testing.T, h *crash.Harness, p *crash.Proc, seed int64, events int64) {
	t.Helper()
	st, _ := p.Status()
	passes := int64(0)
	if st.Compaction != nil {
		passes = st.Compaction.Passes
	}
	h.Traffic = crash.StartTraffic(h.Net, world.TrafficFull, seed, 200)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		st, ok := p.Status()
		if ok && h.Traffic.Events() >= events && st.Compaction != nil && st.Compaction.Passes > passes {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("traffic: %d events, passes %+v (exited %v):\n%s", h.Traffic.Events(), st.Compaction, p.Exited(), p.Tail())
		}
	}
	h.StopTraffic()
}

// TestCompactionResetCrash (C5's recovery): `backstream compaction reset`
// of a store whose index markers (meta/index and meta/index_replay) are
// malformed is SIGKILLed right after it dropped the compaction index
// (reset-index), before the replay index: the compaction index's marker
// then says every row is to be indexed, the replay marker is still
// malformed. Run again, the reset drops the replay index too. The next
// start rebuilds both from the rows; it is SIGKILLed after the compaction
// index backfill's first batch (index-fill-batch: the marker part way),
// and the start after that after its second index batch (the compaction
// index done, the replay index's first batch: its marker part way; the
// harness checks every replay index entry against the rows after each
// kill). The next run finishes the replay index, full traffic (updates,
// deletes, resets, account erasures of records the rebuild indexed) runs
// until a pass has removed what it superseded, and after convergence the
// rows left are exactly check.Survivors of every row either read saw,
// the watermark above the tip, the chain's subscriber and a fresh read
// from cursor 0 fold to the network's records, and so does the store.
func TestCompactionResetCrash(t *testing.T) {
	citest.Long(t, "a reset and an index rebuild killed in three places")
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 100, RecordsMean: 65, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 511})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: compactArgs, Subscribe: true, Settle: time.Second})
	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 3*time.Minute)
	trafficUntil(t, h, p, 512, 300)
	p = h.WaitConverged(p, 3*time.Minute)
	waitCompacted(t, p)
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Tail())
	}
	before, _ := storeRows(t, h.DataDir)
	if n := len(before); n <= archive.DefaultIndexFillRows || n > 2*archive.DefaultIndexFillRows {
		t.Fatalf("%d rows: the rebuild must take exactly 2 batches of %d", n, archive.DefaultIndexFillRows)
	}
	tip := before[len(before)-1].Seq

	// Both markers malformed.
	s, err := archive.Open(h.DataDir, archive.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{archive.KeyIndex, archive.KeyReplayIndex} {
		if err := s.DB().Set(k, []byte{0x01, 0x02}, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The reset, SIGKILLed between its two index drops.
	out, err := compactionReset(t, h, crashpoint.EnvVar+"="+crashpoint.ResetIndex)
	if !crash.Killed(err) {
		t.Fatalf("compaction reset armed at %s ended by %v, not SIGKILL:\n%s", crashpoint.ResetIndex, err, out)
	}
	idx, idxErr, _, replayErr := indexMarkers(t, h)
	if idxErr != nil || idx.Next != 1 || idx.End != tip+1 || !errors.Is(replayErr, archive.ErrMalformed) {
		t.Fatalf("after the kill: meta/index %+v (%v), meta/index_replay %v; want rows 1 to %d to index and the replay marker still malformed", idx, idxErr, replayErr, tip)
	}
	out, err = compactionReset(t, h)
	if err != nil || !strings.Contains(out, "the replay index's marker is malformed") {
		t.Fatalf("the reset run again: %v\n%s", err, out)
	}
	idx, idxErr, replay, replayErr := indexMarkers(t, h)
	if idxErr != nil || replayErr != nil || idx.Next != 1 || replay.Next != 1 || idx.End != tip+1 || replay.End != tip+1 {
		t.Fatalf("after the reset: meta/index %+v (%v), meta/index_replay %+v (%v); want both rows 1 to %d", idx, idxErr, replay, replayErr, tip)
	}

	// The rebuild at the next starts, SIGKILLed after a batch each time.
	h.KillRun(crash.AtPoint(crashpoint.IndexFillBatch))
	idx, idxErr, replay, replayErr = indexMarkers(t, h)
	if idxErr != nil || replayErr != nil || idx.Next <= 1 || idx.Done() || replay.Next != 1 {
		t.Fatalf("after the first batch: meta/index %+v (%v), meta/index_replay %+v (%v); want the compaction index part way, the replay index not begun", idx, idxErr, replay, replayErr)
	}
	h.KillRun(crash.AtPoint(crashpoint.IndexFillBatch + ":2"))
	idx, idxErr, replay, replayErr = indexMarkers(t, h)
	if idxErr != nil || replayErr != nil || !idx.Done() || replay.Next <= 1 || replay.Done() {
		t.Fatalf("after the second start's second batch: meta/index %+v (%v), meta/index_replay %+v (%v); want the compaction index done, the replay index part way", idx, idxErr, replay, replayErr)
	}

	p = h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	trafficUntil(t, h, p, 513, 300)
	p = h.WaitConverged(p, 3*time.Minute)
	end := waitCompacted(t, p)
	res := h.Finish(p)
	after, final := storeRows(t, h.DataDir)
	if final.Intent != nil || final.Watermark <= end {
		t.Fatalf("compaction after the rebuild: %+v, tip %d", final, end)
	}
	if err := check.CompareSurvivors(before, after, final.Watermark); err != nil {
		t.Fatal(err)
	}
	idx, idxErr, replay, replayErr = indexMarkers(t, h)
	if idxErr != nil || replayErr != nil || !idx.Done() || !replay.Done() {
		t.Fatalf("the indexes after convergence: meta/index %+v (%v), meta/index_replay %+v (%v)", idx, idxErr, replay, replayErr)
	}
	t.Logf("reset killed between its index drops and run again; the rebuild (%d rows) killed after its 1st and its 2nd start's 2nd batch; then %d rows, watermark %d over tip %d, survivors exact; %d events, fold = ground truth for %d accounts, the subscriber held %d",
		len(before), len(after), final.Watermark, end, res.Events, res.Checked, res.SubHeld)
}
