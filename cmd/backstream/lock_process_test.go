package main

// Process-level test of the store's lock: a second `backstream serve` on the
// data dir of a running one. Skipped under -short; archive's
// TestOpenLockedLeavesScratch is its in-process version.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
)

// TestSecondServeLeavesTheFirstAlone: a second serve on the same data dir
// used to empty scratch/ before it found the lock, deleting the downloads
// the first one was spilling there. It exits with the lock error, the first
// one's scratch file is intact, and the first one goes on to steady state.
func TestSecondServeLeavesTheFirstAlone(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 100, RecordsMean: 10, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 41})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	dir := t.TempDir()
	args := []string{"--backfill-workers", "2", "--capture-wait", "1s"}
	args = append(args, followArgs(net)...)
	first := startServe(t, bin, net.RelayURL(), dir, args...)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if r, ok := first.status(); ok && r.Phase != "" && r.Phase != "opening" {
			break
		}
		if first.Exited() || time.Now().After(deadline) {
			t.Fatalf("the first serve does not answer /status with its phase:\n%s", first.tail())
		}
	}
	spill := filepath.Join(dir, "data", archive.ScratchDir, "getRepo-spill.car")
	if err := os.WriteFile(spill, []byte("a download in progress"), 0o644); err != nil {
		t.Fatal(err)
	}

	second := startServe(t, bin, net.RelayURL(), dir, args...)
	err, ok := second.Wait(time.Minute)
	if !ok {
		t.Fatalf("the second serve is still running:\n%s", second.tail())
	}
	if err == nil || !strings.Contains(second.tail(), "another backstream process") {
		t.Fatalf("the second serve: %v, want the lock error:\n%s", err, second.tail())
	}
	if b, err := os.ReadFile(spill); err != nil || string(b) != "a download in progress" {
		t.Fatalf("the first serve's scratch file after the second start: %q, %v", b, err)
	}
	waitSteady(t, first, 2*time.Minute)
}
