package bootstrap_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
)

// TestResolveAhead: with Config.Resolve, the DIDs of the batches about to
// be dispatched are resolved while every download is held, not when their
// jobs start: more DIDs are resolved than there are workers (so ahead of
// their jobs), each at most once, and only DIDs later dispatched. A bootstrap
// without the look-ahead resolves nothing before a job starts, and a slow
// PLC directory then delays every job by its latency.
func TestResolveAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(80, 2))
		e.mem.hold = func(string) bool { return true }
		const workers = 2
		var mu sync.Mutex
		resolved := map[string]int{}
		b := e.boot(func(c *bootstrap.Config, _ *backfill.Options) {
			c.Workers = workers
			c.Resolve = func(_ context.Context, did string) {
				mu.Lock()
				resolved[did]++
				mu.Unlock()
			}
		})
		done := make(chan error, 1)
		go func() { done <- b.Run(context.Background()) }()
		settle(30 * time.Second)
		calls, _, _ := e.mem.counts()
		mu.Lock()
		ahead := len(resolved)
		mu.Unlock()
		if calls != workers || ahead < 2*workers {
			t.Fatalf("with %d downloads held, %d DIDs resolved; want at least %d resolved ahead of their jobs", calls, ahead, 2*workers)
		}
		close(e.mem.release)
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		active := map[string]bool{}
		for _, a := range e.listed() {
			if a.Active {
				active[a.DID] = true
			}
		}
		for did, n := range resolved {
			if n != 1 || !active[did] {
				t.Errorf("%s resolved %d times (dispatched: %v)", did, n, active[did])
			}
		}
		// The look-ahead is best effort: a DID its resolvers had not reached
		// when its job started is resolved by the job's own lookup (through
		// the same cache), so resolved ahead may be fewer than dispatched,
		// never more, and never twice.
		if len(resolved) > len(active) {
			t.Errorf("%d DIDs resolved ahead, %d dispatched", len(resolved), len(active))
		}
	})
}

// TestResolveAheadDefaultsToIdentity: with a verifying Config.Identity and
// no Config.Resolve, the look-ahead is Identity's Lookup: while every
// download is held (so no job is past its getRepo), the directory has
// already been asked for more DIDs than there are jobs; at the end every
// active account was resolved exactly once, its job finding it in the
// cache. Without the default each job resolves its own DID, and at most
// Workers are resolved while the downloads are held.
func TestResolveAheadDefaultsToIdentity(t *testing.T) {
	e := newEnv(t, worldCfg(80, 2))
	reg := prometheus.NewRegistry()
	id := ident.New(ident.Config{PLC: e.net.RelayURL(), Mode: ident.ModeStrict, Metrics: ident.NewMetrics(reg)})
	defer id.Close()
	resolved := func() float64 {
		return promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"})
	}
	release := make(chan struct{})
	var held atomic.Int64
	e.src.getHook = func(string) {
		held.Add(1)
		<-release
	}
	const workers = 2
	b := e.boot(func(c *bootstrap.Config, o *backfill.Options) {
		c.Workers, c.Identity, o.Identity = workers, id, id
	})
	done := make(chan error, 1)
	go func() { done <- b.Run(context.Background()) }()
	eventually(t, 30*time.Second, "every worker holds a download", func() bool { return held.Load() == workers })
	eventually(t, 30*time.Second, fmt.Sprintf("more than %d DIDs resolved while %d downloads are held", 2*workers, workers), func() bool {
		return resolved() > 2*workers
	})
	if n := held.Load(); n != workers {
		t.Fatalf("%d downloads started, want the %d held", n, workers)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
	active := e.activeListed()
	if got := resolved(); got != float64(active) {
		t.Fatalf("%v DID resolutions for %d active accounts, want one each", got, active)
	}
}
