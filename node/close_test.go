package node_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
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
