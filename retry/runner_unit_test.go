package retry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/retry"
)

// TestBackoffDelay: exponential from Interval, capped at MaxDelay, jitter
// uniform within ±25 % and never above the cap (at the cap, uniform over
// [0.75·MaxDelay, MaxDelay]); no overflow on huge counts.
func TestBackoffDelay(t *testing.T) {
	at := func(u float64) retry.Backoff {
		return retry.Backoff{Interval: time.Minute, MaxDelay: 24 * time.Hour, Rand: func() float64 { return u }}
	}
	for n, want := range map[uint32]time.Duration{0: time.Minute, 1: time.Minute, 2: 2 * time.Minute, 3: 4 * time.Minute,
		11: 1024 * time.Minute, 12: 21 * time.Hour, 1 << 31: 21 * time.Hour} {
		if got := at(0.5).Delay(n); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
	if lo, hi := at(0).Delay(3), at(1).Delay(3); lo != 3*time.Minute || hi != 5*time.Minute {
		t.Errorf("jitter range of 4m: [%v, %v], want [3m, 5m]", lo, hi)
	}
	if lo, hi := at(0).Delay(20), at(1).Delay(20); lo != 18*time.Hour || hi != 24*time.Hour {
		t.Errorf("jitter range at the cap: [%v, %v], want [18h, 24h]", lo, hi)
	}
}

// TestDue: the candidate rule.
func TestDue(t *testing.T) {
	const now, horizon = 1000, time.Hour
	cases := []struct {
		name string
		st   archive.RepoState
		want bool
	}{
		{"failed due", archive.RepoState{Status: archive.StatusFailed, Active: true, NextAttemptUS: now}, true},
		{"failed later", archive.RepoState{Status: archive.StatusFailed, Active: true, NextAttemptUS: now + 1}, false},
		{"failed inactive", archive.RepoState{Status: archive.StatusFailed, NextAttemptUS: 1}, false},
		{"pending", archive.RepoState{Status: archive.StatusPending, Active: true}, true},
		{"complete", archive.RepoState{Status: archive.StatusComplete, Active: true}, false},
		{"complete #sync", archive.RepoState{Status: archive.StatusComplete, Active: true, Refetch: archive.RefetchSync, NextAttemptUS: now}, true},
		{"unavailable reactivated", archive.RepoState{Status: archive.StatusUnavailable, Active: true, Refetch: archive.RefetchReactivated, NextAttemptUS: now}, true},
		{"not started reactivated", archive.RepoState{Status: archive.StatusNotStarted, Active: true, Refetch: archive.RefetchReactivated}, true},
		{"marked but inactive", archive.RepoState{Status: archive.StatusComplete, Refetch: archive.RefetchSync}, false},
		{"unavailable", archive.RepoState{Status: archive.StatusUnavailable}, false},
		{"not started active", archive.RepoState{Status: archive.StatusNotStarted, Active: true}, false},
		{"failed after refusals, mark kept, backoff", archive.RepoState{Status: archive.StatusFailed, Active: true, Refetch: archive.RefetchSync, NextAttemptUS: now + 5}, false},
		{"failed at the horizon", archive.RepoState{Status: archive.StatusFailed, Active: true, NextAttemptUS: now + horizon.Microseconds()}, false},
		{"failed past the horizon (a clock ahead)", archive.RepoState{Status: archive.StatusFailed, Active: true, NextAttemptUS: now + horizon.Microseconds() + 1}, true},
		{"inactive past the horizon", archive.RepoState{Status: archive.StatusFailed, NextAttemptUS: now + horizon.Microseconds() + 1}, false},
	}
	for _, c := range cases {
		if got := retry.Due(c.st, now, horizon); got != c.want {
			t.Errorf("%s: Due = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestHostShareAcrossPasses: with a host share of 2 and a queue of 4, one
// RunOnce still brings all of one host's repos in, pass after pass, one at
// a time at that host.
func TestHostShareAcrossPasses(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 120, RecordsMean: 3, Hosts: 2, Seed: 43, Traffic: oracle.TrafficNone})
	failed := e.activeByHost()[0][:20]
	e.seedFailed(failed)
	ps, err := e.runner(func(c *retry.Config) { c.Queue = 4; c.HostQueue = 2; c.HostWorkers = 1 }).RunOnce(context.Background())
	if err != nil || ps.Results[retry.ResultComplete] != len(failed) || ps.HostFull == 0 {
		t.Fatalf("host-share pass %+v %v; want every repo in over several passes", ps, err)
	}
	if got := e.src.max(e.hosts[0]); got != 1 {
		t.Fatalf("max concurrency at the host %d, want 1", got)
	}
	for _, a := range failed {
		e.replaced(a.DID)
	}
}

// TestRunRescansWhenHostShareDrains: Run with a long scan period still
// brings in every repo of a host whose queue share was full: the next pass
// starts as soon as the queue drains, not a period later.
func TestRunRescansWhenHostShareDrains(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 80, RecordsMean: 3, Hosts: 2, Seed: 45, Traffic: oracle.TrafficNone})
	accts := e.activeByHost()[1][:15]
	e.seedFailed(accts)
	stop := runBG(e.runner(func(c *retry.Config) { c.ScanPeriod = time.Hour; c.Queue = 4; c.HostQueue = 2; c.HostWorkers = 1 }))
	eventually(t, 15*time.Second, "every repo of the host", func() bool {
		for _, a := range accts {
			if st, err := e.store.RepoState(a.DID); err != nil || st.Status != archive.StatusComplete {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// TestWakeStartsAPass: with an hour-long scan period, a repo made due after
// the first pass is not fetched in the 59 minutes that follow (fake time,
// in a bubble), and is fetched as soon as Wake is called.
func TestWakeStartsAPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, 1, 0)
		close(e.jobs.release["host0"]) // jobs end at once
		r := e.runner(func(c *retry.Config) { c.ScanPeriod = time.Hour })
		stop := runBG(r)
		synctest.Wait()
		if n := r.Status().Passes; n != 1 {
			t.Fatalf("%d passes, want the first one", n)
		}
		did := e.repo(0, 0)
		e.seed(did)
		settle(59 * time.Minute)
		if n := e.jobs.startedOf(did); n != 0 || r.Status().Passes != 1 {
			t.Fatalf("%d jobs and %d passes before the wake, want none after the first pass", n, r.Status().Passes)
		}
		r.Wake()
		synctest.Wait()
		if n := e.jobs.startedOf(did); n != 1 {
			t.Fatalf("%d jobs after the wake, want 1", n)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		if _, err := r.RunOnce(context.Background()); err != nil {
			t.Fatalf("RunOnce after Run: %v", err)
		}
	})
}

// TestOneRunAtATime: a second Run on the same Runner is refused.
func TestOneRunAtATime(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 10, RecordsMean: 2, Hosts: 2, Seed: 51, Traffic: oracle.TrafficNone})
	r := e.runner(func(c *retry.Config) { c.ScanPeriod = time.Hour })
	stop := runBG(r)
	eventually(t, 5*time.Second, "the first pass", func() bool { return r.Status().Passes == 1 })
	if _, err := r.RunOnce(context.Background()); !errors.Is(err, retry.ErrRunning) {
		t.Fatalf("concurrent RunOnce: %v", err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

type panicJobs struct{}

func (panicJobs) Run(context.Context, backfill.Request) (backfill.Result, error) { panic("bug") }

// TestMachineryFailuresAreFatal (S6): a writer that stopped under a job, and
// a bug (panic) in the job path, each stop the run with ErrFatal, counted.
// A per-repo remote failure does not.
func TestMachineryFailuresAreFatal(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 30, RecordsMean: 2, Hosts: 2, Seed: 53, Traffic: oracle.TrafficNone})
	accts := e.activeByHost()[0]
	e.seedFailed(accts[:2])
	e.net.Faults().FailGetRepo(accts[0].DID, 500, oracle.Always)
	e.net.Faults().FailGetRepo(accts[1].DID, 404, oracle.Always)
	ps, err := e.runner(nil).RunOnce(context.Background())
	if err != nil || ps.Results[retry.ResultFailed] != 2 {
		t.Fatalf("remote failures: %+v %v; want two per-repo failures, no error", ps, err)
	}
	if got := metric(t, e.reg, "backstream_retry_fatal_total", nil); got != 0 {
		t.Fatalf("fatal_total = %v after remote failures", got)
	}

	_, err = e.runner(func(c *retry.Config) {
		c.Jobs = panicJobs{}
		c.Now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	}).RunOnce(context.Background())
	if !errors.Is(err, retry.ErrFatal) || !strings.Contains(err.Error(), "panic") {
		t.Fatalf("panicking job: %v", err)
	}

	e.seedFailed(accts[2:3])
	_ = e.w.Close()
	_, err = e.runner(nil).RunOnce(context.Background())
	if !errors.Is(err, retry.ErrFatal) || !errors.Is(err, archive.ErrClosed) {
		t.Fatalf("stopped writer: %v", err)
	}
	if got := metric(t, e.reg, "backstream_retry_fatal_total", nil); got != 2 {
		t.Fatalf("fatal_total = %v, want 2", got)
	}
}
