// fixture_test.go holds the small real-HTTP fixtures the client tests run
// against: httptest servers on 127.0.0.1 and a name resolver seam.

package upstream

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server starts an httptest server on 127.0.0.1 and counts its requests.
type server struct {
	*httptest.Server
	hits atomic.Int64
}

func newServer(t testing.TB, h http.HandlerFunc) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h(w, r)
	}))
	t.Cleanup(s.Close)
	localServers.add(t, s.Listener.Addr().String())
	return s
}

// localServers records the servers each top-level test started, so
// testClient can declare them as the loopback hosts a loopback relay may
// redirect to — the way an operator declares local PDS hosts on ports of
// their own (Options.LoopbackHosts). A client built with New directly
// declares none.
var localServers serverSet

type serverSet struct {
	mu     sync.Mutex
	byTest map[string][]string
}

func rootTest(t testing.TB) string { name, _, _ := strings.Cut(t.Name(), "/"); return name }

func (s *serverSet) add(t testing.TB, addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byTest == nil {
		s.byTest = map[string][]string{}
	}
	root := rootTest(t)
	if len(s.byTest[root]) == 0 {
		t.Cleanup(func() {
			s.mu.Lock()
			delete(s.byTest, root)
			s.mu.Unlock()
		})
	}
	s.byTest[root] = append(s.byTest[root], addr)
}

func (s *serverSet) of(t testing.TB) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.byTest[rootTest(t)])
}

// port returns the server's port.
func (s *server) port() string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

// hostURL returns http://<name>:<port> for the server.
func (s *server) hostURL(name string) string {
	return "http://" + net.JoinHostPort(name, s.port())
}

// staticResolver maps names to fixed addresses; unknown names fail.
func staticResolver(m map[string]string) Resolver {
	return func(ctx context.Context, host string) ([]netip.Addr, error) {
		v, ok := m[strings.ToLower(host)]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var out []netip.Addr
		for _, s := range strings.Split(v, ",") {
			out = append(out, netip.MustParseAddr(s))
		}
		return out, nil
	}
}

// testClient builds a client with a fresh scratch dir and short timeouts.
func testClient(t *testing.T, relay string, mod func(*Options)) (*Client, string) {
	t.Helper()
	scratch := t.TempDir()
	opts := Options{
		ScratchDir:            scratch,
		ConnectTimeout:        2 * time.Second,
		ResponseHeaderTimeout: 5 * time.Second,
		IdleBodyTimeout:       5 * time.Second,
		UserAgent:             "backstream-test",
	}
	if u, err := url.Parse(relay); err == nil && isLoopbackHost(u.Hostname()) {
		opts.LoopbackHosts = localServers.of(t)
	}
	if mod != nil {
		mod(&opts)
	}
	c, err := New(relay, opts)
	if err != nil {
		t.Fatalf("New(%q): %v", relay, err)
	}
	t.Cleanup(c.Close)
	return c, scratch
}

// assertScratchEmpty fails if any file is left in dir.
func assertScratchEmpty(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("read scratch: %v", err)
	}
	if len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("scratch not empty: %v", names)
	}
}

// xrpcError writes an XRPC error body.
func xrpcError(w http.ResponseWriter, status int, name, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error":%q,"message":%q}`, name, msg)
}

const testDID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"
