package subscribe

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// TestStatusCacheBuildsOncePerTTL: /status used to build the report (a
// store read) for every request. On the fake clock: 1,000 requests within
// a second cost one build and all get its report; the first request after
// the second builds again.
func TestStatusCacheBuildsOncePerTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var builds atomic.Int64
		c := &StatusCache[int]{Build: func() any { return builds.Add(1) }}
		for i := 0; i < 1000; i++ {
			if v := c.Get(); v != int64(1) {
				t.Fatalf("request %d got report %v, want 1", i, v)
			}
			time.Sleep(DefaultStatusTTL / 1000) // the last request lands at 999 ms
		}
		if n := builds.Load(); n != 1 {
			t.Fatalf("%d builds for 1,000 requests within a second", n)
		}
		time.Sleep(DefaultStatusTTL)
		if v := c.Get(); v != int64(2) || builds.Load() != 2 {
			t.Fatalf("after a second: report %v, %d builds; want a new build", v, builds.Load())
		}
	})
}

// TestStatusCacheSharesOneBuild: requests that arrive while a build runs
// wait for it and get its report: no thundering herd on an expired cache.
func TestStatusCacheSharesOneBuild(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var builds atomic.Int64
		release := make(chan struct{})
		c := &StatusCache[int]{Build: func() any {
			n := builds.Add(1)
			<-release
			return n
		}}
		const n = 200
		got := make([]any, n)
		var wg sync.WaitGroup
		for i := range got {
			wg.Go(func() { got[i] = c.Get() })
		}
		synctest.Wait() // every request is in Get: one building, the rest waiting
		if b := builds.Load(); b != 1 {
			t.Fatalf("%d builds started by %d concurrent requests", b, n)
		}
		close(release)
		wg.Wait()
		for i, v := range got {
			if v != int64(1) {
				t.Fatalf("request %d got %v, want the shared build's report", i, v)
			}
		}
	})
}

// TestStatusCacheFatalShowsAtOnce: a fatal error is never hidden behind a
// cached healthy report: from the moment Fatal reports it, every request
// builds afresh, within the TTL of the last healthy build.
func TestStatusCacheFatalShowsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var fatal atomic.Pointer[error]
		c := &StatusCache[int]{
			Build: func() any {
				if p := fatal.Load(); p != nil {
					return "stopping on a fatal error: " + (*p).Error()
				}
				return "healthy"
			},
			Fatal: func() error {
				if p := fatal.Load(); p != nil {
					return *p
				}
				return nil
			},
		}
		if v := c.Get(); v != "healthy" {
			t.Fatal(v)
		}
		err := errors.New("disk full")
		fatal.Store(&err)
		time.Sleep(DefaultStatusTTL / 10)
		if v := c.Get(); v != "stopping on a fatal error: disk full" {
			t.Fatalf("within the TTL after a fatal error: %v", v)
		}
	})
}

// TestStatusCachePanickedBuild: a build that panics leaves no report behind
// and does not wedge the cache: the next request builds again.
func TestStatusCachePanickedBuild(t *testing.T) {
	var builds atomic.Int64
	c := &StatusCache[int]{Build: func() any {
		if builds.Add(1) == 1 {
			panic("build failed")
		}
		return "ok"
	}}
	func() {
		defer func() { _ = recover() }()
		c.Get()
	}()
	if v := c.Get(); v != "ok" || builds.Load() != 2 {
		t.Fatalf("after a panicked build: %v, %d builds", v, builds.Load())
	}
}

// TestStatusCacheNewPhaseRebuilds: a report is never served across a phase
// change, neither from the cache nor from a build still running when the
// phase changed: a poller that reads "bootstrap" knows the process was in
// bootstrap when its request came (the crash harness relies on it to tell
// bootstrap's getRepos from later ones).
func TestStatusCacheNewPhaseRebuilds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var phase atomic.Pointer[string]
		set := func(p string) { phase.Store(&p) }
		set("bootstrap")
		var gate atomic.Pointer[chan struct{}]
		var builds atomic.Int64
		c := &StatusCache[string]{
			Key: func() string { return *phase.Load() },
			Build: func() any {
				builds.Add(1)
				p := *phase.Load()
				if g := gate.Load(); g != nil && p == "merging" {
					<-*g
				}
				return p
			},
		}
		if v := c.Get(); v != "bootstrap" {
			t.Fatal(v)
		}
		set("merging")
		if v := c.Get(); v != "merging" {
			t.Fatalf("a fresh cached report across a phase change: %v", v)
		}

		release := make(chan struct{})
		gate.Store(&release)
		time.Sleep(DefaultStatusTTL) // expired: the next request builds
		old := make(chan any, 1)
		go func() { old <- c.Get() }()
		synctest.Wait() // that build runs, in merging
		set("steady_state")
		if v := c.Get(); v != "steady_state" {
			t.Fatalf("a request after the phase change got %v", v)
		}
		close(release)
		if v := <-old; v != "merging" {
			t.Fatalf("the request before the change got %v", v)
		}
		// The overtaken build left the newer report in the cache.
		if v, n := c.Get(), builds.Load(); v != "steady_state" || n != 4 {
			t.Fatalf("after the overtaken build: %v, %d builds (want steady_state from the cache, 4 builds)", v, n)
		}
	})
}
