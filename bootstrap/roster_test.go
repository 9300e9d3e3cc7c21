package bootstrap

import (
	"context"
	"fmt"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// TestRosterHostsBounded: backstream_roster_hosts counts the recorded
// roster by status with a closed label set: a word of the relay's that
// listHosts does not define, and one that is not a word, both count as
// other; a host a whole read no longer names counts as left; a host/ row
// with no roster entry (a failed repo's host in relay mode) is not
// counted; before any roster every status is 0.
func TestRosterHostsBounded(t *testing.T) {
	s, w := memStore(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewRosterCollector(s))
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
	if _, err := w.Apply(ctx, &archive.Unit{Hosts: []archive.HostUpdate{failed}}); err != nil {
		t.Fatal(err)
	}
	check("a failed repo's host, no roster")
	entries := []upstream.HostEntry{{Host: "a.test", Status: "active"}, {Host: "b.test", Status: "banned"},
		{Host: "c.test", Status: "sleeping"}, {Host: "d.test", Status: "Weird!"}}
	if _, err := RecordRoster(ctx, w, s, Roster{Entries: entries}); err != nil {
		t.Fatal(err)
	}
	want["active"], want["banned"], want["other"] = 1, 1, 2
	check("a roster")
	if _, err := RecordRoster(ctx, w, s, Roster{Entries: entries[:1]}); err != nil {
		t.Fatal(err)
	}
	want["banned"], want["other"], want["left"] = 0, 0, 3
	check("a roster naming only a.test")
}

// BenchmarkRosterCounts is what one scrape of backstream_roster_hosts (and
// one /status build) costs: the host/ rows of a 10,000-host roster read
// and counted.
func BenchmarkRosterCounts(b *testing.B) {
	s, w := memStore(b)
	entries := make([]upstream.HostEntry, 10_000)
	for i := range entries {
		entries[i] = upstream.HostEntry{Host: fmt.Sprintf("pds%05d.test", i), Status: RosterStatuses()[i%5], Accounts: int64(i)}
	}
	if _, err := RecordRoster(context.Background(), w, s, Roster{Entries: entries}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := RosterCounts(s); err != nil {
			b.Fatal(err)
		}
	}
}
