package oracle

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/backstream/backstream/upstream"
)

// TestHostsShareTheRelayPort: a client following a loopback relay may be
// redirected only to the relay's own port (no blanket loopback allowance),
// so every PDS host listens on the relay's port at a loopback address of its
// own — with the relay on one address, and with the relay on every address
// (the hosts then answer on its listener). An upstream client told of no
// other host follows every getRepo redirect, and records each host as the
// final host. A scripted redirect to another local port (standing in for
// backstream's own /debug/pprof) is refused and never reaches it.
func TestHostsShareTheRelayPort(t *testing.T) {
	var hits atomic.Int64
	own := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hits.Add(1) }))
	defer own.Close()
	for _, listen := range []string{"127.0.0.1:0", "0.0.0.0:0"} {
		t.Run(listen, func(t *testing.T) {
			cfg := quietCfg(12)
			cfg.Listen = listen
			n := startNet(t, cfg)
			relay, err := url.Parse(n.RelayURL())
			if err != nil {
				t.Fatal(err)
			}
			seen := map[string]bool{relay.Hostname(): true}
			for _, h := range n.HostURLs() {
				u, _ := url.Parse(h)
				ip, err := netip.ParseAddr(u.Hostname())
				if err != nil || !ip.IsLoopback() || u.Port() != relay.Port() || seen[u.Hostname()] {
					t.Fatalf("host %s: want the relay's port (%s) on a loopback address of its own", h, relay.Port())
				}
				seen[u.Hostname()] = true
			}
			c, err := upstream.New(n.RelayURL(), upstream.Options{ScratchDir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fetched := map[int]bool{}
			for _, a := range n.World().Accounts() {
				if !a.Active || fetched[a.Host] {
					continue
				}
				d, err := c.GetRepo(context.Background(), a.DID)
				if err != nil {
					t.Fatalf("getRepo %s (host %d): %v", a.DID, a.Host, err)
				}
				d.Remove()
				if want := n.hosts[a.Host].hostname(); d.FinalHost != want {
					t.Fatalf("final host %s, want %s", d.FinalHost, want)
				}
				fetched[a.Host] = true
			}
			if len(fetched) != cfg.Hosts {
				t.Fatalf("fetched from %d hosts of %d", len(fetched), cfg.Hosts)
			}

			did := n.World().Accounts()[0].DID
			_, port, _ := net.SplitHostPort(own.Listener.Addr().String())
			n.Faults().RedirectTo(did, "http://127.0.0.1:"+port+"/debug/pprof/", 1)
			if _, err := c.GetRepo(context.Background(), did); !errors.Is(err, upstream.ErrForbiddenRedirect) {
				t.Fatalf("redirect to a local port: %v, want a forbidden redirect", err)
			}
			if hits.Load() != 0 || n.Faults().Fired(FaultRedirect) != 1 {
				t.Fatalf("local server hit %d times, redirect fired %d", hits.Load(), n.Faults().Fired(FaultRedirect))
			}
		})
	}
}
