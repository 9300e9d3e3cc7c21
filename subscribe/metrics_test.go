package subscribe

import (
	"testing"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: right after NewMetrics every series of a
// closed label set exists at 0 (the disconnect-reason panels and alerts see
// 0, not "no data").
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_subscribe_events_sent_total", promtest.Label("path", "live", "replay")...)
	promtest.RequireZero(t, reg, "backstream_subscribe_disconnects_total", promtest.Label("reason",
		ReasonClientClosed, ReasonReadError, ReasonWriteError, ReasonTooSlow, ReasonBadOptions,
		ReasonShutdown, ReasonInternalError)...)
	promtest.RequireZero(t, reg, "backstream_subscribe_refused_total", promtest.Label("reason", "bad_param", "not_ready", "upgrade")...)
}
