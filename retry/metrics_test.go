package retry_test

import (
	"testing"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/retry"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: right after NewMetrics every series of a
// closed label set exists at 0 (alerts and dashboards see 0, not "no
// data"). The values are spelled out so a value dropped from the
// production list fails the test.
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	retry.NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_retry_attempts_total", promtest.Label("result",
		retry.ResultComplete, retry.ResultNotFound, retry.ResultUnavailable, retry.ResultFailed,
		retry.ResultRateLimited, retry.ResultStale)...)
	promtest.RequireZero(t, reg, "backstream_retry_deferred_total", promtest.Label("reason", "parked", "host_full", "index_pending")...)
}
