package backfill_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// hostileClient is a real upstream client whose relay is a hostile server
// answering every getRepo with h.
func (e *env) hostileClient(h http.HandlerFunc, mod func(*upstream.Options)) *upstream.Client {
	e.t.Helper()
	srv := httptest.NewServer(h)
	e.t.Cleanup(srv.Close)
	o := upstream.Options{ScratchDir: e.store.ScratchDir(), IdleBodyTimeout: time.Minute}
	if mod != nil {
		mod(&o)
	}
	c, err := upstream.New(srv.URL, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// TestJobScratchLimits: the job's side of the scratch limits. A body that
// never ends is cut at the scratch budget and fails too_large after one
// attempt (a retry would refill the same scratch); a scratch volume at its
// floor fails local after the ordinary backoff, with a next attempt, and
// the process goes on (no error from Run, nothing fatal).
func TestJobScratchLimits(t *testing.T) {
	e := newEnv(t, smallWorld(4, 4))
	did := e.activeAccounts(1)[0].DID
	endless := func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}

	c := e.hostileClient(endless, func(o *upstream.Options) { o.ScratchBudget, o.MinFree = 8<<20, 1 })
	res := e.run(e.runner(func(o *backfill.Options) { o.Source = c }), did)
	if res.Status != archive.StatusFailed || res.Class != backfill.ClassTooLarge || res.Attempts != 1 {
		t.Fatalf("endless body: %v class %q after %d attempts, want failed too_large after 1", res.Status, res.Class, res.Attempts)
	}
	e.scratchEmpty()

	c = e.hostileClient(endless, func(o *upstream.Options) { o.MinFree = 1 << 62 })
	sleeps := len(e.clock.Sleeps())
	res = e.run(e.runner(func(o *backfill.Options) { o.Source = c }), did)
	st := e.state(did)
	if res.Status != archive.StatusFailed || res.Class != backfill.ClassLocal || res.Attempts != 4 || st.ErrClass != backfill.ClassLocal {
		t.Fatalf("floor: %v class %q after %d attempts (stored %q), want failed local after 4", res.Status, res.Class, res.Attempts, st.ErrClass)
	}
	if got := e.clock.Sleeps()[sleeps:]; len(got) != 3 || got[0] != time.Second {
		t.Fatalf("floor: backoff waits %v, want the ordinary 1 s, 2 s, 4 s", got)
	}
	if st.NextAttemptUS <= e.clock.Now().UnixMicro() {
		t.Fatalf("floor: no next attempt scheduled: %+v", st)
	}
	e.scratchEmpty()
}

// TestJobTrickleRetried: a trickling body
// is transient for the job: retried on the ordinary budget, then failed
// with its own class (slow_body), never holding the worker to
// the attempt deadline.
func TestJobTrickleRetried(t *testing.T) {
	e := newEnv(t, smallWorld(4, 4))
	did := e.activeAccounts(1)[0].DID
	trickle := func(w http.ResponseWriter, r *http.Request) {
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte{'x'}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}
	c := e.hostileClient(trickle, func(o *upstream.Options) { o.MinBodyBytes, o.BodyWindow = 1<<10, 100*time.Millisecond })
	start := time.Now()
	res := e.run(e.runner(func(o *backfill.Options) { o.Source = c; o.AttemptTimeout = time.Minute }), did)
	if res.Status != archive.StatusFailed || res.Class != backfill.ClassSlowBody || res.Attempts != 4 {
		t.Fatalf("trickle: %v class %q after %d attempts, want failed slow_body after 4", res.Status, res.Class, res.Attempts)
	}
	t.Logf("4 trickling attempts held the worker %v (attempt deadline 1 min each)", time.Since(start))
	e.scratchEmpty()
}

// TestJobsTricklingHostHoldsFewWorkers: a PDS host trickling every body (20
// bytes a second) while 12 workers run every repo of the network, as the
// bootstrap does. Its downloads never hold more than the per-host cap of
// workers at once (sampled from the client), each is cut within a
// throughput window, its repos fail slow_body or host_busy, and every repo
// of the healthy host completes. Without the cap and the throughput floor
// every worker would sit on the trickling host until the attempt deadline.
func TestJobsTricklingHostHoldsFewWorkers(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 24, RecordsMean: 5, Hosts: 2, Seed: 11, Traffic: oracle.TrafficNone})
	const hostCap, workers = 2, 12
	c, err := upstream.New(e.net.RelayURL(), upstream.Options{ScratchDir: e.store.ScratchDir(),
		HostWorkers: hostCap, MinBodyBytes: 1 << 10, BodyWindow: 300 * time.Millisecond, LoopbackHosts: e.net.LoopbackHosts()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	u, err := url.Parse(e.net.HostURLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	slowHost := u.Host
	var accts []world.Account
	for _, a := range e.activeAccounts(0) {
		accts = append(accts, a)
		if a.Host == 0 {
			e.net.Faults().SlowBody(a.DID, 20, oracle.Always)
		}
	}
	// Real backoff waits, short: a worker refused by a full host sleeps,
	// as in production, instead of retrying at once on the fake clock.
	r := e.runner(func(o *backfill.Options) {
		o.Source, o.AttemptTimeout = c, time.Minute
		o.Sleep, o.BackoffBase, o.BackoffMax = backoff.Sleep, 20*time.Millisecond, 100*time.Millisecond
	})

	var peak atomic.Int64
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), int64(c.HostDownloads(slowHost))))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	jobs := make(chan world.Account)
	results := make([]backfill.Result, len(accts))
	index := map[string]int{}
	for i, a := range accts {
		index[a.DID] = i
	}
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for a := range jobs {
				res, err := r.Run(ctx, backfill.Request{DID: a.DID})
				if err != nil {
					t.Errorf("%s: %v", a.DID, err)
				}
				results[index[a.DID]] = res
			}
		})
	}
	for _, a := range accts {
		jobs <- a
	}
	close(jobs)
	wg.Wait()
	close(stop)
	<-sampled
	var slow, healthy, completed int
	for i, a := range accts {
		res := results[i]
		switch {
		case a.Host == 0:
			slow++
			if res.Status != archive.StatusFailed || (res.Class != backfill.ClassSlowBody && res.Class != backfill.ClassHostBusy) {
				t.Errorf("%s on the trickling host: %v %q", a.DID, res.Status, res.Class)
			}
		default:
			// The healthy host has the same cap: a repo may find it full
			// on every try (host_busy) but never fails for the slow one.
			healthy++
			if res.Status == archive.StatusComplete {
				completed++
			} else if res.Class != backfill.ClassHostBusy {
				t.Errorf("%s on the healthy host: %v %q %v", a.DID, res.Status, res.Class, res.Err)
			}
		}
	}
	if p := peak.Load(); p > hostCap {
		t.Errorf("the trickling host held %d workers at once, cap %d", p, hostCap)
	}
	t.Logf("%d workers, %d repos on a trickling host, %d on a healthy one (%d complete): at most %d workers held by the trickling host at once; all done in %v",
		workers, slow, healthy, completed, peak.Load(), time.Since(start))
	if slow == 0 || completed == 0 {
		t.Fatalf("%d repos on the trickling host, %d of %d on the healthy one complete", slow, completed, healthy)
	}
	e.scratchEmpty()
}

// TestJobTrickleErrorBodyRetried: an error answer (503, 429) whose body
// trickles is cut within a throughput window like a 200's body, and retried
// as slow_body, instead of holding the worker to the attempt deadline and
// failing the repo as timeout for the run.
func TestJobTrickleErrorBodyRetried(t *testing.T) {
	e := newEnv(t, smallWorld(4, 4))
	did := e.activeAccounts(1)[0].DID
	for _, status := range []int{http.StatusServiceUnavailable, http.StatusTooManyRequests} {
		trickle := func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			for r.Context().Err() == nil {
				if _, err := w.Write([]byte{' '}); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		}
		c := e.hostileClient(trickle, func(o *upstream.Options) { o.MinBodyBytes, o.BodyWindow = 1<<10, 100*time.Millisecond })
		res := e.run(e.runner(func(o *backfill.Options) { o.Source = c; o.AttemptTimeout = 3 * time.Second }), did)
		if res.Status != archive.StatusFailed || res.Class != backfill.ClassSlowBody || res.Attempts != 4 {
			t.Fatalf("%d with a trickling body: %v class %q after %d attempts (%v), want failed slow_body after 4",
				status, res.Status, res.Class, res.Attempts, res.Err)
		}
	}
	e.scratchEmpty()
}
