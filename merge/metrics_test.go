package merge

import (
	"context"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: every result and cut reason exists at 0
// before any merge.
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_merge_rows_total", promtest.Label("result", "kept", "stale", "sync", "dropped")...)
	promtest.RequireZero(t, reg, "backstream_discovery_cut_total", promtest.Label("reason",
		"cursor_too_long", "too_large", "malformed", "refused", "retries_exhausted", "too_many_entries", "cursor_loop")...)
	promtest.RequireZero(t, reg, "backstream_merge_pending_total", promtest.Label("result", "replaced", "stale", "deferred")...)
}

// TestMergeRowsSumToCaptured: every captured row merged is counted once in
// backstream_merge_rows_total, whatever became of it: kept, stale, or a
// #sync that moved the ratchet and made no row. Four rows are captured: a
// create older than the complete repo's snapshot (stale), an identity
// (kept), a newer #sync (sync) and an older one (stale).
func TestMergeRowsSumToCaptured(t *testing.T) {
	r := newRig(t)
	did := "did:plc:complete"
	r.repo(did, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: "05"}, "05")
	r.capture(op(did, "03", archive.KindCreate, "a"))
	r.capture(archive.Event{Kind: archive.KindIdentity, DID: did, Handle: "h.test", Source: archive.SourceLive})
	r.capture(archive.Event{Kind: archive.KindSync, DID: did, Rev: "09", Source: archive.SourceLive})
	r.capture(archive.Event{Kind: archive.KindSync, DID: did, Rev: "01", Source: archive.SourceLive})
	reg := prometheus.NewRegistry()
	if _, err := Walk(context.Background(), Config{Store: r.store, Writer: r.w, MaxRows: 1, Logger: quiet, Metrics: NewMetrics(reg)}); err != nil {
		t.Fatal(err)
	}
	const name = "backstream_merge_rows_total"
	if sum := promtest.Sum(t, reg, name); sum != 4 {
		t.Fatalf("%s sums to %v over 4 captured rows (kept %v, stale %v)", name, sum,
			promtest.Value(t, reg, name, map[string]string{"result": "kept"}), promtest.Value(t, reg, name, map[string]string{"result": "stale"}))
	}
	for res, want := range map[string]float64{"kept": 1, "stale": 2, "sync": 1} {
		if got := promtest.Value(t, reg, name, map[string]string{"result": res}); got != want {
			t.Errorf("%s{result=%q} = %v, want %v", name, res, got, want)
		}
	}
}
