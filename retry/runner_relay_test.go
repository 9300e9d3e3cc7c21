package retry_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/upstream"
)

// TestRateLimitedRelayParksEveryDownload (S4): every replacement is asked
// of the relay first, so a 429 from the relay itself parks every download,
// not only the repos recorded on the relay's host. With one worker, the
// first 429 is the only request the relay gets until its reset, in this
// run and in the next one (the park is durable); the other due repos keep
// their state (not failed again, their PDS host kept) and are deferred as
// parked.
func TestRateLimitedRelayParksEveryDownload(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 40, RecordsMean: 2, Hosts: 2, Seed: 67, Traffic: oracle.TrafficNone})
	var asked atomic.Int64
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Retry-After", "60")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":"RateLimitExceeded","message":"Rate Limit Exceeded"}`))
	}))
	t.Cleanup(relay.Close)
	c, err := upstream.New(relay.URL, upstream.Options{ScratchDir: e.store.ScratchDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	jobs, err := backfill.NewRunner(retry.Backoff{Interval: time.Minute, MaxDelay: time.Hour}.JobOptions(backfill.Options{
		Source: c, Writer: e.w, Current: e.store, Logger: quiet, Retries: -1, AttemptTimeout: time.Minute,
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() }}))
	if err != nil {
		t.Fatal(err)
	}
	by := e.activeByHost()
	accts := append(by[0][:4:4], by[1][:4]...)
	e.seedFailed(accts)
	relayHost := strings.TrimPrefix(relay.URL, "http://")
	mod := func(c *retry.Config) { c.Jobs, c.Workers, c.HostWorkers, c.Relay = jobs, 1, 1, relayHost }
	ps, err := e.runner(mod).RunOnce(context.Background())
	if err != nil {
		t.Fatalf("run once: %v", err)
	}
	t.Logf("pass %+v; relay asked %d times", ps, asked.Load())
	if n := asked.Load(); n != 1 || ps.Results[retry.ResultRateLimited] != 1 {
		t.Errorf("the relay was asked %d times (results %v); want only the first request, whose 429 parked it", n, ps.Results)
	}
	ps, err = e.runner(mod).RunOnce(context.Background())
	if err != nil {
		t.Fatalf("second run: %v", err)
	}
	if n := asked.Load(); n != 1 || ps.Parked != len(accts)-1 {
		t.Errorf("second run %+v: the relay asked %d times in all; want the %d other due repos deferred as parked, no request",
			ps, n, len(accts)-1)
	}
	untouched := 0
	for _, a := range accts {
		st := e.state(a.DID)
		if st.ErrClass == "seeded" && st.Attempts == 1 && st.Host == e.hosts[a.Host] {
			untouched++
		}
	}
	if untouched != len(accts)-1 {
		t.Errorf("%d of %d due repos kept their state and PDS host; want every one but the first", untouched, len(accts))
	}
}
