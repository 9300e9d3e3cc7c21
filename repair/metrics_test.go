package repair

import (
	"testing"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: every reason and absent result exists at 0
// before any pass, those of the entries a pass leaves alone included.
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_repair_accounts_total", promtest.Label("reason",
		"newer_rev", "unknown", "reactivated", "inactive", "unknown_did", "foreign")...)
	promtest.RequireZero(t, reg, "backstream_repair_absent_total", promtest.Label("result", "checked", "unanswered", "partial")...)
}
