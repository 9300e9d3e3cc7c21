package retry_test

// Fixtures for the runner tests that run inside a synctest bubble: a store
// on an in-memory filesystem, its writer, and jobs that run no download but
// hold until the test releases them. Every goroutine of a run then belongs
// to the bubble and blocks only on its channels and timers, so once the
// bubble settles, "no more jobs started" and "no pass ran" are facts about
// the runner, not what a sleep happened to see; and fake time lets scan
// periods and parks pass in no real time at all.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/retry"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

// heldJobs is a retry.Jobs whose jobs wait until the test sends on (or
// closes) their host's release channel, then report the repo complete
// without writing anything; or until their context ends. It counts jobs in
// flight per host and the jobs started per DID.
type heldJobs struct {
	hostOf  map[string]string
	release map[string]chan struct{} // by host

	mu       sync.Mutex
	inflight map[string]int
	started  map[string]int
}

func (j *heldJobs) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	j.mu.Lock()
	h := j.hostOf[req.DID]
	j.inflight[h]++
	j.started[req.DID]++
	j.mu.Unlock()
	defer func() {
		j.mu.Lock()
		j.inflight[h]--
		j.mu.Unlock()
	}()
	j.mu.Lock()
	release := j.release[h]
	j.mu.Unlock()
	select {
	case <-release:
		return backfill.Result{DID: req.DID, Status: archive.StatusComplete, Host: h}, nil
	case <-ctx.Done():
		return backfill.Result{DID: req.DID}, fmt.Errorf("%w: %s: %w", backfill.ErrCanceled, req.DID, ctx.Err())
	}
}

// running returns the jobs in flight at each host and in all.
func (j *heldJobs) running() (byHost map[string]int, total int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	byHost = map[string]int{}
	for h, n := range j.inflight {
		byHost[h] = n
		total += n
	}
	return byHost, total
}

func (j *heldJobs) startedOf(did string) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.started[did]
}

func (j *heldJobs) startedTotal() (n int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, k := range j.started {
		n += k
	}
	return n
}

// bubbleEnv is a store, writer and held jobs inside a bubble.
type bubbleEnv struct {
	t     *testing.T
	store *archive.Store
	w     *archive.Writer
	jobs  *heldJobs
	reg   *prometheus.Registry
	m     *retry.Metrics
}

// newBubbleEnv seeds per repos failed and due on each of hosts hosts
// (host0 … hostN-1). Call it inside the bubble.
func newBubbleEnv(t *testing.T, hosts, per int) *bubbleEnv {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet, CacheSize: 1 << 20})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	t.Cleanup(func() {
		_ = w.Close()
		_ = s.Close()
	})
	e := &bubbleEnv{t: t, store: s, w: w, reg: prometheus.NewRegistry(),
		jobs: &heldJobs{hostOf: map[string]string{}, release: map[string]chan struct{}{}, inflight: map[string]int{}, started: map[string]int{}}}
	e.m = retry.NewMetrics(e.reg)
	var dids []string
	for h := range hosts {
		host := fmt.Sprintf("host%d", h)
		e.jobs.release[host] = make(chan struct{})
		for i := range per {
			did := e.repo(h, i)
			dids = append(dids, did)
		}
	}
	e.seed(dids...)
	return e
}

// repo names the i-th repo of host h (a DID the jobs know the host of).
func (e *bubbleEnv) repo(h, i int) string {
	did := fmt.Sprintf("did:plc:h%di%daaaaaaaaaaaaaaaaaaaa", h, i)
	e.jobs.mu.Lock()
	e.jobs.hostOf[did] = fmt.Sprintf("host%d", h)
	e.jobs.mu.Unlock()
	return did
}

// seed makes repos failed and due now on their hosts.
func (e *bubbleEnv) seed(dids ...string) {
	e.t.Helper()
	var ups []archive.RepoUpdate
	e.jobs.mu.Lock()
	for _, did := range dids {
		ups = append(ups, failedDue(did, e.jobs.hostOf[did]))
	}
	e.jobs.mu.Unlock()
	if rc, err := e.w.Apply(context.Background(), &archive.Unit{Repos: ups}); err != nil || rc.Refused != nil {
		e.t.Fatalf("seed: %v %v", err, rc.Refused)
	}
}

// runner builds a retry runner over the held jobs.
func (e *bubbleEnv) runner(mod func(*retry.Config)) *retry.Runner {
	e.t.Helper()
	return newRunner(e.t, retry.Config{Store: e.store, Writer: e.w, Jobs: e.jobs, Metrics: e.m}, mod)
}

// settle waits until the bubble is idle, lets d of fake time pass (every
// timer due by then fires) and waits until it is idle again.
func settle(d time.Duration) {
	synctest.Wait()
	time.Sleep(d)
	synctest.Wait()
}
