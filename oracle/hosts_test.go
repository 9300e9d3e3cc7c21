package oracle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// TestRelayPortRedrawn: a host address taken on a drawn relay port makes
// the relay draw another, so the hosts still share its port; only a port
// asked for, or portDraws draws in a row, leave a host on a port of its
// own.
func TestRelayPortRedrawn(t *testing.T) {
	for _, c := range []struct {
		name        string
		refuse      int // relay ports on which host 1's address is taken
		wantDraws   int
		wantOwnPort bool
	}{
		{"taken on two drawn ports", 2, 3, false},
		{"taken on every drawn port", portDraws, portDraws, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			draws, refused := 0, 0
			listen := func(network, addr string) (net.Listener, error) {
				if ap, err := netip.ParseAddrPort(addr); err == nil && ap.Addr() == hostAddr(1) {
					draws++ // host 1's address is tried once on each drawn relay port
					if refused < c.refuse {
						refused++
						return nil, errors.New("address in use (test)")
					}
				}
				return net.Listen(network, addr)
			}
			ln, hls, err := bindListeners(listen, "127.0.0.1:0", 3)
			if err != nil {
				t.Fatal(err)
			}
			defer closeAll(ln, hls)
			_, relayPort, _ := net.SplitHostPort(ln.Addr().String())
			_, hostPort, _ := net.SplitHostPort(hls[1].Addr().String())
			if draws != c.wantDraws || (hostPort != relayPort) != c.wantOwnPort {
				t.Fatalf("%d relay ports drawn, host 1 at %s (relay %s); want %d draws, a port of its own %v",
					draws, hls[1].Addr(), ln.Addr(), c.wantDraws, c.wantOwnPort)
			}
			for i, hl := range hls {
				if i != 1 && hl.Addr().String() != netip.AddrPortFrom(hostAddr(i), ln.Addr().(*net.TCPAddr).AddrPort().Port()).String() {
					t.Fatalf("host %d at %s, want its own address on the relay's port", i, hl.Addr())
				}
			}
		})
	}
}

// TestHostOnAPortOfItsOwn: a PDS host whose address cannot be bound on
// the relay's port (another socket holds it) takes a port of its own on
// 127.0.0.1. A client given the network's LoopbackHosts follows the relay's
// redirect there; one told only of the relay refuses it, which is why every
// client of a simulated network is given them.
func TestHostOnAPortOfItsOwn(t *testing.T) {
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := probe.Addr().(*net.TCPAddr).Port
	probe.Close()
	taken, err := net.Listen("tcp", netip.AddrPortFrom(hostAddr(0), uint16(port)).String())
	if err != nil {
		t.Fatalf("hold host 0's address: %v", err)
	}
	defer taken.Close()
	cfg := quietCfg(12)
	cfg.Listen = fmt.Sprintf("127.0.0.1:%d", port)
	n := startNet(t, cfg)
	own, err := url.Parse(n.HostURLs()[0])
	if err != nil || own.Hostname() != "127.0.0.1" || own.Port() == strconv.Itoa(port) {
		t.Fatalf("host 0 at %s, want a port of its own on 127.0.0.1", n.HostURLs()[0])
	}
	if got := n.LoopbackHosts(); len(got) != cfg.Hosts || got[0] != own.Host {
		t.Fatalf("LoopbackHosts %v, want host 0's %s first", got, own.Host)
	}
	var did string
	for _, a := range n.World().Accounts() {
		if a.Active && a.Host == 0 {
			did = a.DID
			break
		}
	}
	fetch := func(loopback []string) error {
		c, err := upstream.New(n.RelayURL(), upstream.Options{ScratchDir: t.TempDir(), LoopbackHosts: loopback})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		d, err := c.GetRepo(context.Background(), did)
		if err == nil {
			d.Remove()
		}
		return err
	}
	if err := fetch(n.LoopbackHosts()); err != nil {
		t.Fatalf("getRepo %s with the network's loopback hosts: %v", did, err)
	}
	if err := fetch(nil); err == nil || !strings.Contains(err.Error(), "forbidden redirect") {
		t.Fatalf("getRepo %s told only of the relay: %v, want a forbidden redirect", did, err)
	}
}

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

// listReposPage GETs one listRepos page of base.
func listReposPage(t *testing.T, base, cursor string) *http.Response {
	t.Helper()
	u := base + "/xrpc/com.atproto.sync.listRepos?limit=1000"
	if cursor != "" {
		u += "&cursor=" + url.QueryEscape(cursor)
	}
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	return resp
}

