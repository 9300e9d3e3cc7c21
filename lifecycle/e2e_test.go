package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/upstream"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestLifecycleEndToEnd: a simulated network with live traffic; backstream
// goes from an empty store through bootstrap (with capture), merging and into
// steady state, catches up with the relay once traffic stops, and the archive
// folds to the network's current records for every complete repo.
func TestLifecycleEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end lifecycle: skipped under -short")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 400, RecordsMean: 30, Hosts: 3, Rate: 300, Events: 3000, Traffic: oracle.TrafficFull, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()

	store, err := archive.Open(t.TempDir(), archive.Options{Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	// Small repos stay in memory, big ones stream to scratch: both paths.
	client, err := upstream.New(net.RelayURL(), upstream.Options{ScratchDir: store.ScratchDir(), MemoryBodyBytes: 8 << 10})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := backfill.NewRunner(backfill.Options{Source: client, Writer: w, Logger: quiet, BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	backoff := retry.Backoff{Interval: 200 * time.Millisecond, MaxDelay: time.Second}
	retryJobs, err := backfill.NewRunner(backoff.JobOptions(backfill.Options{Source: client, Writer: w, Logger: quiet}))
	if err != nil {
		t.Fatal(err)
	}
	retrier, err := retry.New(retry.Config{Store: store, Writer: w, Jobs: retryJobs, Interval: backoff.Interval, MaxDelay: backoff.MaxDelay, ScanPeriod: 200 * time.Millisecond, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	phases := make(chan archive.Phase, 8)
	runErr := make(chan error, 1)
	rctx, rcancel := context.WithCancel(ctx)
	start := time.Now()
	go func() {
		runErr <- Run(rctx, Config{
			Store: store, Writer: w, Relay: net.RelayURL(), Source: client, Jobs: jobs,
			Bootstrap: bootstrap.Config{Workers: 16},
			Logger:    quiet, CaptureWait: 5 * time.Second,
			OnPhase: func(p archive.Phase) { phases <- p },
			Steady:  []func(context.Context) error{retrier.Run},
		})
	}()
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
	passes := retrier.Status().Passes
	for st := retrier.Status(); st.Passes < passes+2 || st.Due > 0 || st.InFlight > 0; st = retrier.Status() {
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
