package retry_test

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/retry"
)

// seedUnknown writes n failed, active, due repos the network does not know
// (getRepo answers RepoNotFound), spread over hosts synthetic host names,
// each carrying a 1 KiB last error, in units of 1000.
func (e *env) seedUnknown(n, hosts int) {
	e.t.Helper()
	msg := strings.Repeat("e", archive.MaxErrorMessage)
	for i := 0; i < n; {
		var ups []archive.RepoUpdate
		for ; i < n && len(ups) < 1000; i++ {
			ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:scale%019d", i),
				Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldAttempts | archive.FieldError | archive.FieldNextAttempt,
				State: archive.RepoState{Status: archive.StatusFailed, Active: true, Host: fmt.Sprintf("pds%03d.example:443", i%hosts),
					Attempts: 1, ErrClass: "transient", LastError: msg, NextAttemptUS: 1}})
		}
		e.apply(&archive.Unit{Repos: ups})
	}
}

// liveBytes forces a collection and returns the heap it found live
// (/gc/heap/live:bytes: what the collection marked, not counting what other
// goroutines allocated since).
func liveBytes() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// liveHeap samples the live heap until stop is called and returns the peak.
func liveHeap() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if b := liveBytes(); b > peak.Load() {
				peak.Store(b)
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak.Load()
	}
}

// completer is a job that makes the repo complete through the real writer
// (the state a replacement's completion writes) without downloading: the
// scale test measures the runner's memory, and real jobs would add the
// writer's ratchet cache and the network's per-DID counters, both of which
// grow with the number of DIDs processed.
type completer struct{ w *archive.Writer }

func (c completer) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	rc, err := c.w.Apply(ctx, &archive.Unit{Repos: []archive.RepoUpdate{{DID: req.DID, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		cur.Status = archive.StatusComplete
		cur.Attempts, cur.ErrClass, cur.LastError, cur.NextAttemptUS, cur.Refetch = 0, "", "", 0, archive.RefetchNone
		return cur, true
	}}}})
	if err == nil && rc.Refused != nil {
		err = rc.Refused
	}
	return backfill.Result{DID: req.DID, Status: archive.StatusComplete}, err
}

// writerCacheBytes is the live heap of a copy of the archive writer's
// repo state cache at its bound (archive.RepoCacheStates), filled with the
// states this test's jobs leave: the most the writer's own memory can grow
// while the runner works, which is the writer's and not the runner's.
func writerCacheBytes() uint64 {
	before := liveBytes()
	m := make(map[string]archive.RepoState)
	for i := range archive.RepoCacheStates {
		m[fmt.Sprintf("did:plc:scale%019d", i)] = archive.RepoState{Status: archive.StatusComplete, Active: true,
			Host: fmt.Sprintf("pds%03d.example:443", i%100), ErrClass: "transient"}
	}
	after := liveBytes()
	runtime.KeepAlive(m)
	return after - min(after, before)
}

// TestScale100k (S3): 100,000 failed candidates with 1 KiB errors over 100
// hosts, processed by one pass with the default gates (16 / 4). The
// scheduler never tracks more than Queue+Workers DIDs, and the live heap
// stays within a few MiB of what it was before the pass, plus the writer's
// bounded repo state cache: the candidate set (≥ 100 MiB of states, ~7 MiB
// of DIDs alone) is never held.
func TestScale100k(t *testing.T) {
	citest.Long(t, "100,000 candidates")
	const n = 100_000
	e := newEnv(t, oracle.Config{Accounts: 10, RecordsMean: 2, Hosts: 2, Seed: 41, Traffic: oracle.TrafficNone})
	t0 := time.Now()
	e.seedUnknown(n, 100)
	seeded := time.Since(t0)
	// Settle the store first: the seeding compactions would otherwise run
	// during the pass and their buffers blur the runner's own memory.
	if err := e.store.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.store.DB().Compact([]byte("a"), []byte("z"), true); err != nil {
		t.Fatal(err)
	}
	cache := writerCacheBytes()
	base := liveBytes()
	stop := liveHeap()
	t1 := time.Now()
	ps, err := e.runner(func(c *retry.Config) { c.Jobs = completer{e.w} }).RunOnce(context.Background())
	took := time.Since(t1)
	peak := stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d in %v; pass %v: scanned %d due %d queued %d, results %v, max queued %d, max tracked %d; live heap %.1f MiB before, peak %.1f MiB (+%.1f MiB; the writer's cache may take %.1f MiB of it)",
		n, seeded, took, ps.Scanned, ps.Due, ps.Queued, ps.Results, ps.MaxQueued, ps.MaxTracked,
		float64(base)/(1<<20), float64(peak)/(1<<20), (float64(peak)-float64(base))/(1<<20), float64(cache)/(1<<20))
	if ps.Due != n || ps.Results[retry.ResultComplete] != n {
		t.Fatalf("pass %+v: want every candidate due and replaced", ps)
	}
	if ps.MaxTracked > retry.DefaultQueue+retry.DefaultWorkers {
		t.Fatalf("the scheduler tracked %d DIDs at once, want ≤ Queue+Workers", ps.MaxTracked)
	}
	if peak > base+cache+6<<20 {
		t.Fatalf("live heap peaked %.1f MiB above its level before the pass, the writer's cache allowed %.1f MiB of it",
			(float64(peak)-float64(base))/(1<<20), float64(cache)/(1<<20))
	}
	c, err := e.store.Counts()
	if err != nil || c.ByStatus[archive.StatusComplete] < n {
		t.Fatalf("counts %+v %v", c, err)
	}
}

// TestPassReadsOnlyDueRepos (S3): a pass reads the due index up to now, so
// its cost follows the repos due, not the repos known: among 20,000
// complete repos, one failed repo not yet due and one inactive one, it
// reads exactly the one due repo's key and replaces it.
func TestPassReadsOnlyDueRepos(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 10, RecordsMean: 2, Hosts: 2, Seed: 43, Traffic: oracle.TrafficNone})
	for i := 0; i < 20_000; {
		var ups []archive.RepoUpdate
		for ; i < 20_000 && len(ups) < 1000; i++ {
			ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:done%020d", i), Fields: archive.FieldStatus | archive.FieldActive,
				State: archive.RepoState{Status: archive.StatusComplete, Active: true}})
		}
		e.apply(&archive.Unit{Repos: ups})
	}
	due, later, inactive := failedDue("did:plc:due", "pds.example"), failedDue("did:plc:later", "pds.example"), failedDue("did:plc:inactive", "pds.example")
	later.State.NextAttemptUS = time.Now().Add(time.Hour).UnixMicro()
	inactive.State.Active = false
	e.apply(&archive.Unit{Repos: []archive.RepoUpdate{due, later, inactive}})
	ps, err := e.runner(func(c *retry.Config) { c.Jobs = completer{e.w} }).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ps.Scanned != 1 || ps.Due != 1 || ps.Results[retry.ResultComplete] != 1 {
		t.Fatalf("pass %+v: want one key read, one due repo replaced", ps)
	}
	if st := e.state("did:plc:due"); st.Status != archive.StatusComplete {
		t.Fatalf("the due repo is %v after the pass", st.Status)
	}
}
