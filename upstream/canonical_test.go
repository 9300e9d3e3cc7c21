package upstream

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/promtest"
)

// TestCanonicalHost: the one form hosts are named and compared in.
func TestCanonicalHost(t *testing.T) {
	for _, c := range []struct{ scheme, host, want string }{
		{"https", "pds.example.com", "pds.example.com"},
		{"https", "PDS.Example.COM", "pds.example.com"},
		{"https", "pds.example.com:443", "pds.example.com"},
		{"HTTPS", "pds.example.com:0443", "pds.example.com"},
		{"https", "pds.example.com.", "pds.example.com"},
		{"https", "pds.example.com.:443", "pds.example.com"},
		{"https", "pds.example.com:", "pds.example.com"},
		{"https", "pds.example.com:80", "pds.example.com:80"},
		{"https", "pds.example.com:8443", "pds.example.com:8443"},
		{"http", "pds.example.com:80", "pds.example.com"},
		{"http", "pds.example.com:443", "pds.example.com:443"},
		{"wss", "relay.example.com:443", "relay.example.com"},
		{"ws", "relay.example.com:80", "relay.example.com"},
		{"https", "[2001:DB8::1]:443", "[2001:db8::1]"},
		{"https", "[2001:db8::1]", "[2001:db8::1]"},
		{"https", "[2001:db8::1]:8443", "[2001:db8::1]:8443"},
		{"http", "127.0.0.1:8080", "127.0.0.1:8080"},
		{"", "PDS.example.com.:443", "pds.example.com:443"},
		{"https", "", ""},
	} {
		if got := CanonicalHost(c.scheme, c.host); got != c.want {
			t.Errorf("CanonicalHost(%q, %q) = %q, want %q", c.scheme, c.host, got, c.want)
		}
		if got := CanonicalHost(c.scheme, CanonicalHost(c.scheme, c.host)); got != c.want {
			t.Errorf("CanonicalHost(%q, %q) twice = %q, want %q", c.scheme, c.host, got, c.want)
		}
	}
}

// TestFinalHostCanonical: a download redirected to a URL that writes its
// host in upper case with a trailing dot names the host as a DID document
// naming it does (ident compares the two): lower case, no dot.
func TestFinalHostCanonical(t *testing.T) {
	pds := pdsServer(t)
	relay := redirectRelay(t, func(did string) string { return pds.hostURL("PDS.Internal.") + "/car?did=" + did })
	c, _ := testClient(t, relay.URL, func(o *Options) {
		o.Resolve = staticResolver(map[string]string{"pds.internal.": "127.0.0.1", "pds.internal": "127.0.0.1"})
	})
	d, err := c.GetRepo(context.Background(), testDID)
	if err != nil {
		t.Fatalf("GetRepo: %v", err)
	}
	defer d.Remove()
	if want := "pds.internal:" + pds.port(); d.FinalHost != want {
		t.Fatalf("FinalHost %q, want %q", d.FinalHost, want)
	}
}

// TestListHostsCanonical: a roster hostname written with the relay's
// scheme's default port, in upper case or with a trailing dot is the host
// a download from it names (FinalHost) and a DID document names.
func TestListHostsCanonical(t *testing.T) {
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"hosts":[{"hostname":"PDS.Example.com:80","status":"active"},` +
			`{"hostname":"pds2.example.com.","status":"active"},{"hostname":"[2001:DB8::1]:80"},` +
			`{"hostname":"pds3.example.com:8080"}]}`))
	})
	c, _ := testClient(t, relay.URL, nil)
	pg, err := c.ListHosts(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range pg.Hosts {
		got = append(got, h.Host)
	}
	want := []string{"pds.example.com", "pds2.example.com", "[2001:db8::1]", "pds3.example.com:8080"}
	if !slices.Equal(got, want) || pg.Dropped != 0 {
		t.Fatalf("roster hosts %v (dropped %d), want %v", got, pg.Dropped, want)
	}
}

// spellingsFixture is a PDS whose getRepo answers come from a relay
// redirect naming the host in upper case with a trailing dot, while
// requests asked of the host directly name it in its canonical form: one
// host, two spellings. Its first request of path waits for hold.
type spellingsFixture struct {
	pds     *server
	c       *Client
	reg     *prometheus.Registry
	direct  string // the host as the roster names it
	started chan struct{}
	hold    chan struct{}
}

func newSpellingsFixture(t *testing.T, path string, header http.Header) *spellingsFixture {
	f := &spellingsFixture{started: make(chan struct{}), hold: make(chan struct{})}
	var first atomic.Bool
	f.pds = newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path && first.CompareAndSwap(false, true) {
			close(f.started)
			select {
			case <-f.hold:
			case <-r.Context().Done():
				return
			}
		}
		switch r.URL.Path {
		case "/xrpc/com.atproto.sync.getRepo":
			for k, v := range header {
				w.Header()[k] = v
			}
			w.Header().Set("Content-Type", "application/vnd.ipld.car")
			w.Write(carBody)
		case "/xrpc/com.atproto.sync.listRepos":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"repos":[]}`)
		default:
			http.NotFound(w, r)
		}
	})
	relay := redirectRelay(t, func(did string) string {
		return f.pds.hostURL("PDS.Internal.") + "/xrpc/com.atproto.sync.getRepo?did=" + did
	})
	f.reg = prometheus.NewRegistry()
	f.c, _ = testClient(t, relay.URL, func(o *Options) {
		o.HostWorkers = 1
		o.Metrics = NewMetrics(f.reg)
		o.Resolve = staticResolver(map[string]string{"pds.internal.": "127.0.0.1", "pds.internal": "127.0.0.1"})
	})
	f.direct = "pds.internal:" + f.pds.port()
	return f
}

