package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/retry"
)

// lcRun runs a node over the store under /data on mem (hook may be nil)
// until it returns, or — when untilSteady — until steady state has caught
// up with the relay after its traffic ended and the retry runner has
// drained; it returns New's or Run's error and whether steady state was
// reached.
func lcRun(t *testing.T, net *oracle.Network, mem vfs.FS, hook func(string, [][]byte) error, untilSteady bool) (error, bool) {
	t.Helper()
	phases := make(chan archive.Phase, 8)
	cfg := sweepConfig(t, net, archive.Options{FS: mem, CommitHook: hook})
	cfg.OnPhase = func(p archive.Phase) { phases <- p }
	n, err := node.New(cfg)
	if err != nil {
		return err, false
	}
	defer closeAfterFault(n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	deadline := time.After(90 * time.Second)
	steady := false
	var conv convergence
	for {
		select {
		case err := <-done:
			return err, steady
		case p := <-phases:
			steady = steady || p == archive.PhaseSteadyState
		case <-deadline:
			t.Fatalf("lifecycle neither failed nor converged in 90 s (steady %v)", steady)
		case <-time.After(50 * time.Millisecond):
		}
		if !untilSteady || !steady {
			continue
		}
		if conv.reached(net, n.Store(), n.Retrier()) {
			cancel()
			return <-done, true
		}
	}
}

// convergence tells when a run over the simulated network has converged:
// its traffic is done, cursor/relay has caught up with it, two complete
// retry passes that started after the catch-up found nothing due (an earlier
// pass may predate the last marks), and no active repo is left for the
// runner: none failed or pending (a failure backing off is not due yet, but
// its account is not in the archive either) and none marked for a
// replacement.
type convergence struct{ caughtUpAt uint64 }

func (cv *convergence) reached(net *oracle.Network, store *archive.Store, retrier *retry.Runner) bool {
	st := net.Status()
	c, _ := store.RelayCursor()
	rs := retrier.Status()
	if !(st.Done && c == uint64(st.Seq)) {
		return false
	}
	if cv.caughtUpAt == 0 {
		cv.caughtUpAt = rs.Passes + 1
	}
	if rs.Passes < cv.caughtUpAt+2 || rs.Due != 0 || rs.InFlight != 0 {
		return false
	}
	left := false
	err := store.ScanRepos(func(_ string, r archive.RepoState) error {
		if r.Active && (r.Status == archive.StatusFailed || r.Status == archive.StatusPending || r.Refetch != archive.RefetchNone) {
			left = true
		}
		return nil
	})
	return err == nil && !left
}

// TestLifecycleCommitFaults (C3, C4, M1, M4, M7, R6): the
// n-th synced batch touching a key prefix fails somewhere in the lifecycle
// — the capture cursor, the listRepos checkpoint, a repo state, the phase
// change to merging, the merge cursor, the cleanup. Run stops with the
// injected error (never carries on over a lost batch); a restart without
// the fault reaches steady state, catches up, and the archive folds to the
// network's current records for every account.
func TestLifecycleCommitFaults(t *testing.T) {
	citest.Long(t, "lifecycle commit faults")
	for i, tc := range []struct {
		prefix string
		n      int
	}{
		{"cursor/relay", 1},     // capture's first unit: its start cursor
		{"cursor/relay", 40},    // capture under way
		{"cursor/listrepos", 1}, // bootstrap's first checkpoint
		{"repo/", 10},           // a completion
		{"meta/phase", 1},       // phase=merging (C3)
		{"cursor/merge", 1},     // the merge batch (M4; small worlds merge in one unit)
		{"meta/phase", 2},       // the cleanup batch (M7, C4)
	} {
		t.Run(fmt.Sprintf("%s#%d", tc.prefix, tc.n), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			net, err := oracle.Start(ctx, oracle.Config{Accounts: 60, RecordsMean: 8, Hosts: 2, Rate: 200, Events: 400, Traffic: oracle.TrafficFull, Seed: int64(300 + i)})
			if err != nil {
				t.Fatal(err)
			}
			defer net.Close()
			mem := vfs.NewMem()
			f := storefault.FailNthCommit(tc.prefix, tc.n)
			err, _ = lcRun(t, net, mem, f.Check, false)
			if f.Fired() != 1 {
				t.Fatalf("fault fired %d times (%d matching batches); Run: %v", f.Fired(), f.Seen(), err)
			}
			if err == nil || !errors.Is(err, storefault.ErrInjected) {
				t.Fatalf("Run over a failed %s commit: %v; want the injected fault", tc.prefix, err)
			}
			t.Logf("stopped: %v", err)
			err, steady := lcRun(t, net, mem, nil, true)
			if err != nil || !steady {
				t.Fatalf("restart: %v (steady %v)", err, steady)
			}
			events, checked := checkFold(t, mem, net, "a failed "+tc.prefix+" commit")
			t.Logf("converged: %d events, fold = ground truth for %d accounts", events, checked)
		})
	}
}
