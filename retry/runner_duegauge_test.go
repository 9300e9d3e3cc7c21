package retry_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/retry"
)

// TestDueGaugeFollowsABacklog: while one host drains a backlog of n due
// repos (4 host workers, a second a job) the runner makes no full pass
// until about half of it is done (a full pass costs the keys it reads), so
// the due count must follow the jobs that finish and the repos that come
// due between full passes: backstream_retry_due and /status's Due are the
// repos due now, not the count of the last full pass.
func TestDueGaugeFollowsABacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, 2, 0)
		const n = 2000
		for i := 0; i < n; {
			var dids []string
			for ; i < n && len(dids) < 1000; i++ {
				dids = append(dids, e.repo(0, i))
			}
			e.seed(dids...)
		}
		jobs := &slowCompleter{completer: completer{e.w}, d: time.Second}
		r := e.runner(func(c *retry.Config) { c.Jobs, c.ScanPeriod = jobs, retry.DefaultScanPeriod })
		stop := runBG(r)
		defer stop()
		check := func(when string, due int) {
			t.Helper()
			synctest.Wait()
			left := due - int(jobs.done.Load())
			if got := metric(t, e.reg, "backstream_retry_due", nil); int(got) != left {
				t.Fatalf("%s: backstream_retry_due = %v, want the %d repos due (%d done)", when, got, left, jobs.done.Load())
			}
			if st := r.Status(); st.Due != left {
				t.Fatalf("%s: /status due %d, want %d", when, st.Due, left)
			}
		}
		settle(100 * time.Second)
		check("100 s into the backlog", n)
		// Ten repos of another host come due now; a Wake's pass reads them.
		var fresh []archive.RepoUpdate
		for i := range 10 {
			up := failedDue(e.repo(1, i), "host1")
			up.State.NextAttemptUS = time.Now().UnixMicro()
			fresh = append(fresh, up)
		}
		if rc, err := e.w.Apply(context.Background(), &archive.Unit{Repos: fresh}); err != nil || rc.Refused != nil {
			t.Fatalf("seed host1: %v %v", err, rc.Refused)
		}
		r.Wake()
		settle(time.Millisecond)
		check("a Wake after ten more came due", n+10)
		settle(100 * time.Second)
		check("200 s into the backlog", n+10)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDueGaugeFullPassOverAFullQueue: a full pass offers each due repo
// it reads and waits while the whole queue is full, so over a backlog
// larger than the queue it ends only once the workers have taken most of
// it, and finished much of it. The jobs that finished while it read must
// not count as due once it ends: the due count is the repos due now.
func TestDueGaugeFullPassOverAFullQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, 0, 0)
		const hosts, per = 4, 50
		for h := range hosts {
			var dids []string
			for i := range per {
				dids = append(dids, e.repo(h, i))
			}
			e.seed(dids...)
		}
		jobs := &slowCompleter{completer: completer{e.w}, d: time.Second}
		r := e.runner(func(c *retry.Config) {
			c.Jobs, c.ScanPeriod = jobs, retry.DefaultScanPeriod
			c.Queue, c.HostQueue = 8, 8
		})
		stop := runBG(r)
		defer stop()
		at := 0
		for ; r.Status().Passes == 0; at++ {
			if at == hosts*per {
				t.Fatalf("no pass ended %d s into a backlog of %d: %+v", at, hosts*per, r.Status())
			}
			settle(time.Second)
		}
		if done := jobs.done.Load(); done < 2*8 {
			t.Fatalf("the first full pass ended with %d jobs done: it did not wait for the queue", done)
		}
		for ; ; at++ {
			left := hosts*per - int(jobs.done.Load())
			if got := metric(t, e.reg, "backstream_retry_due", nil); int(got) != left {
				t.Fatalf("%d s into full passes over a queue of 8 (%d done of %d): backstream_retry_due = %v, want the %d repos due",
					at, jobs.done.Load(), hosts*per, got, left)
			}
			if st := r.Status(); st.Due != left {
				t.Fatalf("%d s into full passes over a queue of 8: /status due %d, want %d", at, st.Due, left)
			}
			if left == 0 {
				break
			}
			settle(time.Second)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}
