package retry_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/upstream"
)

// TestHostDownParksThatHost (S4): the relay redirects every replacement
// to a PDS host that is blackholed (each try waits the connect timeout).
// Its first tries, at most its 4 slots' worth, wait and fail (transient,
// each an attempt); the client then finds the host down, and the first job
// that meets it down parks the host until its cool-off ends, durably, with
// that repo's next attempt moved there and its attempt given back; the
// host's queued repos leave the queue, charged nothing. Before, each of
// its repos failed at once against the down host and was charged an
// attempt and a backoff. Real HTTP, a connect timeout of 100 ms.
func TestHostDownParksThatHost(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 2, RecordsMean: 1, Hosts: 1, Seed: 5, Traffic: oracle.TrafficNone})
	const dead, repos = "dead.test", 40
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+dead+r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(relay.Close)
	var tries atomic.Int64
	c, err := upstream.New(relay.URL, upstream.Options{ScratchDir: e.store.ScratchDir(), ConnectTimeout: 100 * time.Millisecond,
		Resolve: func(ctx context.Context, host string) ([]netip.Addr, error) {
			tries.Add(1)
			<-ctx.Done() // blackholed
			return nil, ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	e.jobs = e.newJobs(func(o *backfill.Options) { o.Source = c })
	var ups []archive.RepoUpdate
	for i := range repos {
		ups = append(ups, failedDue(fmt.Sprintf("did:plc:down%02daaaaaaaaaaaaaaaaaaa", i), dead))
	}
	e.apply(&archive.Unit{Repos: ups})
	start := time.Now()
	r := e.runner(func(c *retry.Config) { c.Relay = upstream.CanonicalHost("http", relay.Listener.Addr().String()) })
	ps, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("run once: %v", err)
	}
	const slots = retry.DefaultHostWorkers
	if n := tries.Load(); n > 2+slots {
		t.Fatalf("%d tries of the blackholed host waited the connect timeout, want at most %d", n, 2+slots)
	}
	charged := 0
	for _, u := range ups {
		st := e.state(u.DID)
		if st.Status != archive.StatusFailed {
			t.Fatalf("%s: %v, want still failed", u.DID, st.Status)
		}
		if st.Attempts > 1 {
			charged++
		}
	}
	if charged > int(tries.Load()) {
		t.Fatalf("%d of %d repos of the down host charged an attempt, for %d tries that waited the connect timeout (pass %+v); want only those",
			charged, repos, tries.Load(), ps)
	}
	hs, err := e.store.HostState(dead)
	if err != nil || hs.LastErrClass != retry.ClassHostDown || !time.UnixMicro(hs.ParkedUntilUS).After(start) {
		t.Fatalf("host/%s = %+v (%v), want a durable park, class %s", dead, hs, err, retry.ClassHostDown)
	}
	if ps.Results[retry.ResultHostDown] < 1 || metric(t, e.reg, "backstream_retry_parked_hosts", nil) != 1 {
		t.Fatalf("pass %+v, parked hosts %v: want a host_down result and the host parked", ps, metric(t, e.reg, "backstream_retry_parked_hosts", nil))
	}
	t.Logf("pass %+v: %d tries waited, %d repos charged an attempt", ps, tries.Load(), charged)
}
