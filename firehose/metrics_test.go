package firehose

import (
	"testing"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: right after NewMetrics every series of a
// closed label set exists at 0 (alerts on drops and anomalies and the
// dashboard see 0, not "no data").
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_firehose_dropped_total", promtest.Label("reason",
		DropInvalidDID, DropInvalidRev, DropBadBlocks, DropInvalidCollection, DropInvalidRKey,
		DropMissingBlock, DropInvalidAction, DropInvalidRow)...)
	promtest.RequireZero(t, reg, "backstream_firehose_anomalies_total", promtest.Label("kind",
		AnomalyUndecodable, AnomalyUnknownType, AnomalyFutureCursor, AnomalyConsumerTooSlow,
		AnomalyErrorFrame, AnomalyOutdatedCursor, AnomalySeqGap, AnomalyDuplicate, AnomalyInvalidSeq)...)
	promtest.RequireZero(t, reg, "backstream_firehose_frames_total", promtest.Label("type",
		"commit", "sync", "identity", "account", "info", "error", "unknown", "invalid")...)
}
