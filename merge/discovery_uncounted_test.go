package merge

import (
	"context"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/upstream"
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
