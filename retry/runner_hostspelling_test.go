package retry_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/retry"
)

// ranJobs records the repos it is asked to replace and reports each
// complete.
type ranJobs struct {
	mu  sync.Mutex
	ran []string
}

func (j *ranJobs) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	j.mu.Lock()
	j.ran = append(j.ran, req.DID)
	j.mu.Unlock()
	return backfill.Result{DID: req.DID, Status: archive.StatusComplete}, nil
}

// TestParkHoldsTheHostInAnySpelling (S4): a store written by an older
// build records a repo's host as the download named it (upper case, a
// trailing dot, the scheme's default port written), while a park names the
// host in its canonical form. A parked host holds its repos in every
// spelling, and the relay's park holds a repo recorded on the relay
// spelled otherwise; a repo of another host still runs.
func TestParkHoldsTheHostInAnySpelling(t *testing.T) {
	for _, tc := range []struct {
		name, parked string
		held         []string // the stored hosts of the repos the park holds
	}{
		{"pds", "pds.example", []string{"pds.example", "PDS.Example:443", "pds.example.", "pds.example.:0443"}},
		{"relay", "relay.example", []string{"relay.example", "RELAY.example:443", "relay.example."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newBubbleEnv(t, 0, 0)
			jobs := &ranJobs{}
			r := newRunner(t, retry.Config{Store: e.store, Writer: e.w, Jobs: jobs, Metrics: e.m},
				func(c *retry.Config) { c.Relay = "relay.example" })
			u := &archive.Unit{Hosts: []archive.HostUpdate{{Host: tc.parked, Func: func(cur archive.HostState) archive.HostState {
				cur.ParkedUntilUS, cur.LastErrClass = time.Now().Add(4*time.Minute).UnixMicro(), backfill.ClassRateLimited
				return cur
			}}}}
			var held []string
			for i, h := range tc.held {
				did := fmt.Sprintf("did:plc:held%02daaaaaaaaaaaaaaaaaaa", i)
				held = append(held, did)
				u.Repos = append(u.Repos, failedDue(did, h))
			}
			other := "did:plc:otheraaaaaaaaaaaaaaaaaaa"
			if tc.name == "pds" {
				u.Repos = append(u.Repos, failedDue(other, "other.example"))
			}
			if rc, err := e.w.Apply(context.Background(), u); err != nil || rc.Refused != nil {
				t.Fatalf("seed: %v %v", err, rc.Refused)
			}
			ps, err := r.RunOnce(context.Background())
			if err != nil {
				t.Fatalf("run once: %v", err)
			}
			jobs.mu.Lock()
			defer jobs.mu.Unlock()
			for _, did := range held {
				if slices.Contains(jobs.ran, did) {
					st, _ := e.store.RepoState(did)
					t.Errorf("%s, recorded on %q, was replaced while %q is parked (pass %+v)", did, st.Host, tc.parked, ps)
				}
			}
			if tc.name == "pds" && !slices.Contains(jobs.ran, other) {
				t.Errorf("the repo of a host not parked did not run (pass %+v)", ps)
			}
		})
	}
}
