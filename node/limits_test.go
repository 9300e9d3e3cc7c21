package node_test

import (
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/prometheus/client_golang/prometheus"
)

// TestDownloadLimitsWired: the scratch budget set on the node reaches the
// upstream client every job shares (its budget gauge), and the download
// limit counters are exported from the start.
func TestDownloadLimitsWired(t *testing.T) {
	reg := prometheus.NewRegistry()
	n, err := node.New(node.Config{
		DataDir: t.TempDir(), Relay: "http://127.0.0.1:1",
		Store:         archive.Options{Logger: quiet},
		ScratchBudget: 123 << 20, HostWorkers: 3, MinBodyBytes: 1 << 10,
		Registry: reg, Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got := promtest.Value(t, reg, "backstream_upstream_scratch_budget_bytes", nil); got != 123<<20 {
		t.Fatalf("scratch budget gauge %v, want %d", got, 123<<20)
	}
	promtest.RequireZero(t, reg, "backstream_upstream_getrepo_limited_total",
		promtest.Label("limit", "host_workers", "min_body_rate", "scratch_budget", "min_free", "scratch_write")...)
}