// listedDIDs is every DID listRepos at base lists.
func listedDIDs(t *testing.T, base string) map[string]bool {
	t.Helper()
	all, _ := listAll(t, base, 1000)
	out := make(map[string]bool, len(all))
	for _, r := range all {
		out[r.Did] = true
	}
	return out
}

// TestRelayIndexMissing: with RelayIndexMissing the relay's listRepos leaves
// out about that fraction of the accounts (exactly those RelayIndexOmits
// names), while the hosts' own listRepos together list every one.
func TestRelayIndexMissing(t *testing.T) {
	cfg := quietCfg(400)
	cfg.Hosts = 3
	cfg.RelayIndexMissing = 0.05
	n := startNet(t, cfg)
	relay := listedDIDs(t, n.RelayURL())
	hosts := map[string]bool{}
	for _, h := range n.HostURLs() {
		for d := range listedDIDs(t, h) {
			hosts[d] = true
		}
	}
	missing := 0
	for _, a := range n.World().Accounts() {
		if a.Status == world.StatusDeleted {
			continue
		}
		if !hosts[a.DID] {
			t.Fatalf("%s: listed by no host", a.DID)
		}
		if relay[a.DID] == n.RelayIndexOmits(a.DID) {
			t.Fatalf("%s: relay lists it %v, RelayIndexOmits %v", a.DID, relay[a.DID], n.RelayIndexOmits(a.DID))
		}
		if !relay[a.DID] {
			missing++
		}
	}
	if missing < 8 || missing > 40 {
		t.Fatalf("relay left out %d of 400, want about 5%%", missing)
	}
}

// TestHostFaults: DownHost answers 503 until it expires; SlowHost delays
// every answer; a window limit is announced in ratelimit-* headers on served
// answers before any 429; PeakConcurrency counts requests answered at once.
func TestHostFaults(t *testing.T) {
	n := startNet(t, quietCfg(40))
	h0 := n.HostURLs()[0]
	n.Faults().DownHost(0, 300*time.Millisecond)
	if resp := listReposPage(t, h0, ""); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("down host: %s, want 503", resp.Status)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp := listReposPage(t, h0, "")
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("host still down after its window")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n.Faults().Fired(FaultHostDown) == 0 {
		t.Fatal("host_down never fired")
	}

	n.Faults().SlowHost(1, 200*time.Millisecond)
	var wg sync.WaitGroup
	start := time.Now()
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(n.HostURLs()[1] + "/xrpc/com.atproto.sync.getRepo?did=did:plc:none")
			if err == nil {
				resp.Body.Close()
			}
		}()
	}
	wg.Wait()
	if el := time.Since(start); el < 200*time.Millisecond {
		t.Fatalf("slow host answered in %v", el)
	}
	if p := n.PeakConcurrency(1); p != 4 {
		t.Fatalf("peak concurrency %d, want 4 (four getRepo requests held by the delay)", p)
	}

	n.Faults().LimitHost(0, 1000, time.Minute)
	var did string
	for _, a := range n.World().Accounts() {
		if a.Host == 0 && a.Active {
			did = a.DID
			break
		}
	}
	resp, err := http.Get(h0 + "/xrpc/com.atproto.sync.getRepo?did=" + did)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("ratelimit-limit") != "1000" || resp.Header.Get("ratelimit-remaining") != "999" ||
		resp.Header.Get("ratelimit-policy") != "1000;w=60" || resp.Header.Get("ratelimit-reset") == "" {
		t.Fatalf("served answer: %s, headers %v", resp.Status, resp.Header)
	}
}

