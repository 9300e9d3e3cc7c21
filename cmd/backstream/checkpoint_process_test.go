package main

// Process-level test of online backup: a real `backstream serve` following
// the simulated network under live traffic is checkpointed by a real
// `backstream checkpoint --admin-listen`; the checkpoint is then read by `status`,
// compared event by event with the live store, and restored by running
// `serve` on it. Skipped under -short.

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/procenv"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
)

func TestCheckpointLiveServe(t *testing.T) {
	citest.Long(t, "process-level checkpoint test")
	bin := buildBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 200, RecordsMean: 20, Hosts: 2, Rate: 300, Events: 9000, Traffic: oracle.TrafficBasic, Seed: 31})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	liveDir, ckBase := t.TempDir(), t.TempDir()
	args := []string{"--backup-dir", ckBase, "--backfill-workers", "8", "--capture-wait", "3s", "--retry-interval", "200ms", "--retry-max-delay", "1s", "--retry-scan-period", "300ms"}
	args = append(args, followArgs(net)...)
	p := startServe(t, bin, net.RelayURL(), liveDir, args...)
	rep := waitSteady(t, p, 2*time.Minute)

	// Live events are arriving.
	waitTip := func(above uint64) uint64 {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			if r, ok := p.status(); ok && r.Archive.TipSeq > above {
				return r.Archive.TipSeq
			}
			if time.Now().After(deadline) {
				t.Fatalf("the archive tip stays at or below %d:\n%s", above, p.tail())
			}
		}
	}
	before := waitTip(rep.Archive.TipSeq + 100)

	ck := filepath.Join(ckBase, "data") // a data dir that startServe(ckBase) finds
	cmd := exec.Command(bin, "checkpoint", "--admin-listen", p.admin, "--to", ck, "--json")
	cmd.Env = procenv.Clean()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("checkpoint: %v\n%s\n%s", err, out, exitStderr(err))
	}
	var res checkpointResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.Phase != "steady_state" || res.TipSeq < before {
		t.Fatalf("checkpoint %+v: want steady_state and a tip from %d on", res, before)
	}
	// /status is cached for up to a second: the live archive's report that
	// has caught up with the checkpoint (the event-by-event comparison below
	// proves the checkpoint a prefix of the live store).
	var after statusReport
	for deadline := time.Now().Add(time.Minute); after.Archive.TipSeq < res.TipSeq; time.Sleep(20 * time.Millisecond) {
		after, _ = p.status()
		if time.Now().After(deadline) {
			t.Fatalf("the live tip stays below the checkpoint's %d:\n%s", res.TipSeq, p.tail())
		}
	}
	liveTip := waitTip(res.TipSeq + 100) // serve goes on archiving after the checkpoint
	t.Logf("checkpoint of a running serve at tip %d in %.3fs (tip before %d, live went on to %d)", res.TipSeq, res.Seconds, before, liveTip)

	// `backstream status` reads the checkpoint as a data dir.
	cmd = exec.Command(bin, "status", "--data-dir", ck, "--json")
	cmd.Env = procenv.Clean()
	out, err = cmd.Output()
	if err != nil {
		t.Fatalf("status of the checkpoint: %v\n%s", err, exitStderr(err))
	}
	var st statusReport
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if st.Phase != "steady_state" || st.Archive.TipSeq != res.TipSeq || st.Cursors.Relay == nil || st.Repos["total"] != after.Repos["total"] {
		t.Fatalf("status of the checkpoint: %s", out)
	}

	// Every event of the checkpoint equals the live store's at its seq.
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.tail())
	}
	live, ckStore := readStore(t, liveDir), readStore(t, ckBase)
	li, _ := live.Instance()
	if ci, err := ckStore.Instance(); err != nil || ci != li {
		t.Fatalf("checkpoint instance %x (%v), live %x", ci, err, li)
	}
	if n := compareCheckpoint(t, ckStore, live); n != res.TipSeq {
		t.Fatalf("checkpoint holds %d events, reported tip %d", n, res.TipSeq)
	}
	live.Close()
	ckStore.Close()

	// Restore: serve on the checkpoint resumes from its relay cursor and
	// converges to the network's records, like the original would.
	p2 := startServe(t, bin, net.RelayURL(), ckBase, args...)
	waitConverged(t, p2, net, 3*time.Minute)
	p2.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-p2.done; err != nil {
		t.Fatalf("SIGTERM of the restored serve: %v\n%s", err, p2.tail())
	}
	s := readStore(t, ckBase)
	defer s.Close()
	fold, stats, err := check.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	checked, bad := check.Compare(fold, net.World(), nil)
	if len(bad) > 0 {
		t.Fatalf("restored archive: %d of %d accounts differ:\n%s", len(bad), checked, check.Describe(bad, 10))
	}
	t.Logf("restored from the checkpoint: %d events, fold = ground truth for %d accounts", stats.Events, checked)
}

// exitStderr is the stderr of a failed exec.Cmd.Output.
func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
