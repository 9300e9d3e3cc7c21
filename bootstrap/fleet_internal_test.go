package bootstrap

import (
	"context"
	"strings"
	"testing"

	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
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

// TestRosterStatus: a roster status is stored only as a short lower-case
// word; anything else a relay sends is "other".
func TestRosterStatus(t *testing.T) {
	for in, want := range map[string]string{"active": "active", "throttled": "throttled", "": "other", "ACTIVE": "other",
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
