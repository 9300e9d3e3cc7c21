package bootstrap_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/upstream"
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

// TestRosterHostsBounded: backstream_roster_hosts counts the recorded
// roster by status with a closed label set: a word of the relay's that
// listHosts does not define, and one that is not a word, both count as
// other; a host a whole read no longer names counts as left; a host/ row
// with no roster entry (a failed repo's host in relay mode) is not
// counted; before any roster every status is 0.
func TestRosterHostsBounded(t *testing.T) {
	e := newEnv(t, worldCfg(4, 1))
	reg := prometheus.NewRegistry()
	reg.MustRegister(bootstrap.NewRosterCollector(e.store))
	want := map[string]float64{"active": 0, "idle": 0, "offline": 0, "throttled": 0, "banned": 0, "left": 0, "other": 0}
	check := func(when string) {
		t.Helper()
		for st, n := range want {
			if got := promtest.Value(t, reg, "backstream_roster_hosts", map[string]string{"status": st}); got != n {
				t.Errorf("%s: backstream_roster_hosts{status=%q} = %v, want %v", when, st, got, n)
			}
		}
		if _, ok := promtest.Lookup(t, reg, "backstream_roster_hosts", map[string]string{"status": "sleeping"}); ok {
			t.Errorf("%s: a status of the relay's own is a label value", when)
		}
	}
	check("no roster")
	ctx := context.Background()
	failed := archive.HostUpdate{Host: "relayed.test", Func: func(h archive.HostState) archive.HostState { h.Failures = 1; return h }}
	if _, err := e.w.Apply(ctx, &archive.Unit{Hosts: []archive.HostUpdate{failed}}); err != nil {
		t.Fatal(err)
	}
	check("a failed repo's host, no roster")
	entries := []upstream.HostEntry{{Host: "a.test", Status: "active"}, {Host: "b.test", Status: "banned"},
		{Host: "c.test", Status: "sleeping"}, {Host: "d.test", Status: "Weird!"}}
	if _, err := bootstrap.RecordRoster(ctx, e.w, e.store, bootstrap.Roster{Entries: entries}); err != nil {
		t.Fatal(err)
	}
	want["active"], want["banned"], want["other"] = 1, 1, 2
	check("a roster")
	if _, err := bootstrap.RecordRoster(ctx, e.w, e.store, bootstrap.Roster{Entries: entries[:1]}); err != nil {
		t.Fatal(err)
	}
	want["banned"], want["other"], want["left"] = 0, 0, 3
	check("a roster naming only a.test")
}

// BenchmarkRosterCounts is what one scrape of backstream_roster_hosts (and
// one /status build) costs: the host/ rows of a 10,000-host roster read
// and counted.
func BenchmarkRosterCounts(b *testing.B) {
	s, err := archive.Open(b.TempDir(), archive.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	entries := make([]upstream.HostEntry, 10_000)
	for i := range entries {
		entries[i] = upstream.HostEntry{Host: fmt.Sprintf("pds%05d.test", i), Status: bootstrap.RosterStatuses()[i%5], Accounts: int64(i)}
	}
	if _, err := bootstrap.RecordRoster(context.Background(), w, s, bootstrap.Roster{Entries: entries}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := bootstrap.RosterCounts(s); err != nil {
			b.Fatal(err)
		}
	}
}
