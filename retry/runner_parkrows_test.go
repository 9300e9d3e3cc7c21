package retry_test

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
	"github.com/cockroachdb/pebble"
)

// limitOnceJobs answers each repo's first job with a 429 (the repo made
// failed, class rate_limited, as a job does) and every later one by making
// it complete, on the host the test gave it.
type limitOnceJobs struct {
	w      *archive.Writer
	mu     sync.Mutex
	hostOf map[string]string
	ran    map[string]int
}

func (j *limitOnceJobs) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	j.mu.Lock()
	host := j.hostOf[req.DID]
	j.ran[req.DID]++
	first := j.ran[req.DID] == 1
	j.mu.Unlock()
	res := backfill.Result{DID: req.DID, Status: archive.StatusComplete, Host: host}
	st := archive.RepoState{Status: archive.StatusComplete, Host: host}
	if first {
		res.Status, res.Class = archive.StatusFailed, backfill.ClassRateLimited
		st = archive.RepoState{Status: archive.StatusFailed, Host: host, ErrClass: backfill.ClassRateLimited, LastError: "429",
			NextAttemptUS: time.Now().UnixMicro()}
	}
	u := &archive.Unit{Repos: []archive.RepoUpdate{{DID: req.DID, State: st,
		Fields: archive.FieldStatus | archive.FieldHost | archive.FieldError | archive.FieldNextAttempt}}}
	if rc, err := j.w.Apply(ctx, u); err != nil || rc.Refused != nil {
		return res, fmt.Errorf("apply %s: %v %v", req.DID, err, rc.Refused)
	}
	return res, nil
}

// hostRows lists the host/ rows of s.
func hostRows(t *testing.T, s *archive.Store) []string {
	t.Helper()
	end := append([]byte(nil), archive.PrefixHost...)
	end[len(end)-1]++
	it, err := s.DB().NewIter(&pebble.IterOptions{LowerBound: archive.PrefixHost, UpperBound: end})
	if err != nil {
		t.Fatalf("scan host/: %v", err)
	}
	defer it.Close()
	var rows []string
	for ok := it.First(); ok; ok = it.Next() {
		rows = append(rows, string(it.Key()))
	}
	return rows
}

// TestEndedParksLeaveNoHostRows (S4, H10): for 60 simulated days a new host
// a day answers one 429 and is parked; after the park its repo completes and
// the host is never heard of again (hosts come and go on the network). A
// park that has ended leaves nothing to keep about such a host, so host/
// holds no row for it: the family holds the hosts parked or failing now,
// not every host ever parked. A park that ended before the run started is
// cleared by its first pass; one still holding is kept.
func TestEndedParksLeaveNoHostRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, 0, 0)
		jobs := &limitOnceJobs{w: e.w, hostOf: map[string]string{}, ran: map[string]int{}}
		r := newRunner(t, retry.Config{Store: e.store, Writer: e.w, Jobs: jobs, Metrics: e.m},
			func(c *retry.Config) { c.ScanPeriod = time.Hour })
		// Parks a previous run wrote: one ended an hour ago, one holds for
		// 4 more minutes.
		now := time.Now()
		park := func(host string, until time.Time) archive.HostUpdate {
			return archive.HostUpdate{Host: host, Func: func(cur archive.HostState) archive.HostState {
				cur.ParkedUntilUS, cur.LastErrClass = until.UnixMicro(), backfill.ClassRateLimited
				return cur
			}}
		}
		if rc, err := e.w.Apply(context.Background(), &archive.Unit{Hosts: []archive.HostUpdate{
			park("ended.example", now.Add(-time.Hour)), park("held.example", now.Add(4*time.Minute))}}); err != nil || rc.Refused != nil {
			t.Fatalf("seed parks: %v %v", err, rc.Refused)
		}
		stop := runBG(r)
		defer func() {
			if err := stop(); err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		settle(time.Second)
		if rows := hostRows(t, e.store); len(rows) != 1 || rows[0] != "host/held.example" {
			t.Fatalf("after the run's first pass host/ holds %v, want only the host still parked (the ended park cleared)", rows)
		}
		const days = 60
		for d := range days {
			did, host := fmt.Sprintf("did:plc:day%02daaaaaaaaaaaaaaaaaaa", d), fmt.Sprintf("pds%02d.example", d)
			jobs.mu.Lock()
			jobs.hostOf[did] = host
			jobs.mu.Unlock()
			if rc, err := e.w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{failedDue(did, host)}}); err != nil || rc.Refused != nil {
				t.Fatalf("seed day %d: %v %v", d, err, rc.Refused)
			}
			r.Wake()
			settle(24 * time.Hour)
			if st, err := e.store.RepoState(did); err != nil || st.Status != archive.StatusComplete {
				t.Fatalf("day %d: %s is %v (%v), want complete after its park", d, did, st.Status, err)
			}
		}
		if rows := hostRows(t, e.store); len(rows) != 0 {
			t.Fatalf("after %d days of one host parked a day, each park long over and its repo complete, host/ holds %d rows (want 0): %v",
				days, len(rows), rows[:min(len(rows), 5)])
		}
		if got := metric(t, e.reg, "backstream_retry_parked_hosts", nil); got != 0 {
			t.Fatalf("parked_hosts = %v, want 0", got)
		}
	})
}
