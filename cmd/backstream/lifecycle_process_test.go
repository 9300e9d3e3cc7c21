package main

// Process-level crash tests of the whole lifecycle: the real binary, killed
// with SIGKILL at each named crash point (BACKSTREAM_CRASHPOINT), restarted
// without it, must reach steady state, catch up with the relay, and leave an
// archive whose fold per DID equals the simulated network's current records
// for every active account. A reduced set runs in `make test`; the full
// matrix in `make test-long`.

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
)

// crashChains: each scenario arms the listed crash points in successive runs
// (each run must die there), then a clean run converges. pending-replaced
// needs pending repos, which a kill mid-repo (repo-chunk) creates.
var crashChains = [][]string{
	{crashpoint.RepoComplete},     // M1: right after the first completion, under live traffic
	{crashpoint.MergingCommitted}, // C3
	{crashpoint.CaptureStarted},
	{crashpoint.BootstrapEnqueued},
	{crashpoint.RepoChunk},
	{crashpoint.Checkpoint},
	{crashpoint.MergeBatch},
	{crashpoint.RepoChunk + ":2", crashpoint.PendingReplaced},
	{crashpoint.SteadyCommitted}, // C4, M7
	{crashpoint.DiscoveryPage},
	{crashpoint.LiveBatch + ":50"}, // D1: mid-stream in steady state
}

func TestLifecycleCrashPoints(t *testing.T) {
	chains := crashChains
	if testing.Short() {
		chains = chains[:2] // the reduced set of `make test`
	}
	bin := buildBinary(t)
	for i, chain := range chains {
		t.Run(strings.Join(chain, "+"), func(t *testing.T) {
			crashScenario(t, bin, int64(100+i), chain)
		})
	}
}

func crashScenario(t *testing.T, bin string, seed int64, chain []string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	records := 25
	if strings.HasPrefix(chain[0], crashpoint.RepoChunk) {
		records = 120 // repo-chunk fires between chunks: it needs repos of more than 1024 records
	}
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 300, RecordsMean: records, Hosts: 3, Rate: 150, Events: 1200, Traffic: oracle.TrafficFull, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	dir := t.TempDir()
	args := []string{"--backfill-workers", "8", "--capture-wait", "3s", "--retry-interval", "200ms", "--retry-max-delay", "1s", "--retry-scan-period", "300ms"}

	for _, point := range chain {
		p := startServeEnv(t, bin, net.RelayURL(), dir, []string{"BACKSTREAM_CRASHPOINT=" + point}, args...)
		select {
		case err := <-p.done:
			if !killed(err) {
				t.Fatalf("run armed with %s ended without firing it (%v):\n%s", point, err, p.tail())
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("crash point %s never fired:\n%s", point, p.tail())
		}
		r, _ := statusOf(t, dir)
		t.Logf("killed at %s: phase %s, %d complete, %d pending, archive tip %d", point, r.Phase, r.Repos["complete"], r.Repos["pending"], r.Archive.TipSeq)
	}

	// A clean run converges: steady state, caught up with the relay after
	// traffic stops, retries drained.
	p := startServe(t, bin, net.RelayURL(), dir, args...)
	waitConverged(t, p, net, 3*time.Minute)
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p.done; err != nil {
		t.Fatalf("clean run did not stop cleanly on SIGTERM: %v\n%s", err, p.tail())
	}
	s := readStore(t, dir)
	defer s.Close()
	fold, stats, err := check.Archive(s)
	if err != nil {
		t.Fatal(err) // seqs strictly increase; per-DID revs never go backwards (D3)
	}
	checked, bad := check.Compare(fold, net.World(), nil)
	if len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ after %v:\n%s", len(bad), checked, chain, check.Describe(bad, 10))
	}
	t.Logf("converged after %v: %d events, fold = ground truth for %d accounts", chain, stats.Events, checked)
}

// statusOf reads the status report of a data dir no process holds.
func statusOf(t *testing.T, dir string) (*statusReport, error) {
	s := readStore(t, dir)
	defer s.Close()
	r, err := buildStatus(s)
	if err != nil {
		return &statusReport{}, fmt.Errorf("status of %s: %w", filepath.Join(dir, "data"), err)
	}
	return r, nil
}

// TestLifecycleEndToEnd2000 is issue 5's process-level end-to-end: a
// simulated network of 2,000 accounts with continuous basic traffic at 200
// events/s; backstream from an empty store to steady state; traffic stops;
// backstream catches up with the relay's last seq; the archive folds to the
// network's current records for every active account. It logs the time to
// steady state and the merge duration.
func TestLifecycleEndToEnd2000(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000-account process end-to-end: make test-long")
	}
	bin := buildBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 2000, RecordsMean: 20, Hosts: 4, Rate: 200, Events: 8000, Traffic: oracle.TrafficBasic, Seed: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	dir := t.TempDir()
	start := time.Now()
	p := startServe(t, bin, net.RelayURL(), dir, "--retry-interval", "500ms", "--retry-max-delay", "2s", "--retry-scan-period", "500ms")
	rep := waitSteady(t, p, 3*time.Minute)
	steadyAfter := time.Since(start)
	waitConverged(t, p, net, 5*time.Minute)
	var merge time.Duration
	if rep.BackfillCompletedAt != nil && rep.PhaseEnteredAt != nil {
		merge = rep.PhaseEnteredAt.Sub(*rep.BackfillCompletedAt)
	}
	var bootstrap time.Duration
	if rep.BackfillCompletedAt != nil && rep.BackfillStartedAt != nil {
		bootstrap = rep.BackfillCompletedAt.Sub(*rep.BackfillStartedAt)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("SIGTERM: %v\n%s", err, p.tail())
	}
	s := readStore(t, dir)
	defer s.Close()
	fold, stats, err := check.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	checked, bad := check.Compare(fold, net.World(), nil)
	if len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ:\n%s", len(bad), checked, check.Describe(bad, 10))
	}
	t.Logf("2,000 accounts, basic traffic at 200/s: steady state after %v (bootstrap %v, merge %v); caught up with relay seq %d; %d events; fold = ground truth for %d accounts",
		steadyAfter.Round(time.Millisecond), bootstrap.Round(time.Millisecond), merge.Round(time.Millisecond), net.Status().Seq, stats.Events, checked)
}

// waitConverged waits until serve is in steady state, the relay's traffic
// has ended, cursor/relay equals the relay's last seq, and a few retry
// passes have run since (they bring in the last #sync and reactivation
// marks).
func waitConverged(t *testing.T, p *proc, net *oracle.Network, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var caughtUp time.Time
	for {
		select {
		case err := <-p.done:
			t.Fatalf("serve exited: %v\n%s", err, p.tail())
		default:
		}
		r, ok := p.status()
		st := net.Status()
		if ok && r.Phase == "steady_state" && st.Done && r.Cursors.Relay != nil && *r.Cursors.Relay == uint64(st.Seq) {
			if caughtUp.IsZero() {
				caughtUp = time.Now()
			}
			if time.Since(caughtUp) > 3*time.Second {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no convergence: %+v relay %+v\n%s", r, st, p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
