package crash_test

// Process-level crash tests of the whole lifecycle: the real binary, killed
// with SIGKILL at each named crash point (BACKSTREAM_CRASHPOINT), restarted
// without it, must reach steady state, catch up with the relay, and leave an
// archive whose fold per DID equals the simulated network's current records
// for every active account; a subscriber follows each chain, and the R7
// check (no repo complete before a kill downloaded again in bootstrap) runs
// throughout. A reduced set runs in `make test`; the full matrix in
// `make test-long`.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
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
	// Later passes of the same points, and one chain across every phase.
	{crashpoint.RepoComplete + ":150"},
	{crashpoint.LiveBatch + ":200"},
	{crashpoint.RepoComplete + ":40", crashpoint.MergeBatch, crashpoint.LiveBatch + ":10"},
}

func TestLifecycleCrashPoints(t *testing.T) {
	chains := crashChains
	if testing.Short() {
		chains = chains[:2] // the reduced set of `make test`
	}
	crash.Binary(t)
	for i, chain := range chains {
		t.Run(strings.Join(chain, "+"), func(t *testing.T) {
			crashScenario(t, int64(100+i), chain)
		})
	}
}

func crashScenario(t *testing.T, seed int64, chain []string) {
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
	h := crash.New(t, net, crash.Options{Args: serveArgs, Subscribe: true})
	for _, point := range chain {
		h.KillRun(crash.AtPoint(point))
	}
	// A clean run converges: steady state, caught up with the relay after
	// traffic stops, retries drained.
	p := h.Converge(3 * time.Minute)
	res := h.Finish(p)
	t.Logf("converged after %v: %d events, fold = ground truth for %d accounts; the stream from cursor 0 (%d events) holds every event the chain's subscriber got (%d)",
		chain, res.Events, res.Checked, res.FreshRead, res.SubHeld)
}

// TestLifecycleEndToEnd2000 is the lifecycle's process-level end-to-end: a
// simulated network of 2,000 accounts with continuous basic traffic at 200
// events/s; backstream from an empty store to steady state; traffic stops;
// backstream catches up with the relay's last seq; the archive folds to the
// network's current records for every active account. It logs the time to
// steady state and the merge duration.
func TestLifecycleEndToEnd2000(t *testing.T) {
	citest.Long(t, "2,000-account process end-to-end")
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 2000, RecordsMean: 20, Hosts: 4, Rate: 200, Events: 8000, Traffic: oracle.TrafficBasic, Seed: 2000})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: []string{"--retry-interval", "500ms", "--retry-max-delay", "2s", "--retry-scan-period", "500ms"}})
	start := time.Now()
	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 3*time.Minute)
	steadyAfter := time.Since(start)
	h.WaitConverged(p, 5*time.Minute)
	rep, _ := p.Status()
	var merge, bootstrap time.Duration
	if rep.BackfillCompletedAt != nil && rep.PhaseEnteredAt != nil {
		merge = rep.PhaseEnteredAt.Sub(*rep.BackfillCompletedAt)
	}
	if rep.BackfillCompletedAt != nil && rep.BackfillStartedAt != nil {
		bootstrap = rep.BackfillCompletedAt.Sub(*rep.BackfillStartedAt)
	}
	res := h.Finish(p)
	t.Logf("2,000 accounts, basic traffic at 200/s: steady state after %v (bootstrap %v, merge %v); caught up with relay seq %d; %d events; fold = ground truth for %d accounts",
		steadyAfter.Round(time.Millisecond), bootstrap.Round(time.Millisecond), merge.Round(time.Millisecond), net.Status().Seq, res.Events, res.Checked)
}
