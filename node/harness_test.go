package node_test

// harness_test.go holds what the whole-system harnesses of this package
// share: they build the system only through node.New, Run and Close,
// varying nothing but node.Config.

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/retry"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// memConfig is a node following net's relay (and allowed its PDS hosts'
// addresses: net.LoopbackHosts) with its store under /data on store.FS (an
// in-memory filesystem): getRepo bodies too large for memory go to a real
// temporary directory, since the upstream client writes scratch files on
// the OS. A nil net leaves Relay to the caller.
func memConfig(t *testing.T, net *oracle.Network, store archive.Options) node.Config {
	store.Logger = quiet
	if store.CacheSize == 0 {
		store.CacheSize = 8 << 20
	}
	c := node.Config{DataDir: "/data", ScratchDir: t.TempDir(), Store: store, Logger: quiet}
	if net != nil {
		c.Relay, c.LoopbackHosts = net.RelayURL(), net.LoopbackHosts()
	}
	return c
}

// sweepConfig is the node of the commit-fault and power-loss runs: a small
// bootstrap, and job and retry schedules short enough that a run over a
// small world converges in seconds.
func sweepConfig(t *testing.T, net *oracle.Network, store archive.Options) node.Config {
	c := memConfig(t, net, store)
	c.Bootstrap = bootstrap.Config{Workers: 8}
	c.CaptureWait = 2 * time.Second
	c.JobBackoffBase, c.JobBackoffMax = 10*time.Millisecond, 50*time.Millisecond
	c.RetryInterval, c.RetryMaxDelay, c.RetryScanPeriod = 100*time.Millisecond, 300*time.Millisecond, 100*time.Millisecond
	return c
}

// closeAfterFault closes n after a failed or cut write: Pebble may panic
// closing a store whose write failed.
func closeAfterFault(n *node.Node) {
	defer func() { recover() }()
	n.Close()
}

// checkFold opens the store under /data on fs and fails t unless the fold
// of its archive equals the network's current records for every active
// (and every deleted) account; after says what the run went through. It
// returns the archive's events and the accounts checked.
func checkFold(t *testing.T, fs vfs.FS, net *oracle.Network, after string) (events, checked int) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: fs, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fold, stats, err := check.Archive(s)
	if err != nil {
		t.Fatalf("archive after %s: %v", after, err)
	}
	checked, bad := check.Compare(fold, net.World(), nil)
	if len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ after %s and a restart:\n%s", len(bad), checked, after, check.Describe(bad, 5))
	}
	return stats.Events, checked
}

// retryDrained is true once the retry runner has completed two passes that
// started after this call and the last found nothing due, with nothing in
// flight: what #sync, reactivations and failed jobs marked by then is in.
func retryDrained(r *retry.Runner) func() bool {
	passes := r.Status().Passes
	return func() bool {
		st := r.Status()
		return st.Passes >= passes+2 && st.Due == 0 && st.InFlight == 0
	}
}
