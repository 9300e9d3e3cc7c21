package bootstrap_test

import (
	"testing"

	"github.com/backstream/backstream/backfill"
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
	promtest.RequireZero(t, reg, "backstream_listrepos_cut_total", promtest.Label("reason",
		"cursor_too_long", "too_large", "malformed", "refused", "retries_exhausted", "too_many_entries")...)
	if _, ok := promtest.Lookup(t, reg, "backstream_listrepos_errors_total", map[string]string{"class": "ok"}); ok {
		t.Error(`backstream_listrepos_errors_total{class="ok"} exists: success is not an error class`)
	}
}

// TestQueuedReposZeroAtEnd: once a bootstrap has finished, nothing is
// queued or in flight, and backstream_bootstrap_queued_repos says so
// (BackstreamBootstrapStalled fires on a queue above 0 while no repo
// finishes: a leftover value makes it fire in steady state). The debug
// modes commit no checkpoint, so a run's last event is a job's result.
func TestQueuedReposZeroAtEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(e *env) func(c *bootstrap.Config, o *backfill.Options)
	}{
		{"full", func(*env) func(*bootstrap.Config, *backfill.Options) { return nil }},
		{"max-repos", func(*env) func(*bootstrap.Config, *backfill.Options) {
			return func(c *bootstrap.Config, _ *backfill.Options) { c.MaxRepos = 50 }
		}},
		{"repos", func(e *env) func(*bootstrap.Config, *backfill.Options) {
			var dids []string
			for _, a := range e.listed() {
				if a.Active && len(dids) < 6 {
					dids = append(dids, a.DID)
				}
			}
			return func(c *bootstrap.Config, _ *backfill.Options) { c.Repos = dids }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, worldCfg(120, 2))
			e.runToEnd(e.boot(tc.mod(e)))
			if v := promtest.Value(t, e.reg, "backstream_bootstrap_queued_repos", nil); v != 0 {
				t.Fatalf("backstream_bootstrap_queued_repos = %v after the bootstrap finished, want 0", v)
			}
		})
	}
}
