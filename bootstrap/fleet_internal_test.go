package bootstrap

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// TestListedAgainPrefersNewerRev: a DID dispatched from host a and listed
// again by host b (a migration in flight) is fetched from b when b's rev is
// newer, and stays with a when it is not; either way it is not dispatched
// twice. The scheduler moves a queued repo to its new host at dispatch.
func TestListedAgainPrefersNewerRev(t *testing.T) {
	b := &Bootstrap{inflight: map[string]attribution{}}
	b.fleet.Store(newFleetState(EnumerateHosts))
	const did = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	if b.listedAgain(context.Background(), "a", upstream.RepoEntry{DID: did, Rev: "3k2"}) {
		t.Fatal("a DID not in flight was skipped")
	}
	b.inflight[did] = attribution{host: "a", rev: "3k2"}
	if !b.listedAgain(context.Background(), "b", upstream.RepoEntry{DID: did, Rev: "3k1"}) || b.hostFor(did) != "a" {
		t.Fatalf("an older rev on b moved it to %q", b.hostFor(did))
	}
	if !b.listedAgain(context.Background(), "b", upstream.RepoEntry{DID: did, Rev: "3k3"}) || b.hostFor(did) != "b" {
		t.Fatalf("a newer rev on b left it on %q", b.hostFor(did))
	}
	if got := b.hosts().snapshot().Reattributed; got != 1 {
		t.Fatalf("reattributed %d, want 1", got)
	}

	s := newScheduler(1)
	s.push("a", did)
	j, ok := s.peek()
	if !ok || j.host != "a" {
		t.Fatalf("peek %+v %v", j, ok)
	}
	s.move(j, b.hostFor(did))
	if j, ok = s.peek(); !ok || j.host != "b" || j.did != did || s.len() != 1 {
		t.Fatalf("after the move: %+v %v len %d", j, ok, s.len())
	}
}

// TestSchedulerRoundRobinUnderCap: jobs come out one host after another,
// never more than the cap of one host at once, and a host at its cap does
// not stop the others.
func TestSchedulerRoundRobinUnderCap(t *testing.T) {
	s := newScheduler(2)
	for _, d := range []string{"a1", "a2", "a3", "a4", "a5"} {
		s.push("a", d)
	}
	s.push("b", "b1")
	s.push("c", "c1")
	var got []string
	for {
		j, ok := s.peek()
		if !ok {
			break
		}
		s.take(j)
		got = append(got, j.did)
	}
	want := []string{"a1", "b1", "c1", "a2"}
	if len(got) != len(want) {
		t.Fatalf("handed out %v, want %v (a capped at 2)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("handed out %v, want %v", got, want)
		}
	}
	s.done("a")
	if j, ok := s.peek(); !ok || j.did != "a3" {
		t.Fatalf("after a finished one: %+v %v", j, ok)
	}
}

