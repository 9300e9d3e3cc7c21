package upstream

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
)

// TestGetRepoLoopbackRelayRedirectToLocalPort: a relay on loopback made
// getRepo redirect to backstream's own /debug/pprof on its listen port, and
// the redirect was followed (loopback was allowed wholesale for a loopback
// relay). Now a loopback relay may redirect only to its own port: a redirect
// to another local port — by IP literal, by "localhost", or by a name that
// resolves to loopback (caught at dial time) — is refused as
// ErrForbiddenRedirect (permanent), counted with reason loopback-port, and
// the local server is never reached. A loopback host the operator declares
// (Options.LoopbackHosts) is followed, and so is the relay's own port under
// another loopback name.
func TestGetRepoLoopbackRelayRedirectToLocalPort(t *testing.T) {
	own := pdsServer(t) // stands in for backstream's own listener (/debug/pprof)
	var target atomic.Value
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/car" { // the relay's own port under another name
			w.Write(carBody)
			return
		}
		http.Redirect(w, r, target.Load().(string), http.StatusFound)
	})
	getVia := func(t *testing.T, opts Options, to string) (*Download, error) {
		target.Store(to)
		opts.ScratchDir, opts.UserAgent = t.TempDir(), "backstream-test"
		opts.Resolve = staticResolver(map[string]string{"sneaky.example.com": "127.0.0.1", "localhost": "127.0.0.1"})
		c, err := New(relay.URL, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.GetRepo(context.Background(), testDID)
	}
	for name, tc := range map[string]struct {
		target string
		stage  string
	}{
		"literal":   {own.URL + "/debug/pprof/", "redirect"},
		"localhost": {own.hostURL("localhost") + "/debug/pprof/", "redirect"},
		"ipv6":      {own.hostURL("::1") + "/debug/pprof/", "redirect"},
		"dns-trick": {own.hostURL("sneaky.example.com") + "/debug/pprof/", "dial"},
	} {
		t.Run(name, func(t *testing.T) {
			m := NewMetrics(nil)
			before := own.hits.Load()
			_, err := getVia(t, Options{Metrics: m}, tc.target)
			if !errors.Is(err, ErrForbiddenRedirect) || Classify(err) != ClassPermanent {
				t.Fatalf("redirect to %s: %v, want a forbidden redirect", tc.target, err)
			}
			if own.hits.Load() != before {
				t.Fatal("the local server was reached")
			}
			if got := counterValue(t, m.refusedTarget.WithLabelValues(tc.stage, "loopback-port")); got != 1 {
				t.Fatalf("refused{%s, loopback-port} = %v, want 1", tc.stage, got)
			}
		})
	}
	t.Run("declared", func(t *testing.T) {
		d, err := getVia(t, Options{LoopbackHosts: []string{own.Listener.Addr().String()}}, own.URL+"/car")
		if err != nil {
			t.Fatalf("a declared loopback host: %v", err)
		}
		d.Remove()
	})
	t.Run("relay port", func(t *testing.T) {
		d, err := getVia(t, Options{}, relay.hostURL("localhost")+"/car")
		if err != nil {
			t.Fatalf("the relay's own port: %v", err)
		}
		d.Remove()
	})
	if _, err := New("https://relay.example.com", Options{ScratchDir: t.TempDir(), LoopbackHosts: []string{own.Listener.Addr().String()}}); err == nil {
		t.Fatal("loopback hosts accepted for a relay off loopback")
	}
	if _, err := New(relay.URL, Options{ScratchDir: t.TempDir(), LoopbackHosts: []string{"10.0.0.1:80"}}); err == nil {
		t.Fatal("a loopback host off loopback accepted")
	}
}
