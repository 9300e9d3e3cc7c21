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
