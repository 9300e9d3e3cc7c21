package merge

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// oneDIDSource lists one page naming did, and counts the pages asked.
type oneDIDSource struct {
	upstream.RepoSource
	did   string
	pages int
}

func (s *oneDIDSource) ListRepos(context.Context, string, int) (upstream.Page, error) {
	s.pages++
	return upstream.Page{Repos: []upstream.RepoEntry{{DID: s.did, Active: true}}}, nil
}

// oneDIDHost is a HostLister whose every host lists one page naming did.
type oneDIDHost struct {
	did   string
	pages int
}

func (h *oneDIDHost) HostListRepos(context.Context, string, string, int) (upstream.Page, error) {
	h.pages++
	return upstream.Page{Repos: []upstream.RepoEntry{{DID: h.did, Active: true}}}, nil
}

// TestDiscoveryUncountedRosterListsRelay: a roster recorded without
// account counts (the relay's listHosts stopped serving accountCount, so
// each host's listing would be cut at 10,000 entries) makes discovery in
// the default mode list the relay's listRepos, as bootstrap enumerates;
// with --enumerate hosts asked it lists the hosts anyway, and a counted
// roster is listed by host in either mode.
func TestDiscoveryUncountedRosterListsRelay(t *testing.T) {
	for _, tc := range []struct {
		name, enumerate string
		accounts        uint64
		relay, host     int
	}{
		{"uncounted", "", 0, 1, 0},
		{"uncounted hosts asked", bootstrap.EnumerateHosts, 0, 0, 1},
		{"counted", "", 5, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t)
			r.apply(r.w, &archive.Unit{Hosts: []archive.HostUpdate{{Host: "a.test", Func: func(cur archive.HostState) archive.HostState {
				cur.Status, cur.Accounts = "active", tc.accounts
				return cur
			}}}})
			src := &oneDIDSource{did: "did:plc:relaylisted"}
			fleet := &oneDIDHost{did: "did:plc:hostlisted"}
			cfg := Config{Store: r.store, Writer: r.w, Source: src, Fleet: fleet, Enumerate: tc.enumerate, Logger: quiet}
			if err := Discover(t.Context(), cfg); err != nil {
				t.Fatal(err)
			}
			if src.pages != tc.relay || fleet.pages != tc.host {
				t.Fatalf("relay pages %d, host pages %d; want %d and %d", src.pages, fleet.pages, tc.relay, tc.host)
			}
		})
	}
}

// countedRoster is a bootstrap.RosterSource whose listHosts names host
// active with an account count of 5, and counts the requests.
type countedRoster struct {
	host  string
	asked int
}

func (c *countedRoster) ListHosts(context.Context, string, int) (upstream.HostsPage, error) {
	c.asked++
	return upstream.HostsPage{Hosts: []upstream.HostEntry{{Host: c.host, Status: "active", Accounts: 5}}}, nil
}

