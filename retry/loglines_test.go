package retry_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/logtest"
	"github.com/backstream/backstream/retry"
)

// refusingJobs is a retry.Jobs answering every job at a host whose name
// begins "limited" with a 429 and every other with a stale replacement.
type refusingJobs struct{ hostOf map[string]string }

func (j refusingJobs) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	h := j.hostOf[req.DID]
	if strings.HasPrefix(h, "limited") {
		return backfill.Result{DID: req.DID, Status: archive.StatusFailed, Class: backfill.ClassRateLimited, Host: h,
			Err: fmt.Errorf("getRepo: 429")}, nil
	}
	return backfill.Result{DID: req.DID}, fmt.Errorf("%w: %s", backfill.ErrStale, req.DID)
}

// TestOutcomeLogBounded: 500 hosts each answering 429 (each host parked)
// and 500 accounts whose replacement is refused as stale past MaxRefetch
// (each failed with backoff) in one pass. Each is counted
// (backstream_retry_attempts_total{result}); the log gets a line of each a
// minute, not one per host or account.
func TestOutcomeLogBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 500
		e := newBubbleEnv(t, 0, 0)
		jobs := refusingJobs{hostOf: map[string]string{}}
		var dids []string
		for i := range 2 * n {
			did := fmt.Sprintf("did:plc:r%06daaaaaaaaaaaaaaaaa", i)
			jobs.hostOf[did] = fmt.Sprintf("stale%d.test", i)
			if i < n {
				jobs.hostOf[did] = fmt.Sprintf("limited%d.test", i)
			}
			e.jobs.hostOf[did] = jobs.hostOf[did]
			dids = append(dids, did)
		}
		e.seed(dids...)
		var lines logtest.Counter
		r := e.runner(func(c *retry.Config) { c.Jobs, c.Logger, c.Workers = jobs, lines.Logger(), 64 })
		ps, err := r.RunOnce(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if ps.Results[retry.ResultRateLimited] != n || ps.Results[retry.ResultStale] != n*(retry.DefaultMaxRefetch+1) {
			t.Fatalf("results %v: want %d rate_limited, %d stale", ps.Results, n, n*(retry.DefaultMaxRefetch+1))
		}
		if got := metric(t, e.reg, "backstream_retry_parked_hosts", nil); got != n {
			t.Fatalf("backstream_retry_parked_hosts = %v, want %d", got, n)
		}
		if got := lines.Lines(); got > 2 {
			t.Fatalf("%d hosts parked and %d accounts failed stale in one pass wrote %d log lines at INFO or above, want at most 2", n, n, got)
		}
	})
}
