package node_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
)

// TestLifecycleEndToEnd: a simulated network with live traffic; backstream
// goes from an empty store through bootstrap (with capture), merging and into
// steady state, catches up with the relay once traffic stops, and the archive
// folds to the network's current records for every complete repo. A few
// repos' hosts answer 503 for a whole bootstrap job: those repos fail in
// bootstrap and come in through the retry runner on the retry schedule
// (not backfill's own hours-long default).
func TestLifecycleEndToEnd(t *testing.T) {
	citest.Long(t, "end-to-end lifecycle")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 400, RecordsMean: 30, Hosts: 3, Rate: 300, Events: 3000, Traffic: oracle.TrafficFull, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	// One bootstrap job's whole budget of getRepo attempts fails.
	const jobAttempts = backfill.DefaultRetries + 1
	var failing []string
	for _, acc := range net.World().Accounts() {
		if acc.Active && len(failing) < 3 {
			failing = append(failing, acc.DID)
			net.Faults().FailGetRepo(acc.DID, http.StatusServiceUnavailable, jobAttempts)
		}
	}

	phases := make(chan archive.Phase, 8)
	n, err := node.New(node.Config{
		DataDir: t.TempDir(), Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(),
		Store: archive.Options{Logger: quiet},
		// Small repos stay in memory, big ones stream to scratch: both paths.
		MemoryBodyBytes: 8 << 10,
		Bootstrap:       bootstrap.Config{Workers: 16},
		CaptureWait:     5 * time.Second,
		JobBackoffBase:  10 * time.Millisecond, JobBackoffMax: 50 * time.Millisecond,
		RetryInterval: 200 * time.Millisecond, RetryMaxDelay: time.Second, RetryScanPeriod: 200 * time.Millisecond,
		Logger:  quiet,
		OnPhase: func(p archive.Phase) { phases <- p },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	store, retrier := n.Store(), n.Retrier()
	runErr := make(chan error, 1)
	rctx, rcancel := context.WithCancel(ctx)
	start := time.Now()
	go func() { runErr <- n.Run(rctx) }()
	var steadyAt time.Duration
	deadline := time.After(3 * time.Minute)
	for steadyAt == 0 {
		select {
		case p := <-phases:
			t.Logf("phase %s at %v", p, time.Since(start).Round(time.Millisecond))
			if p == archive.PhaseSteadyState {
				steadyAt = time.Since(start)
			}
		case err := <-runErr:
			t.Fatalf("lifecycle stopped before steady state: %v", err)
		case <-deadline:
			t.Fatal("no steady state within 3 minutes")
		}
	}
	// Traffic stops after Events; the live consumer catches up to the relay.
	for {
		st := net.Status()
		c, _ := store.RelayCursor()
		if st.Done && c == uint64(st.Seq) {
			break
		}
		select {
		case err := <-runErr:
			t.Fatalf("lifecycle stopped: %v", err)
		case <-deadline:
			t.Fatalf("no catch-up: relay seq %d, cursor %d, done %v", st.Seq, c, st.Done)
		case <-time.After(50 * time.Millisecond):
		}
	}
	// The retry runner brings in what bootstrap left and what #sync and
	// reactivations marked: wait for two complete passes that started after
	// the catch-up and found nothing due.
	for drained := retryDrained(retrier); !drained(); {
		select {
		case <-deadline:
			t.Fatalf("retry never drained: %+v", retrier.Status())
		case <-time.After(50 * time.Millisecond):
		}
	}
	caughtUp := time.Since(start)
	rcancel()
	if err := <-runErr; err != nil {
		t.Fatalf("lifecycle: %v", err)
	}
	t.Logf("steady state after %v, caught up after %v", steadyAt.Round(time.Millisecond), caughtUp.Round(time.Millisecond))
	if got, want := net.Faults().Fired(oracle.FaultGetRepoStatus), int64(len(failing)*jobAttempts); got != want {
		t.Errorf("%d getRepo 503s served, want %d (every attempt of one job per failing repo)", got, want)
	}
	for _, did := range failing {
		st, err := store.RepoState(did)
		if err != nil || st.Status == archive.StatusFailed {
			t.Errorf("%s failed in bootstrap and is still %s (next attempt in %v; %v): not retried on the retry schedule",
				did, st.Status, time.Until(time.UnixMicro(st.NextAttemptUS)).Round(time.Second), err)
		}
	}

	f, stats, err := check.Archive(store)
	if err != nil {
		t.Fatal(err)
	}
	checked, bad := check.Compare(f, net.World(), nil)
	if len(bad) > 0 {
		t.Errorf("%d of %d accounts differ:\n%s", len(bad), checked, check.Describe(bad, 10))
	}
	t.Logf("%d events; fold = ground truth checked for %d active or deleted accounts", stats.Events, checked)
	if checked < 300 {
		t.Fatalf("only %d accounts checked", checked)
	}
}
