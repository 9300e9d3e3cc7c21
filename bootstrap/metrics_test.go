package bootstrap_test

import (
	"testing"

	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: right after NewMetrics every series of a
// closed label set exists at 0, so the listRepos-errors alert and the
// dashboard see 0, not "no data", before the first error.
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	bootstrap.NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_listrepos_errors_total", promtest.Label("class",
		"not_found", "unavailable", "rate_limited", "transient", "permanent", "canceled")...)
	promtest.RequireZero(t, reg, "backstream_bootstrap_repos_discovered_total", promtest.Label("activity", "active", "inactive")...)
	if _, ok := promtest.Lookup(t, reg, "backstream_listrepos_errors_total", map[string]string{"class": "ok"}); ok {
		t.Error(`backstream_listrepos_errors_total{class="ok"} exists: success is not an error class`)
	}
}
