package retry_test

import (
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
)

// TestConvergesUnderFlakyFullTraffic: a network with full traffic (commits,
// #sync resets, deactivations, reactivations, deletions) and the flaky fault
// profile (a tenth of the repos answer 503 five times, one host limits
// getRepo to 100/s with 429 beyond, the firehose drops every 1000 frames).
// Every listed account starts as a due candidate; the live consumer and the
// runner run together. Once traffic ends, every active account is complete
// and folding the archive gives the network's records for every account,
// revs never going backwards.
func TestConvergesUnderFlakyFullTraffic(t *testing.T) {
	citest.Long(t, "end-to-end under traffic")
	e := newEnv(t, oracle.Config{Accounts: 300, RecordsMean: 10, Hosts: 4, Seed: 47, Rate: 200, Events: 2500,
		Traffic: oracle.TrafficFull, Faults: oracle.ProfileFlaky})
	live := e.live()
	var ups []archive.RepoUpdate
	for _, a := range e.net.World().Accounts() {
		switch {
		case a.Status == world.StatusDeleted:
		case a.Active:
			ups = append(ups, archive.RepoUpdate{DID: a.DID, Fields: archive.FieldStatus | archive.FieldActive | archive.FieldRefetch,
				State: archive.RepoState{Status: archive.StatusFailed, Active: true, Refetch: archive.RefetchDiscovered}})
		default:
			ups = append(ups, archive.RepoUpdate{DID: a.DID, Fields: archive.FieldStatus | archive.FieldActive | archive.FieldAccountStatus,
				State: archive.RepoState{Status: archive.StatusNotStarted, AccountStatus: a.Status}})
		}
	}
	e.apply(&archive.Unit{Repos: ups})
	start := time.Now()
	// The jobs write a failure's next attempt with the runner's schedule.
	e.jobs = e.newJobs(func(o *backfill.Options) {
		*o = retry.Backoff{Interval: 100 * time.Millisecond, MaxDelay: time.Second}.JobOptions(*o)
	})
	r := e.runner(func(c *retry.Config) {
		c.Interval = 100 * time.Millisecond
		c.MaxDelay = time.Second
		c.ScanPeriod = 100 * time.Millisecond
	})
	stop := runBG(r)
	var why string
	converged := func() bool {
		if !e.net.Status().Done || live.LastDurable() < e.net.Status().Seq {
			why = "traffic or live consumer not done"
			return false
		}
		for _, a := range e.net.World().Accounts() {
			if !a.Active {
				continue
			}
			st, err := e.store.RepoState(a.DID)
			if err != nil || st.Status != archive.StatusComplete || st.Refetch != archive.RefetchNone {
				why = a.DID + ": " + st.Status.String() + " " + st.Refetch.String() + " " + st.ErrClass + " " + st.LastError
				if err != nil {
					why += err.Error()
				}
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(60 * time.Second)
	for !converged() {
		if time.Now().After(deadline) {
			t.Fatalf("no convergence: %s (status %+v, live %d)", why, e.net.Status(), live.LastDurable())
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(start)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	got := fold(t, e.store)
	n := 0
	for _, a := range e.net.World().Accounts() {
		if !a.Active && a.Status != world.StatusDeleted {
			continue // never fetched while inactive
		}
		if !e.sameRecords(a.DID, got[a.DID]) {
			t.Fatalf("%s (%s) folds to %d records, the network has %d", a.DID, a.Status, len(got[a.DID]), len(e.net.World().Records(a.DID)))
		}
		n++
	}
	st := r.Status()
	t.Logf("converged in %v: %d accounts fold exactly; results %v; faults fired %v", took, n, st.Results, e.net.Faults().FiredAll())
	if e.net.Faults().Fired(oracle.FaultGetRepoStatus) == 0 || st.Results[retry.ResultFailed] == 0 {
		t.Fatalf("the flaky profile never failed a fetch")
	}
}
