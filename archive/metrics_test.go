package archive

import (
	"testing"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: the closed label sets exist at 0 before any
// row is written.
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	sources := []string{"backfill", "live", "merge", "retry"}
	promtest.RequireZero(t, reg, "backstream_archive_stale_rows_total", promtest.Label("source", sources...)...)
	promtest.RequireZero(t, reg, "backstream_archive_rows_total", promtest.Cross("log", []string{"ev"}, "source", sources)...)
	promtest.RequireZero(t, reg, "backstream_archive_rows_total", map[string]string{"log": "cap", "source": "live"})
}