// TestDiscoveryRelayAskedListsRelay: a store whose roster a hosts-mode
// bootstrap recorded (with account counts), and a process restarted with
// --enumerate relay: discovery reads no roster (no listHosts request),
// lists no host, lists the relay's listRepos, and logs no WARN (the mode
// is the operator's, not a fallback); the host/ rows stay as recorded. In
// the default mode the same store reads the roster and lists the host.
// On main --enumerate relay listed the recorded roster's hosts.
func TestDiscoveryRelayAskedListsRelay(t *testing.T) {
	for _, tc := range []struct {
		enumerate              string
		listHosts, relay, host int
	}{{bootstrap.EnumerateRelay, 0, 1, 0}, {"", 1, 0, 1}} {
		t.Run("enumerate="+tc.enumerate, func(t *testing.T) {
			r := newRig(t)
			r.apply(r.w, &archive.Unit{Hosts: []archive.HostUpdate{{Host: "a.test", Func: func(cur archive.HostState) archive.HostState {
				cur.Status, cur.Accounts = "active", 5
				return cur
			}}}})
			src := &oneDIDSource{did: "did:plc:relaylisted"}
			fleet := &oneDIDHost{did: "did:plc:hostlisted"}
			roster := &countedRoster{host: "a.test"}
			var logs bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			cfg := Config{Store: r.store, Writer: r.w, Source: src, Fleet: fleet, Roster: roster, Enumerate: tc.enumerate, Logger: log}
			if err := Discover(t.Context(), cfg); err != nil {
				t.Fatal(err)
			}
			if roster.asked != tc.listHosts || src.pages != tc.relay || fleet.pages != tc.host {
				t.Fatalf("listHosts asked %d times, relay pages %d, host pages %d; want %d, %d and %d",
					roster.asked, src.pages, fleet.pages, tc.listHosts, tc.relay, tc.host)
			}
			if logs.Len() > 0 {
				t.Fatalf("discovery logged at WARN or above: %s", logs.String())
			}
			if hs, err := r.store.HostState("a.test"); err != nil || hs.Status != "active" || hs.Accounts != 5 {
				t.Fatalf("host/a.test after discovery: %+v, %v; want active with 5 accounts as recorded", hs, err)
			}
		})
	}
}

// manyDIDsHost is a HostLister whose host big.test lists pages of 1000
// distinct DIDs, each with a next cursor, for ever; any other host one
// page naming one DID.
type manyDIDsHost struct{ pages int }

func (h *manyDIDsHost) HostListRepos(_ context.Context, host, _ string, _ int) (upstream.Page, error) {
	if host != "big.test" {
		return upstream.Page{Repos: []upstream.RepoEntry{{DID: "did:plc:small" + host, Active: true}}}, nil
	}
	h.pages++
	var pg upstream.Page
	for i := range 1000 {
		pg.Repos = append(pg.Repos, upstream.RepoEntry{DID: fmt.Sprintf("did:plc:host%06d%04d", h.pages, i)})
	}
	pg.Cursor = fmt.Sprintf("c%d", h.pages)
	return pg, nil
}

// TestDiscoveryTooManyEntriesListsRelay: of two roster hosts, one lists
// wholly and one names more entries than its bound (twice its recorded
// account count plus 10,000): it is cut there (too_many_entries), and the relay's listRepos
// is listed after the hosts (the relay fallback, counted), as no other
// listing names the accounts past the cut. On main only every host
// failing made discovery list the relay.
func TestDiscoveryTooManyEntriesListsRelay(t *testing.T) {
	r := newRig(t)
	counted := func(cur archive.HostState) archive.HostState {
		cur.Status, cur.Accounts = "active", 1
		return cur
	}
	r.apply(r.w, &archive.Unit{Hosts: []archive.HostUpdate{{Host: "big.test", Func: counted}, {Host: "small.test", Func: counted}}})
	src := &oneDIDSource{did: "did:plc:relaylisted"}
	fleet := &manyDIDsHost{}
	reg := prometheus.NewRegistry()
	cfg := Config{Store: r.store, Writer: r.w, Source: src, Fleet: fleet, Metrics: NewMetrics(reg), Logger: quiet}
	if err := Discover(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	if want := int(upstream.HostListingBound(1)/1000) + 1; fleet.pages != want {
		t.Fatalf("host pages %d, want %d (cut past its bound)", fleet.pages, want)
	}
	if src.pages != 1 {
		t.Fatalf("relay pages %d, want 1: the relay lists the accounts past the cut", src.pages)
	}
	if got := promtest.Value(t, reg, "backstream_discovery_relay_fallback_total", nil); got != 1 {
		t.Fatalf("discovery relay fallbacks %v, want 1", got)
	}
	if _, err := r.store.RepoState("did:plc:relaylisted"); err != nil {
		t.Fatalf("the relay's account after the fallback: %v; want recorded", err)
	}
}
