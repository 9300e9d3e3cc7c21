package backfill_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

// TestJobsBlackholedHostCostsFewConnectTimeouts: the relay redirects the
// accounts of one PDS host to a host that is blackholed (its name never
// resolves: each try waits the whole connect timeout, as a dropped SYN
// does), the others to a healthy host; a few workers download them all
// through the real client. Each try of a blackholed host used to wait the
// connect timeout, and each job makes 4: accounts × 4 waits, a worker's
// connect timeout each. The host is found down after 3 tries in a row
// without an answer; the downloads asked of it while it is down fail at
// once (class transient, no backoff slept for them), so the waits are a
// handful however many accounts it holds. The healthy host's accounts are
// all archived. Real time, a connect timeout of 100 ms; the jobs' backoff
// is on the fake clock.
func TestJobsBlackholedHostCostsFewConnectTimeouts(t *testing.T) {
	e := newEnv(t, smallWorld(40, 3))
	const workers, dead = 4, "dead.test"
	connect := 100 * time.Millisecond
	hosts := e.net.HostURLs()
	byDID := map[string]world.Account{}
	for _, a := range e.activeAccounts(0) {
		byDID[a.DID] = a
	}
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := byDID[r.URL.Query().Get("did")]
		if !ok {
			http.NotFound(w, r)
			return
		}
		base := hosts[a.Host]
		if a.Host == 0 {
			base = "http://" + dead
		}
		http.Redirect(w, r, base+r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(relay.Close)
	var tries, waited atomic.Int64
	resolve := func(ctx context.Context, host string) ([]netip.Addr, error) {
		if host != dead {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
		tries.Add(1)
		<-ctx.Done() // blackholed: nothing ever comes back
		waited.Add(1)
		return nil, ctx.Err()
	}
	reg := prometheus.NewRegistry()
	c, err := upstream.New(relay.URL, upstream.Options{ScratchDir: e.store.ScratchDir(), ConnectTimeout: connect,
		Resolve: resolve, LoopbackHosts: e.net.LoopbackHosts(), Metrics: upstream.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := e.runner(func(o *backfill.Options) { o.Source = c })

	var accts []world.Account
	deadAccts := 0
	for _, a := range byDID {
		accts = append(accts, a)
		if a.Host == 0 {
			deadAccts++
		}
	}
	if deadAccts < 10 || deadAccts == len(accts) {
		t.Fatalf("world: %d of %d accounts on host 0, want at least 10 and not all", deadAccts, len(accts))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	jobs := make(chan world.Account)
	var mu sync.Mutex
	results := map[string]backfill.Result{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for a := range jobs {
				res, err := r.Run(ctx, backfill.Request{DID: a.DID})
				if err != nil {
					t.Errorf("%s: %v", a.DID, err)
				}
				mu.Lock()
				results[a.DID] = res
				mu.Unlock()
			}
		})
	}
	for _, a := range accts {
		jobs <- a
	}
	close(jobs)
	wg.Wait()

	// Before the host is found down: 2 tries that did not answer, and
	// every try in flight when the third ends (at most one a worker).
	if n, bound := waited.Load(), int64(2+workers); n > bound {
		t.Fatalf("%d accounts on a blackholed host, %d workers: %d tries waited the %v connect timeout (of %d tries); want at most %d",
			deadAccts, workers, n, connect, tries.Load(), bound)
	}
	var attempts int
	for _, a := range accts {
		res := results[a.DID]
		if a.Host != 0 {
			if res.Status != archive.StatusComplete {
				t.Errorf("%s on the healthy host: %v %q %v", a.DID, res.Status, res.Class, res.Err)
			}
			continue
		}
		attempts += res.Attempts
		if res.Status != archive.StatusFailed || res.Class != backfill.ClassTransient {
			t.Errorf("%s on the blackholed host: %v %q %v, want failed transient", a.DID, res.Status, res.Class, res.Err)
		}
		if st := e.state(a.DID); st.Status != archive.StatusFailed || st.ErrClass != backfill.ClassTransient {
			t.Errorf("%s on the blackholed host: stored %v %q, want failed transient", a.DID, st.Status, st.ErrClass)
		}
	}
	// A try that met the host down ends its job at once: a backoff is
	// slept only after a try that waited the connect timeout.
	if sleeps := len(e.clock.Sleeps()); int64(sleeps) > waited.Load() {
		t.Errorf("%d backoff sleeps for %d tries that waited the connect timeout (%d attempts on the blackholed host): a host found down was slept on",
			sleeps, waited.Load(), attempts)
	}
	if n := counter(t, reg, "backstream_upstream_host_down_total", nil); n != 1 {
		t.Errorf("backstream_upstream_host_down_total = %v, want 1 (found down once)", n)
	}
	if n := counter(t, reg, "backstream_upstream_getrepo_limited_total", map[string]string{"limit": "host_down"}); n < float64(deadAccts-int(waited.Load())) {
		t.Errorf(`getrepo_limited_total{limit="host_down"} = %v, want at least %d (a try of each account not waited)`, n, deadAccts-int(waited.Load()))
	}
	t.Logf("%d accounts on the blackholed host, %d workers: %d tries waited the connect timeout, %d attempts in all", deadAccts, workers, waited.Load(), attempts)
}
