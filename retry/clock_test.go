package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/retry"
)

// TestClockAheadIsBounded: a store written while the wall clock ran a year
// ahead (a failure's next attempt 1 h after that clock, a host parked for
// 3 s after it), then read with the clock put right (an NTP fix, a VM
// restore). The runner writes no next attempt further ahead than MaxDelay
// nor a park longer than its longest (RetryAfterCeiling or Interval), so
// times beyond that came from a clock that was ahead: the repo is due and
// the host not parked, instead of both waiting a year.
func TestClockAheadIsBounded(t *testing.T) {
	e := newBubbleEnv(t, 2, 1)
	for h := range e.jobs.release {
		close(e.jobs.release[h]) // jobs complete at once
	}
	now := time.Now()
	ahead := now.Add(365 * 24 * time.Hour).UnixMicro()
	late, parked := e.repo(0, 0), e.repo(1, 0)
	if rc, err := e.w.Apply(context.Background(), &archive.Unit{
		Repos: []archive.RepoUpdate{{DID: late, Fields: archive.FieldNextAttempt,
			State: archive.RepoState{NextAttemptUS: ahead + time.Hour.Microseconds()}}},
		Hosts: []archive.HostUpdate{{Host: "host1", Func: func(cur archive.HostState) archive.HostState {
			cur.ParkedUntilUS = ahead + 3*time.Second.Microseconds()
			return cur
		}}},
	}); err != nil || rc.Refused != nil {
		t.Fatalf("apply: %v %v", err, rc.Refused)
	}
	r := e.runner(func(c *retry.Config) { c.Now = func() time.Time { return now } })
	ps, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("run once: %v", err)
	}
	if n := e.jobs.startedOf(late); n != 1 {
		t.Errorf("repo whose next attempt a year-ahead clock wrote: %d jobs, want 1 (pass %+v)", n, ps)
	}
	if n := e.jobs.startedOf(parked); n != 1 {
		t.Errorf("repo of a host a year-ahead clock parked: %d jobs, want 1 (pass %+v)", n, ps)
	}
}