// TestOneHostOneSlot: a download the relay redirected to a host spelled
// PDS.Internal. and one asked of pds.internal directly count against one
// per-host slot cap: with the cap at one, the second is refused as busy.
func TestOneHostOneSlot(t *testing.T) {
	f := newSpellingsFixture(t, "/xrpc/com.atproto.sync.getRepo", nil)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		d, err := f.c.GetRepo(ctx, testDID)
		if err == nil {
			d.Remove()
		}
		done <- err
	}()
	<-f.started
	if n := f.c.HostDownloads("PDS.internal.:" + f.pds.port()); n != 1 {
		close(f.hold)
		t.Fatalf("HostDownloads of the host spelled PDS.internal. while the redirected download holds its slot: %d, want 1", n)
	}
	d, err := f.c.HostGetRepo(ctx, f.direct, testDID)
	if err == nil {
		d.Remove()
	}
	close(f.hold)
	if !errors.Is(err, ErrHostBusy) {
		t.Fatalf("a direct download from %s while a redirected one to PDS.Internal. holds its one slot: %v, want ErrHostBusy", f.direct, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("redirected download: %v", err)
	}
	if n := f.c.HostDownloads("PDS.internal.:" + f.pds.port()); n != 0 {
		t.Fatalf("%d slots still held", n)
	}
}

// TestOneHostOnePace: a budget a host announces as spent on an answer to a
// redirected download (the host spelled PDS.Internal.) holds the requests
// asked of the host directly (pds.internal) until its reset.
func TestOneHostOnePace(t *testing.T) {
	spent := http.Header{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)}}
	f := newSpellingsFixture(t, "/xrpc/com.atproto.sync.listRepos", spent)
	ctx := context.Background()
	listed := make(chan error, 1)
	go func() {
		_, err := f.c.HostListRepos(ctx, f.direct, "", 10)
		listed <- err
	}()
	<-f.started // a direct request in flight: the host's pace is live
	d, err := f.c.GetRepo(ctx, testDID)
	if err != nil {
		t.Fatalf("redirected download: %v", err)
	}
	d.Remove()
	close(f.hold)
	if err := <-listed; err != nil {
		t.Fatalf("listRepos: %v", err)
	}
	waited := func() float64 {
		return promtest.Value(t, f.reg, "backstream_upstream_getrepo_limited_total", map[string]string{"limit": limitRatePace})
	}
	before := waited()
	cancelled, cancel := context.WithCancel(ctx)
	cancel() // the pace may not wait: a spent budget fails at once
	_, err = f.c.HostListRepos(cancelled, f.direct, "", 10)
	if waited() != before+1 || !errors.Is(err, context.Canceled) {
		t.Fatalf("a direct listRepos after the host announced its budget spent: %v, %v pace waits, want one", err, waited()-before)
	}
}

// TestExemptAddressesAnySpelling: a trusted endpoint (GuardedDial) is
// exempt from the address policy in every spelling of its host (case,
// trailing dot), and no other host is.
func TestExemptAddressesAnySpelling(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {})
	c, _ := testClient(t, "https://relay.example", func(o *Options) {
		o.Resolve = staticResolver(map[string]string{"plc.example": "127.0.0.1", "plc.example.": "127.0.0.1", "other.example": "127.0.0.1"})
	})
	dial := c.GuardedDial(srv.hostURL("PLC.Example.") + "/")
	for _, addr := range []string{"plc.example:" + srv.port(), "PLC.example.:" + srv.port()} {
		conn, err := dial(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatalf("dial %s, trusted as PLC.Example.: %v", addr, err)
		}
		conn.Close()
	}
	if conn, err := dial(context.Background(), "tcp", "other.example:"+srv.port()); !errors.Is(err, ErrForbiddenRedirect) {
		if conn != nil {
			conn.Close()
		}
		t.Fatalf("dial of an untrusted host on loopback: %v, want refused", err)
	}
}
