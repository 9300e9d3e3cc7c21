package bootstrap

import (
	"context"
	"fmt"
	"slices"
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

// TestRosterRelayWordsApartFromOurs: the relay's listHosts statuses and
// backstream's own roster words do not share a namespace, and the relay's
// words are read case-insensitively. A relay status "left" (not a word of
// listHosts) is a word the lexicon does not name: listed, stored and
// counted "other", never read back as a host a whole read no longer names.
// "BANNED" and "Banned" are banned: skipped, not listed, stored "banned".
// A host/ row written "left" by a whole read before (ours) still reads as
// ours: not listed, counted left.
func TestRosterRelayWordsApartFromOurs(t *testing.T) {
	ctx := context.Background()
	s, w := memStore(t)
	before := archive.HostUpdate{Host: "z.test", Func: func(h archive.HostState) archive.HostState { h.Status = RosterLeft; return h }}
	if _, err := w.Apply(ctx, &archive.Unit{Hosts: []archive.HostUpdate{before}}); err != nil {
		t.Fatal(err)
	}
	entries := []upstream.HostEntry{{Host: "a.test", Status: "left", Accounts: 3}, {Host: "b.test", Status: "BANNED", Accounts: 4},
		{Host: "c.test", Status: "Banned"}, {Host: "d.test", Status: "Active"}, {Host: "e.test", Status: "LEFT"}}
	rr, err := ReadRoster(ctx, &rosterFleet{pages: map[string]upstream.HostsPage{"": {Hosts: entries}}}, RosterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"d.test", "a.test", "e.test"} // active first
	if !slices.Equal(rr.Listed, want) || rr.Skipped != 2 {
		t.Errorf("read from listHosts: listed %v, skipped %d; want %v, 2 (the banned hosts)", rr.Listed, rr.Skipped, want)
	}
	// A partial read marks no host left: z.test keeps the row written before.
	rr.Loop = true
	if _, err := RecordRoster(ctx, w, s, rr); err != nil {
		t.Fatal(err)
	}
	for host, st := range map[string]string{"a.test": RosterOther, "b.test": RosterBanned, "c.test": RosterBanned,
		"d.test": "active", "e.test": RosterOther, "z.test": RosterLeft} {
		if hs, err := s.HostState(host); err != nil || hs.Status != st {
			t.Errorf("host/%s: status %q, %v; want %q", host, hs.Status, err, st)
		}
	}
	if hosts, _, err := ListedHosts(s, ""); err != nil || !slices.Equal(hosts, want) {
		t.Errorf("read from host/ rows: %v, %v; want %v", hosts, err, want)
	}
	sum, err := NewRosterView(s).Read()
	if err != nil {
		t.Fatal(err)
	}
	counts := sum.ByStatus
	if counts[RosterOther] != 2 || counts[RosterBanned] != 2 || counts[RosterLeft] != 1 || counts["active"] != 1 {
		t.Errorf("roster counted %v; want other 2, banned 2, left 1 (the row written before), active 1", counts)
	}
}

// BenchmarkRosterCounts is what the first scrape of backstream_roster_hosts
// (and the first /status build) after a roster recorded costs: the host/
// rows of a 10,000-host roster read and counted (RosterView).
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
		if _, err := NewRosterView(s).Read(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestRosterListsAllButBanned: the hosts a listing lists, read from
// listHosts (ReadRoster: bootstrap's lanes) and from the host/ rows that
// read recorded (ListedFrom: discovery, every repair pass and its
// foreign-host rule), are the same: every host but a banned one (idle,
// offline, throttled, a word listHosts does not name, a status that is
// not a word, none), and after a whole read that no longer names a host,
// not that one (left), in the same order: the active hosts first, the
// offline ones last. Only the banned host is skipped. The accountCount
// fallback (Uncounted, ListsRelay) reads the listed hosts' counts: a
// roster whose only count is an idle host's lists the hosts; one whose
// only count is a banned host's lists the relay.
func TestRosterListsAllButBanned(t *testing.T) {
	entries := []upstream.HostEntry{{Host: "a.test", Status: "active"}, {Host: "b.test", Status: "idle", Accounts: 7},
		{Host: "c.test", Status: "offline"}, {Host: "d.test", Status: "throttled"}, {Host: "e.test", Status: "banned", Accounts: 9},
		{Host: "f.test", Status: "paused"}, {Host: "g.test", Status: "Weird!"}, {Host: "h.test"}}
	// In the order listings begin them: active (none said is active), then
	// every other status but offline, offline last; by name within.
	want := []string{"a.test", "h.test", "b.test", "d.test", "f.test", "g.test", "c.test"}
	ctx := context.Background()
	rr, err := ReadRoster(ctx, &rosterFleet{pages: map[string]upstream.HostsPage{"": {Hosts: entries}}}, RosterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rr.Listed, want) || rr.Skipped != 1 {
		t.Errorf("read from listHosts: listed %v, skipped %d; want %v, 1 (the banned host)", rr.Listed, rr.Skipped, want)
	}
	s, w := memStore(t)
	if _, err := RecordRoster(ctx, w, s, rr); err != nil {
		t.Fatal(err)
	}
	if hosts, uncounted, err := ListedHosts(s, ""); err != nil || !slices.Equal(hosts, want) || uncounted {
		t.Errorf("read from host/ rows: %v (uncounted %v), %v; want %v", hosts, uncounted, err, want)
	}
	rr, err = ReadRoster(ctx, &rosterFleet{pages: map[string]upstream.HostsPage{"": {Hosts: entries[1:]}}}, RosterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RecordRoster(ctx, w, s, rr); err != nil {
		t.Fatal(err)
	}
	if hosts, _, err := ListedHosts(s, ""); err != nil || !slices.Equal(hosts, want[1:]) {
		t.Errorf("read from host/ rows after a.test left: %v, %v; want %v", hosts, err, want[1:])
	}
	bannedCount := Roster{Listed: []string{"a.test"}, Entries: []upstream.HostEntry{entries[0], entries[4]}}
	if !bannedCount.ListsRelay("") {
		t.Error("a roster whose only accountCount is a banned host's lists its hosts, unbounded by a count")
	}
	idleCount := Roster{Listed: []string{"a.test", "b.test"}, Entries: entries[:2]}
	if idleCount.ListsRelay("") {
		t.Error("a roster whose only accountCount is an idle host's lists the relay")
	}
}
