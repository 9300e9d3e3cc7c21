package retry_test

import (
	"context"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
)

// TestNotFoundOfActiveAccount: a replacement that meets
// RepoNotFound for an account the store shows active (a migration window)
// ends failed, class not_found_active, with no sync row — the account's
// records stay — and once the repo is back, the next replacement of the
// unchanged repo applies.
func TestNotFoundOfActiveAccount(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 20, RecordsMean: 4, Hosts: 2, Seed: 55, Traffic: oracle.TrafficNone})
	e.archiveAll()
	a := e.pick(func(a world.Account) bool { return a.Active && a.Records > 0 })
	other := e.net.HostURLs()[1-a.Host]
	// The relay sends the next getRepo to a host that does not hold the repo.
	e.net.Faults().RedirectTo(a.DID, other+"/xrpc/com.atproto.sync.getRepo?did="+a.DID, 1)
	e.apply(&archive.Unit{Repos: []archive.RepoUpdate{{DID: a.DID, Fields: archive.FieldRefetch | archive.FieldNextAttempt,
		State: archive.RepoState{Refetch: archive.RefetchSync, NextAttemptUS: 1}}}})
	ps, err := e.runner(nil).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first pass: %v; state %+v", ps.Results, e.state(a.DID))
	if st := e.state(a.DID); st.Status != archive.StatusFailed || st.ErrClass != backfill.ClassNotFoundActive {
		t.Errorf("RepoNotFound for an active account made it %v, want failed (a migration window)", st.Status)
	}
	// The account is back where it was: another replacement.
	e.apply(&archive.Unit{Repos: []archive.RepoUpdate{{DID: a.DID, Fields: archive.FieldRefetch | archive.FieldNextAttempt | archive.FieldStatus,
		State: archive.RepoState{Status: archive.StatusComplete, Refetch: archive.RefetchSync, NextAttemptUS: 1}}}})
	ps, err = e.runner(nil).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("second pass: %v; state %+v", ps.Results, e.state(a.DID))
	if ps.Results[retry.ResultComplete] != 1 {
		t.Errorf("the unchanged repo could not be replaced again: %v", ps.Results)
	}
	if !e.sameRecords(a.DID, fold(t, e.store)[a.DID]) {
		t.Errorf("%s folds to %d records, the network has %d", a.DID, len(fold(t, e.store)[a.DID]), a.Records)
	}
}
