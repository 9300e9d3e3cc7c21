package node_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
)

// Hosts mode over a roster of many hosts (TestManyHostsRoster).
const (
	manyHosts    = 1000 // the oracle's most: each host listens on a loopback address of its own
	manyAccounts = 6000 // host 0 gets about 2,500, every other host 1 + about 2.5
	manyWorkers  = 4
	manyWindow   = 300 // the shared window: far below hosts × page
	manyPage     = 100
	manyRetries  = 2 // a down host's lane is parked and listed again twice
	// laneRunnersPerWorker is bootstrap's bound on the lane runners per
	// worker, spelt out.
	laneRunnersPerWorker = 16
	// manyDeadline bounds the whole test from the node's start, in place
	// of the other node tests' 2 minutes: a liveness bound, not a speed
	// claim. Bootstrap over 1,000 hosts is CPU-bound: on a 2-core machine
	// with two busy loops beside it, four runs of it alone took 50 to 101 s
	// (35 to 45 s of that to steady state, where measured), and one in the
	// short suite 98 s: over four fifths of the 2 minutes.
	manyDeadline = 4 * time.Minute
)

// manyDown are the hosts down (503 to everything) for the whole test.
var manyDown = []int{7, 500, 999}

// TestManyHostsRoster runs the real wiring in hosts mode over a roster of
// 1,000 PDS hosts (one with about 2,500 accounts, the others with a few)
// of which three are down for the whole test, with 4 workers, pages of
// 100 and a window of 300 entries that every host's lane shares. Listing
// retries wait no time (bootstrap.Config.Sleep, which discovery and
// repair share), so a down host is cut within the test.
//
//   - While bootstrap runs, its goroutines stay within the lane runners'
//     bound (16 per worker) plus the workers and look-ahead resolvers, not
//     one per host, and the entries listed beyond the checkpoint stay
//     within twice the window, not the hosts' shares.
//   - Bootstrap reaches steady state; each down host is listed again
//     manyRetries times, then left failing; every other host is done and
//     every active account of theirs complete. A down host's accounts are
//     never recorded (no listing named them): nothing archived.
//   - A scheduled audit over the same roster closes its gap with each down
//     host's listing cut, not held open.
//   - The fold of the archive equals the world for every account of the
//     hosts that are up.
func TestManyHostsRoster(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, _ := activeNetwork(t, ctx, oracle.Config{Accounts: manyAccounts, RecordsMean: 2, Hosts: manyHosts, Seed: 7})
	down := map[int]bool{}
	var downDIDs []string
	for _, h := range manyDown {
		net.Faults().DownHost(h, time.Hour)
		down[h] = true
		downDIDs = append(downDIDs, hostAccounts(t, net, h)...)
	}
	var upDIDs []string
	for _, a := range net.World().Accounts() {
		if a.Active && !down[a.Host] {
			upDIDs = append(upDIDs, a.DID)
		}
	}
	v, phase := startHostsNode(t, ctx, net, func(c *node.Config) {
		c.Bootstrap = bootstrap.Config{Workers: manyWorkers, Window: manyWindow, PageLimit: manyPage, Enumerate: bootstrap.EnumerateHosts,
			ListRetries: 1, HostRetries: manyRetries, Sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	})
	v.deadline = time.After(manyDeadline)

	// Bootstrap's goroutines: the lane runners, the workers, the
	// look-ahead resolvers and a few of its own (coordinator, recorder,
	// checkpointer, progress).
	bound := laneRunnersPerWorker*manyWorkers + 2*manyWorkers + 16
	var peakG, peakAll, samples int
	var peakLag int64
	polls := 0
	var boot *bootstrap.Bootstrap // kept: the node forgets it once it has finished
	v.waitFor("steady state", func() bool {
		p := phase.Load()
		if b := v.n.Bootstrap(); b != nil && p == archive.PhaseBootstrap {
			boot = b
			peakLag = max(peakLag, b.Progress().CheckpointLag)
			if polls++; polls%5 == 1 {
				peakG, peakAll = max(peakG, goroutinesIn("github.com/backstream/backstream/bootstrap.")), max(peakAll, runtime.NumGoroutine())
				samples++
			}
		}
		return p == archive.PhaseSteadyState
	})
	t.Logf("bootstrap: %d samples, at most %d goroutines of bootstrap (bound %d), %d in the process; checkpoint lag at most %d",
		samples, peakG, bound, peakAll, peakLag)
	if boot == nil || samples < 3 || peakG < manyWorkers {
		t.Fatalf("bootstrap sampled %d times, at most %d of its goroutines seen: the samples prove nothing", samples, peakG)
	}
	if peakG > bound {
		t.Errorf("bootstrap over %d hosts ran %d goroutines at once, want at most %d (16 lane runners per worker, workers, resolvers)", manyHosts, peakG, bound)
	}
	if peakLag > 2*manyWindow {
		t.Errorf("entries listed beyond the checkpoint: %d at once, want at most twice the shared window of %d", peakLag, manyWindow)
	}

	hp := boot.Progress().Hosts
	if hp.ByState[bootstrap.HostFailing] != len(manyDown) || hp.ByState[bootstrap.HostDone] != manyHosts-len(manyDown) {
		t.Errorf("bootstrap's hosts by state: %v, want %d failing and %d done", hp.ByState, len(manyDown), manyHosts-len(manyDown))
	}
	if got := promtest.Value(t, v.reg, "backstream_bootstrap_host_retries_total", nil); got != float64(len(manyDown)*manyRetries) {
		t.Errorf("down hosts' listings retried %v times, want %d", got, len(manyDown)*manyRetries)
	}
	if got := promtest.Value(t, v.reg, "backstream_bootstrap_hosts_gave_up_total", nil); got != float64(len(manyDown)) {
		t.Errorf("hosts given up: %v, want the %d down", got, len(manyDown))
	}
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	checkManyHosts(t, v.n.Store(), upDIDs, downDIDs, "steady state")

	cuts := promtest.Value(t, v.reg, "backstream_repair_listing_cut_total", nil)
	closed := promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil)
	// The first pass may have begun before the snapshot; the second ran
	// wholly after it.
	v.waitFor("two more audit gaps closed", func() bool {
		return promtest.Value(t, v.reg, "backstream_repair_gaps_closed_total", nil) >= closed+2
	})
	if got := promtest.Value(t, v.reg, "backstream_repair_listing_cut_total", nil) - cuts; got < float64(len(manyDown)) {
		t.Errorf("listings cut by the audits that closed: %v, want at least the %d down hosts'", got, len(manyDown))
	}
	v.waitFor("retry drained", retryDrained(v.n.Retrier()))
	checkManyHosts(t, v.n.Store(), upDIDs, downDIDs, "two audits")

	fold, _, err := check.Archive(v.n.Store())
	if err != nil {
		t.Fatal(err)
	}
	checked, bad := check.Compare(fold, net.World(), func(a world.Account) bool {
		return !down[a.Host] && (a.Active || check.Erases(a.Status))
	})
	if len(bad) > 0 {
		t.Fatalf("%d of %d accounts of the hosts up differ from the world:\n%s", len(bad), checked, check.Describe(bad, 5))
	}
	for _, did := range downDIDs {
		if len(fold[did]) > 0 {
			t.Errorf("%s of a down host has %d records archived", did, len(fold[did]))
		}
	}
}

// checkManyHosts fails t unless every one of up is complete in s and none
// of down is recorded; after says when.
func checkManyHosts(t *testing.T, s *archive.Store, up, down []string, after string) {
	t.Helper()
	var missing []string
	for _, did := range up {
		if st, err := s.RepoState(did); err != nil || st.Status != archive.StatusComplete {
			missing = append(missing, did)
		}
	}
	if len(missing) > 0 {
		t.Errorf("after %s, %d of %d active accounts of the hosts up not complete, e.g. %s", after, len(missing), len(up), missing[0])
	}
	for _, did := range down {
		if st, err := s.RepoState(did); !errors.Is(err, archive.ErrNotFound) {
			t.Errorf("after %s, %s of a down host recorded: %+v, %v; want never listed, not found", after, did, st, err)
		}
	}
}

// goroutinesIn is how many goroutines have a frame (or their creator) in
// the package whose qualified prefix is pkg.
func goroutinesIn(pkg string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	return len(slices.DeleteFunc(bytes.Split(buf, []byte("\n\n")), func(g []byte) bool {
		return !strings.Contains(string(g), pkg)
	}))
}