// TestRosterStatus: a roster status is stored only as a short word, in
// lower case (the relay's word read case-insensitively); anything else a
// relay sends, and a word of backstream's own (left), is "other".
func TestRosterStatus(t *testing.T) {
	for in, want := range map[string]string{"active": "active", "throttled": "throttled", "": "other", "ACTIVE": "active",
		"Banned": "banned", "left": "other", "Left": "other", "other": "other",
		"act\xffive": "other", "a b": "other", string(make([]byte, 33)): "other"} {
		if got := rosterStatus(in); got != want {
			t.Fatalf("rosterStatus(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestListedAgainFollowsTheDocument: an account migrating from host a to
// host b is listed by both, a's entry with the newer rev (a stale listing,
// or a host that still writes to it). Its DID document names b: with
// identity resolution on, the repo is fetched from b whichever host listed
// it first; the newer-rev rule would pick a. With resolution off (nil, or
// --verify off) or failing, the newer rev decides, counted as such.
func TestListedAgainFollowsTheDocument(t *testing.T) {
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 4, RecordsMean: 1, Hosts: 2, Seed: 8, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	urls := n.HostURLs()
	var did string
	for _, acc := range n.World().Accounts() {
		if acc.Host == 1 {
			did = acc.DID
		}
	}
	if did == "" {
		t.Fatal("no account on host 1")
	}
	a, b := strings.TrimPrefix(urls[0], "http://"), strings.TrimPrefix(urls[1], "http://")
	const older, newer = "3k2aaaaaaaaa2", "3k9aaaaaaaaa2"
	on := ident.New(ident.Config{PLC: n.RelayURL(), Mode: ident.ModeStrict})
	defer on.Close()
	failing := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Mode: ident.ModeStrict, Retries: -1})
	defer failing.Close()
	off := ident.New(ident.Config{PLC: n.RelayURL(), Mode: ident.ModeOff})
	defer off.Close()
	for _, c := range []struct {
		name  string
		r     *ident.Resolver
		first attribution
		again attribution
		want  string
		byRev int64
		moved int64
	}{
		{"document, a first", on, attribution{a, newer}, attribution{b, older}, b, 0, 1},
		{"document, b first", on, attribution{b, older}, attribution{a, newer}, b, 0, 0},
		{"no resolver", nil, attribution{b, older}, attribution{a, newer}, a, 1, 1},
		{"verify off", off, attribution{b, older}, attribution{a, newer}, a, 1, 1},
		{"resolution fails", failing, attribution{b, older}, attribution{a, newer}, a, 1, 1},
	} {
		bs := &Bootstrap{inflight: map[string]attribution{did: c.first}, cfg: Config{Identity: c.r}}
		bs.fleet.Store(newFleetState(EnumerateHosts))
		if !bs.listedAgain(context.Background(), c.again.host, upstream.RepoEntry{DID: did, Rev: c.again.rev}) {
			t.Fatalf("%s: a DID in flight was not skipped", c.name)
		}
		p := bs.hosts().snapshot()
		if got := bs.hostFor(did); got != c.want || p.AttributedByRev != c.byRev || p.Reattributed != c.moved {
			t.Errorf("%s: fetched from %s (want %s), by rev %d (want %d), reattributed %d (want %d)",
				c.name, got, c.want, p.AttributedByRev, c.byRev, p.Reattributed, c.moved)
		}
	}
}

// TestListedAgainReservesActive: the in-flight check of an active entry
// reserves its DID in the same step, so a second lane listing it before
// the first has read the store skips it (attributing it by rev), and a
// released reservation lets it be listed again.
func TestListedAgainReservesActive(t *testing.T) {
	b := &Bootstrap{inflight: map[string]attribution{}}
	b.fleet.Store(newFleetState(EnumerateHosts))
	const did = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	if b.listedAgain(context.Background(), "a", upstream.RepoEntry{DID: did, Rev: "3k1", Active: true}) {
		t.Fatal("a DID not in flight was skipped")
	}
	if !b.listedAgain(context.Background(), "b", upstream.RepoEntry{DID: did, Rev: "3k2", Active: true}) || b.hostFor(did) != "b" {
		t.Fatalf("a DID reserved by a was not skipped by b, or not attributed to b's newer rev (%q)", b.hostFor(did))
	}
	b.release(did)
	if b.listedAgain(context.Background(), "c", upstream.RepoEntry{DID: did, Rev: "3k3", Active: true}) {
		t.Fatal("a released DID was skipped")
	}
}

// rosterFleet pages listHosts from pages by cursor.
type rosterFleet struct {
	FleetSource
	pages map[string]upstream.HostsPage
	asked int
}

func (f *rosterFleet) ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error) {
	f.asked++
	return f.pages[cursor], nil
}

// TestRosterBounds: the roster read ends at a cursor that repeats any of
// the read (a cycle: counted as a loop, its hosts listed, no cut), and at
// its host bound with a cursor still pending (a cut: counted by reason,
// on /status through rosterRead.cut; the hosts read are kept).
func TestRosterBounds(t *testing.T) {
	host := func(h string) []upstream.HostEntry { return []upstream.HostEntry{{Host: h, Status: "active"}} }
	cycle := map[string]upstream.HostsPage{
		"":  {Hosts: host("a.test"), Cursor: "1"},
		"1": {Hosts: host("b.test"), Cursor: "2"},
		"2": {Hosts: host("c.test"), Cursor: "1"},
	}
	long := map[string]upstream.HostsPage{
		"":  {Hosts: host("a.test"), Cursor: "1"},
		"1": {Hosts: host("b.test"), Cursor: "2"},
		"2": {Hosts: append(host("c.test"), host("d.test")...), Cursor: "3"},
		"3": {Hosts: host("e.test")},
	}
	for _, c := range []struct {
		name      string
		pages     map[string]upstream.HostsPage
		max       int
		want      []string
		cut       string
		loops     float64
		cuts      float64
		pagesRead int
	}{
		{"cycle", cycle, 10, []string{"a.test", "b.test", "c.test"}, "", 1, 0, 3},
		{"whole", long, 10, []string{"a.test", "b.test", "c.test", "d.test", "e.test"}, "", 0, 0, 4},
		{"hosts bound at a page's end", long, 2, []string{"a.test", "b.test"}, upstream.CutTooLarge, 0, 1, 2},
		{"hosts bound within a page", long, 3, []string{"a.test", "b.test", "c.test"}, upstream.CutTooLarge, 0, 1, 3},
	} {
		reg := prometheus.NewRegistry()
		f := &rosterFleet{pages: c.pages}
		b := &Bootstrap{cfg: Config{Fleet: f, Metrics: NewMetrics(reg), Logger: slog.New(slog.DiscardHandler)}}
		rr, err := b.roster(context.Background(), c.max)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		loops := promtest.Value(t, reg, "backstream_listrepos_cursor_loops_total", nil)
		cuts := promtest.Sum(t, reg, "backstream_listrepos_cut_total")
		if !slices.Equal(rr.Listed, c.want) || rr.Cut != c.cut || loops != c.loops || cuts != c.cuts || f.asked != c.pagesRead {
			t.Errorf("%s: hosts %v (want %v), cut %q (want %q), loops %v (want %v), cuts %v (want %v), pages %d (want %d)",
				c.name, rr.Listed, c.want, rr.Cut, c.cut, loops, c.loops, cuts, c.cuts, f.asked, c.pagesRead)
		}
	}
}