// TestClientPacesAnnouncedLimit: a PDS that announces its window limit in
// ratelimit-* headers is paced by the client — a request past the budget
// is not asked of the host, it fails rate limited with the wait for the
// reset, which the caller waits out (as a backfill job does) — so many
// more downloads than one window allows finish without a single 429;
// listHosts lists every host, and HostGetRepo fetches from the host asked
// (FinalHost), never through the relay.
func TestClientPacesAnnouncedLimit(t *testing.T) {
	n := startNet(t, quietCfg(40))
	reg := prometheus.NewRegistry()
	c, err := upstream.New(n.RelayURL(), upstream.Options{ScratchDir: t.TempDir(), Metrics: upstream.NewMetrics(reg), LoopbackHosts: n.LoopbackHosts()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	hp, err := c.ListHosts(context.Background(), "", 0)
	if err != nil || len(hp.Hosts) != 2 || hp.Hosts[0].Status != "active" {
		t.Fatalf("listHosts: %+v, %v", hp, err)
	}
	host := hp.Hosts[0].Host
	var dids []string
	for _, a := range n.World().Accounts() {
		if a.Host == 0 && a.Active {
			dids = append(dids, a.DID)
		}
	}
	const perWindow = 3
	n.Faults().LimitHost(0, perWindow, time.Second)
	want := 2*perWindow + 1 // spans at least three windows
	paced := 0
	for i := range want {
		d, err := c.HostGetRepo(context.Background(), host, dids[i%len(dids)])
		for errors.Is(err, upstream.ErrRateLimited) && upstream.RetryAfter(err) > 0 && paced < 10*want {
			paced++
			time.Sleep(upstream.RetryAfter(err)) // the reset the host announced, as a caller waits it out
			d, err = c.HostGetRepo(context.Background(), host, dids[i%len(dids)])
		}
		if err != nil {
			t.Fatalf("download %d: %v", i, err)
		}
		if d.FinalHost != host || d.Redirects != 0 {
			t.Fatalf("download from %s after %d redirects, want %s directly", d.FinalHost, d.Redirects, host)
		}
		_ = d.Remove()
	}
	if got := n.Faults().Fired(FaultRateLimit); got != 0 {
		t.Fatalf("%d 429s although every answer announced the limit", got)
	}
	if got := promtest.Value(t, reg, "backstream_upstream_getrepo_limited_total", map[string]string{"limit": "ratelimit_pace"}); got == 0 || paced == 0 {
		t.Fatalf("the client never held a request for a reset (ratelimit_pace %v, paced %d)", got, paced)
	}
	for _, a := range n.World().Accounts() {
		if rc := n.RepoCounts(a.DID); rc.RelayRequests != 0 {
			t.Fatalf("%s: %d requests through the relay", a.DID, rc.RelayRequests)
		}
	}
}

// TestMigratingListedAndServedByTheHostLeft: after Migrating, the host the
// account left lists it (with a rev newer than the account's) and serves
// the copy it had when the fault was armed, though the account has
// committed since; its own host lists its real rev and serves its current
// repo; the DID document names its own host; getRepo is counted per host.
func TestMigratingListedAndServedByTheHostLeft(t *testing.T) {
	n := startNet(t, quietCfg(10))
	did := activeDIDs(n)[0]
	acct, _ := n.World().Account(did)
	to, from := acct.Host, 1-acct.Host
	if err := n.Faults().Migrating(did, to); err == nil {
		t.Fatal("a migration from the account's own host was accepted")
	}
	if err := n.Faults().Migrating(did, from); err != nil {
		t.Fatal(err)
	}
	_, old, _ := getRepo(t, n.HostURLs()[to], did)
	if _, err := n.Emit(func(w *world.World) (world.Event, error) {
		return w.CreateRecord(did, "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
	}); err != nil {
		t.Fatal(err)
	}
	acct, _ = n.World().Account(did)
	listed := func(host int) string {
		var out struct {
			Repos []struct{ Did, Rev string }
		}
		getJSON(t, n.HostURLs()[host]+"/xrpc/com.atproto.sync.listRepos?limit=1000", &out)
		for _, r := range out.Repos {
			if r.Did == did {
				return r.Rev
			}
		}
		return ""
	}
	if got := listed(to); got != acct.Rev {
		t.Fatalf("its host lists rev %q, want %q", got, acct.Rev)
	}
	if got := listed(from); got <= acct.Rev {
		t.Fatalf("the host it left lists rev %q, want one newer-looking than %q", got, acct.Rev)
	}
	cur, _, err := n.World().RepoCAR(did)
	if err != nil {
		t.Fatal(err)
	}
	if st, b, _ := getRepo(t, n.HostURLs()[from], did); st != http.StatusOK || string(b) != string(old) || string(b) == string(cur) {
		t.Fatalf("the host it left served %d, %d bytes: want the old copy", st, len(b))
	}
	if st, b, _ := getRepo(t, n.HostURLs()[to], did); st != http.StatusOK || string(b) != string(cur) {
		t.Fatalf("its host served %d, %d bytes: want its current repo", st, len(b))
	}
	if got := n.FetchedFrom(did); got[from] != 1 || got[to] != 2 {
		t.Fatalf("getRepo per host %v, want 1 from %d and 2 from %d", got, from, to)
	}
	if n.Faults().Fired(FaultMigrating) != 1 {
		t.Fatalf("fired %d", n.Faults().Fired(FaultMigrating))
	}
	doc, err := directory(n).LookupDID(context.Background(), mustDID(t, did))
	if err != nil || doc.PDSEndpoint() != n.HostURLs()[to] {
		t.Fatalf("document names %v (%v), want %s", doc, err, n.HostURLs()[to])
	}
}
