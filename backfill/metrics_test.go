package backfill_test

import (
	"testing"

	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: right after NewMetrics every labelled series
// of a closed label set exists at 0, so alerts on failures by class and
// dashboards see 0, not "no data", before the first failure. The expected
// values are spelled out here, not taken from the production lists, so a
// value dropped from a list fails the test.
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	backfill.NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_backfill_failed_total", promtest.Label("class",
		backfill.ClassTransient, backfill.ClassRateLimited, backfill.ClassTimeout, backfill.ClassPermanent,
		backfill.ClassForbidden, backfill.ClassTooLarge, backfill.ClassWrongDID, backfill.ClassBadCommit,
		backfill.ClassIncompleteCAR, backfill.ClassInvalidCAR, backfill.ClassLocal, backfill.ClassSlowBody, backfill.ClassHostBusy, backfill.ClassNotFoundActive,
		backfill.ClassIdentity, backfill.ClassUnknownDID, backfill.ClassSignature, backfill.ClassAuthority)...)
	promtest.RequireZero(t, reg, "backstream_backfill_retries_total", promtest.Label("budget", "ordinary", "rate_limited")...)
	promtest.RequireZero(t, reg, "backstream_backfill_repos_total", promtest.Label("result",
		backfill.ResultComplete, backfill.ResultNotFound, backfill.ResultUnavailable, backfill.ResultUnknownDID, backfill.ResultFailed)...)
	var reasons []string
	for _, r := range backfill.DropReasons() {
		reasons = append(reasons, r.String())
	}
	if len(reasons) == 0 {
		t.Fatal("no drop reasons")
	}
	promtest.RequireZero(t, reg, "backstream_backfill_dropped_records_total", promtest.Label("reason", reasons...)...)
	// The unavailable classes are not failures: no failed series for them.
	for _, c := range []string{backfill.ClassDeactivated, backfill.ClassSuspended, backfill.ClassTakendown} {
		if _, ok := promtest.Lookup(t, reg, "backstream_backfill_failed_total", map[string]string{"class": c}); ok {
			t.Errorf("backstream_backfill_failed_total{class=%q} exists: %s is an unavailable class, never a failure", c, c)
		}
	}
}
