package bootstrap_test

// Fixtures for the bootstrap tests that run inside a synctest bubble. The
// store lives on an in-memory filesystem and the world is served from
// memory, so every goroutine of a run belongs to the bubble and blocks only
// on the bubble's channels and timers: once synctest.Wait returns, nothing
// more happens until the test releases something. "No N+1th request",
// "no checkpoint" and "enumeration stopped" are then facts about the run,
// not what a sleep happened to see. settle also lets fake time pass, so a
// timer (a progress tick, a periodic pass) cannot hide a late change.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
	"github.com/cockroachdb/pebble/vfs"
)

// memSource serves a world from memory, as the oracle relay does over
// HTTP: listRepos in DID order without deleted accounts, a page's cursor
// the last DID of a page with more after it; getRepo the account's CAR. A
// getRepo of a held DID waits until the test sends on release (or closes
// it) or its context ends. It counts getRepo calls, those in flight and
// their peak.
type memSource struct {
	w       *world.World
	release chan struct{}

	mu       sync.Mutex
	hold     func(did string) bool
	calls    int
	inflight int
	peak     int
}

func (s *memSource) ListRepos(_ context.Context, cursor string, limit int) (upstream.Page, error) {
	var pg upstream.Page
	for _, a := range s.w.Accounts() {
		if a.Status == world.StatusDeleted || a.DID <= cursor {
			continue
		}
		if len(pg.Repos) == limit {
			pg.Cursor = pg.Repos[limit-1].DID
			break
		}
		e := upstream.RepoEntry{DID: a.DID, Rev: a.Rev, Active: a.Active}
		if !a.Active {
			e.Status = a.Status
		}
		pg.Repos = append(pg.Repos, e)
	}
	return pg, nil
}

func (s *memSource) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	s.mu.Lock()
	s.calls++
	s.inflight++
	s.peak = max(s.peak, s.inflight)
	held := s.hold != nil && s.hold(did)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.mu.Unlock()
	}()
	if held {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	car, a, err := s.w.RepoCAR(did)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", upstream.ErrRepoNotFound, err)
	}
	return &upstream.Download{DID: did, Body: car, Size: int64(len(car)), FinalHost: fmt.Sprintf("pds%d.test", a.Host)}, nil
}

// holdOnly holds the getRepo of exactly these DIDs.
func (s *memSource) holdOnly(dids ...string) {
	set := map[string]bool{}
	for _, d := range dids {
		set[d] = true
	}
	s.mu.Lock()
	s.hold = func(did string) bool { return set[did] }
	s.mu.Unlock()
}

// counts returns the getRepo calls made, in flight, and the most in flight
// at once.
func (s *memSource) counts() (calls, inflight, peak int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.inflight, s.peak
}

// newBubbleEnv is newEnv for a test inside synctest.Test: the world of cfg
// built and served from memory, the store at /data on an in-memory
// filesystem (reopen keeps it). Call it inside the bubble.
func newBubbleEnv(t *testing.T, cfg oracle.Config) *env {
	t.Helper()
	w, err := world.Build(world.Config{Seed: cfg.Seed, Accounts: cfg.Accounts, RecordsMean: cfg.RecordsMean, Hosts: cfg.Hosts})
	if err != nil {
		t.Fatalf("world: %v", err)
	}
	e := &env{t: t, world: w, mem: &memSource{w: w, release: make(chan struct{})}, fs: vfs.NewMem(), dir: "/data"}
	e.open()
	t.Cleanup(e.close)
	return e
}

// settle waits until the bubble is idle, lets d of fake time pass (every
// timer due by then fires) and waits until it is idle again.
func settle(d time.Duration) {
	synctest.Wait()
	time.Sleep(d)
	synctest.Wait()
}
