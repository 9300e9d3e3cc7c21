package merge

import (
	"testing"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: both results exist at 0 before any merge.
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_merge_rows_total", promtest.Label("result", "kept", "stale")...)
}
