package node_test

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
)

// TestCloseStopsARunningRun: Close called while Run is still running (its
// caller never cancelled it) stops Run's components and waits for Run to
// return before it closes the store, so no component reads a closed store;
// Run then returns nil. Before, the repair runner, polling every few
// milliseconds here, read the closed store: a nil Pebble DB panic.
func TestCloseStopsARunningRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 20, RecordsMean: 3, Hosts: 1, Traffic: oracle.TrafficBasic, Rate: 200, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	cfg := sweepConfig(t, net, archive.Options{})
	cfg.ScratchDir, cfg.DataDir = t.TempDir(), t.TempDir()
	cfg.RepairPeriod = time.Millisecond
	steady := make(chan struct{})
	cfg.OnPhase = func(p archive.Phase) {
		if p == archive.PhaseSteadyState {
			close(steady)
		}
	}
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- n.Run(context.Background()) }()
	select {
	case <-steady:
	case err := <-ran:
		t.Fatalf("run ended before steady state: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("no steady state within a minute")
	}
	if err := n.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-ran:
		if err != nil {
			t.Fatalf("run stopped by Close returned %v, want nil", err)
		}
	default:
		t.Fatal("Close returned while Run was still running")
	}
}

// TestCloseWaitsForTheCompactionPass: a stop while a compaction pass is in
// its reclaim — Pebble's manual compaction of the removed ranges, which no
// ctx interrupts — waits for the pass: when Close returns, nothing of the
// pass is left running over the closed store. Here the pass (the one at
// the end of merging, or an early one in steady state) is held in the
// manual compaction (sstable writes wait) while the stop begins. Before, Run gave up on the pass after
// StopGrace on every stop, not only after a disk fault, and Close closed
// the store under it: Pebble's Close waited for the flush, and the pass
// then stayed blocked for good in its next manual compaction, which a
// closed Pebble never schedules (or read the closed store).
func TestCloseWaitsForTheCompactionPass(t *testing.T) {
	ctx := t.Context()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 60, RecordsMean: 10, Hosts: 2, Rate: 300, Events: 600, Traffic: oracle.TrafficFull, Seed: 15})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	fault := &sstFault{release: make(chan struct{})}
	defer fault.unhold()
	logFile, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	const grace = 200 * time.Millisecond
	n, err := node.New(node.Config{
		DataDir: t.TempDir(), Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(),
		Store:     archive.Options{Logger: quiet, FS: fault.wrap(vfs.Default)},
		Bootstrap: bootstrap.Config{Workers: 8}, CaptureWait: 2 * time.Second,
		RetryInterval: 100 * time.Millisecond, RetryMaxDelay: 300 * time.Millisecond, RetryScanPeriod: 100 * time.Millisecond,
		CompactionInterval: -1, CompactionTombstones: 1, CompactionCheck: 50 * time.Millisecond, StopGrace: grace,
		Logger: slog.New(slog.NewTextHandler(logFile, nil)),
		OnPhase: func(p archive.Phase) {
			if p == archive.PhaseMerging {
				fault.hold.Store(true) // a pass's reclaim is the next sstable written
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	node.SetCompactionReclaimBytes(n, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- n.Run(rctx) }()
	if !waitStacks(2*time.Minute, func(s string) bool { return strings.Contains(s, "(*compactPass).reclaim(") }) {
		fault.unhold()
		t.Fatalf("no compaction pass reached its reclaim within 2 minutes")
	}
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- n.Close() }()
	// Let the sstables be written once Close is closing Pebble, or after
	// a few graces if it waits for the pass instead.
	waitStacks(5*grace, func(s string) bool { return strings.Contains(s, "pebble.(*DB).Close(") })
	fault.unhold()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return within 30 s of the sstables being written")
	}
	if err := <-ran; err != nil {
		t.Fatalf("Run: %v", err)
	}
	left := func(s string) bool {
		return strings.Contains(s, "archive.(*Store).Compact(") || strings.Contains(s, "node.(*compactor).Run(")
	}
	if waitStacks(5*time.Second, func(s string) bool { return !left(s) }) {
		return
	}
	log, _ := os.ReadFile(logFile.Name())
	t.Fatalf("the compaction pass is still running after Close returned:\n%s\nlog:\n%s", passStacks(left), log)
}

// waitStacks polls every goroutine's stack until ok holds of their dump,
// for at most d; it reports whether it did.
func waitStacks(d time.Duration, ok func(string) bool) bool {
	buf := make([]byte, 8<<20)
	for deadline := time.Now().Add(d); ; time.Sleep(10 * time.Millisecond) {
		if ok(string(buf[:runtime.Stack(buf, true)])) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// passStacks is the goroutines of the dump that match.
func passStacks(match func(string) bool) string {
	buf := make([]byte, 8<<20)
	var out []string
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if match(g) {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
