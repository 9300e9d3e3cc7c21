package retry_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/retry"
)

// slowCompleter is a completer whose every job takes d of (fake) time
// first, as a download does: a host's share of the queue then stays full
// while the runner's passes go on.
type slowCompleter struct {
	completer
	d    time.Duration
	done atomic.Int64
}

func (c *slowCompleter) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	select {
	case <-time.After(c.d):
	case <-ctx.Done():
		return backfill.Result{DID: req.DID}, fmt.Errorf("%w: %s: %w", backfill.ErrCanceled, req.DID, ctx.Err())
	}
	res, err := c.completer.Run(ctx, req)
	if err == nil {
		c.done.Add(1)
	}
	return res, err
}

// drainOneHost runs the runner (default gates, queue and scan period)
// over n failed repos all due now on one host, each job taking job of
// fake time (4 host workers: 40 repos a second at 100 ms), until every
// one is complete, and returns the due/ keys its passes read and how many passes
// ran.
func drainOneHost(t *testing.T, n int, job time.Duration) (read int64, passes int) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, 1, 0)
		for i := 0; i < n; {
			var dids []string
			for ; i < n && len(dids) < 1000; i++ {
				dids = append(dids, e.repo(0, i))
			}
			e.seed(dids...)
		}
		jobs := &slowCompleter{completer: completer{e.w}, d: job}
		log := &passLog{}
		r := e.runner(func(c *retry.Config) {
			c.Jobs, c.ScanPeriod, c.Logger = jobs, retry.DefaultScanPeriod, slog.New(log)
		})
		stop := runBG(r)
		defer stop()
		for jobs.done.Load() < int64(n) {
			time.Sleep(time.Second)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		for _, k := range log.passes() {
			read += k
			passes++
		}
	})
	return read, passes
}

// TestOneHostBacklogReadsLinearly: a host with a large backlog (a big PDS
// down for an hour during bootstrap leaves all its repos failed) is
// drained a queue share at a time. Each share that drains must not make
// the runner read the whole backlog again: the due/ keys read per repo
// retried stay bounded as the backlog grows (they grew with it, N/128 a
// repo, when every drained share started a full pass).
func TestOneHostBacklogReadsLinearly(t *testing.T) {
	n := 20_000
	if testing.Short() {
		n = 5_000
	}
	for _, job := range []time.Duration{100 * time.Millisecond, time.Second} {
		read, passes := drainOneHost(t, n, job)
		perRepo := float64(read) / float64(n)
		t.Logf("N=%d on one host, %v jobs: %d passes read %d due/ keys, %.1f a repo retried", n, job, passes, read, perRepo)
		if perRepo > 8 {
			t.Fatalf("draining %d due repos of one host with %v jobs read %d due/ keys in %d passes (%.1f a repo retried), want ≤ 8 a repo",
				n, job, read, passes, perRepo)
		}
	}
}

// TestBacklogLeavesOtherHostsOnTime: while one host drains a backlog a
// queue share at a time (resume passes, many a minute), a repo of another
// host that comes due meanwhile is still fetched within a scan period of
// its time, with no Wake: resume passes do not put off the scan period's
// pass, which reads what came due since.
func TestBacklogLeavesOtherHostsOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, 2, 0)
		const n = 5000
		for i := 0; i < n; {
			var dids []string
			for ; i < n && len(dids) < 1000; i++ {
				dids = append(dids, e.repo(0, i))
			}
			e.seed(dids...)
		}
		other := e.repo(1, 0)
		dueAt := time.Now().Add(time.Minute)
		up := failedDue(other, "host1")
		up.State.NextAttemptUS = dueAt.UnixMicro()
		if rc, err := e.w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{up}}); err != nil || rc.Refused != nil {
			t.Fatalf("seed %s: %v %v", other, err, rc.Refused)
		}
		jobs := &startedAt{slowCompleter: slowCompleter{completer: completer{e.w}, d: 100 * time.Millisecond}, did: other}
		r := e.runner(func(c *retry.Config) { c.Jobs, c.ScanPeriod = jobs, retry.DefaultScanPeriod })
		stop := runBG(r)
		defer stop()
		for jobs.started.Load() == 0 && time.Now().Before(dueAt.Add(10*time.Minute)) {
			time.Sleep(time.Second)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		got := jobs.started.Load()
		if got == 0 {
			t.Fatalf("%s of host1, due at %v, not fetched 10 min after (host0's backlog: %d of %d done)", other, dueAt, jobs.done.Load(), n)
		}
		if late := time.UnixMicro(got).Sub(dueAt); late > retry.DefaultScanPeriod+time.Second || jobs.done.Load() >= n-1 {
			t.Fatalf("%s of host1 fetched %v after it came due, with %d of host0's %d done: want within a scan period, during the backlog",
				other, late, jobs.done.Load(), n)
		}
	})
}

// startedAt is a slowCompleter that notes when did's job started.
type startedAt struct {
	slowCompleter
	did     string
	started atomic.Int64 // unix µs; 0: not yet
}

func (s *startedAt) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	if req.DID == s.did {
		s.started.CompareAndSwap(0, time.Now().UnixMicro())
	}
	return s.slowCompleter.Run(ctx, req)
}

// TestOneHostBacklogGrowth measures the keys read per repo retried for
// growing backlogs of one host (BACKLOG_SIZES, e.g. 1000,10000,100000),
// with jobs of 100 ms and of 1 s.
// A measurement, not an assertion; run it by name with -v.
func TestOneHostBacklogGrowth(t *testing.T) {
	if os.Getenv("BACKLOG_SIZES") == "" {
		t.Skip("set BACKLOG_SIZES (e.g. 1000,10000,100000) to measure")
	}
	for _, f := range strings.Split(os.Getenv("BACKLOG_SIZES"), ",") {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, job := range []time.Duration{100 * time.Millisecond, time.Second} {
			start := time.Now()
			read, passes := drainOneHost(t, n, job)
			t.Logf("N=%d, %v jobs: %d passes, %d due/ keys read, %.1f a repo retried (%v)", n, job, passes, read, float64(read)/float64(n), time.Since(start).Round(time.Millisecond))
		}
	}
}
