package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/upstream"
)

// lcRun runs the lifecycle over the store under /data on mem (hook may be
// nil) until it returns, or — when untilSteady — until steady state has
// caught up with the relay after its traffic ended and the retry runner
// has drained; it returns Run's error and whether steady state was reached.
func lcRun(t *testing.T, net *oracle.Network, mem vfs.FS, hook func(string, [][]byte) error, untilSteady bool) (error, bool) {
	t.Helper()
	store, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet, CommitHook: hook,
		OnFatal: func(fe *archive.FatalError) { panic(fe) }, CacheSize: 8 << 20})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer func() {
		defer func() { recover() }() // Pebble may panic closing after a fatal write
		store.Close()
	}()
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	defer w.Close()
	client, err := upstream.New(net.RelayURL(), upstream.Options{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	jobs, _ := backfill.NewRunner(backfill.Options{Source: client, Writer: w, Logger: quiet, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	backoff := retry.Backoff{Interval: 100 * time.Millisecond, MaxDelay: 300 * time.Millisecond}
	retryJobs, _ := backfill.NewRunner(backoff.JobOptions(backfill.Options{Source: client, Writer: w, Logger: quiet}))
	retrier, err := retry.New(retry.Config{Store: store, Writer: w, Jobs: retryJobs, Interval: backoff.Interval, MaxDelay: backoff.MaxDelay, ScanPeriod: 100 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	phases := make(chan archive.Phase, 8)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{Store: store, Writer: w, Relay: net.RelayURL(), Source: client, Jobs: jobs,
			Bootstrap: bootstrap.Config{Workers: 8}, CaptureWait: 2 * time.Second, Logger: quiet,
			OnPhase: func(p archive.Phase) { phases <- p }, Steady: []func(context.Context) error{retrier.Run}})
	}()
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
		if conv.reached(net, store, retrier) {
			cancel()
			return <-done, true
		}
	}
}

// convergence tells when a run over the simulated network has converged:
// its traffic is done, cursor/relay has caught up with it, and two complete
// retry passes that started after the catch-up found nothing due (an earlier
// pass may predate the last marks).
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
	return rs.Passes >= cv.caughtUpAt+2 && rs.Due == 0 && rs.InFlight == 0
}

// TestLifecycleCommitFaults (issue 8 item 3; C3, C4, M1, M4, M7, R6): the
// n-th synced batch touching a key prefix fails somewhere in the lifecycle
// — the capture cursor, the listRepos checkpoint, a repo state, the phase
// change to merging, the merge cursor, the cleanup. Run stops with the
// injected error (never carries on over a lost batch); a restart without
// the fault reaches steady state, catches up, and the archive folds to the
// network's current records for every account.
func TestLifecycleCommitFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("lifecycle commit faults: skipped under -short")
	}
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
			s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			fold, stats, err := check.Archive(s)
			if err != nil {
				t.Fatal(err)
			}
			checked, bad := check.Compare(fold, net.World(), nil)
			if len(bad) > 0 {
				t.Fatalf("%d of %d accounts differ after a failed %s commit and a restart:\n%s", len(bad), checked, tc.prefix, check.Describe(bad, 5))
			}
			t.Logf("converged: %d events, fold = ground truth for %d accounts", stats.Events, checked)
		})
	}
}
