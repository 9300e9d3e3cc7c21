package retry_test

import (
	"context"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
)

// TestReplacementDeferredDuringIndexBackfill: in a store archived before
// the record index, a repo due for a replacement while the index backfill
// runs is left due (deferred, reason index_pending): nothing fetched or
// archived, no failure written, and the runner goes on (the job's
// ErrIndexPending is not a machinery failure). Once the backfill is done
// the next pass replaces it, the record the repo lost deleted.
func TestReplacementDeferredDuringIndexBackfill(t *testing.T) {
	e := newEnv(t, replaceWorld())
	e.archiveAll()
	tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 3 })
	for p := range e.net.World().Records(tgt.DID) {
		if _, err := e.net.World().DeleteRecord(tgt.DID, p); err != nil {
			t.Fatal(err)
		}
		break
	}
	e.apply(&archive.Unit{Repos: []archive.RepoUpdate{{DID: tgt.DID, Fields: archive.FieldRefetch | archive.FieldNextAttempt,
		State: archive.RepoState{Refetch: archive.RefetchSync, NextAttemptUS: 1}}}})
	if err := check.ForgetIndex(e.store); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	before := e.state(tgt.DID)

	ps, err := e.runner(nil).RunOnce(context.Background())
	if err != nil {
		t.Fatalf("a pass during the index backfill: %v", err)
	}
	if n := e.src.callsOf(tgt.DID); n != 0 || ps.Due != 1 {
		t.Fatalf("during the index backfill: %d fetches, %d due; want none fetched, 1 due", n, ps.Due)
	}
	if got := metric(t, e.reg, "backstream_retry_deferred_total", map[string]string{"reason": "index_pending"}); got != 1 {
		t.Fatalf("deferred{index_pending} = %v, want 1", got)
	}
	if st := e.state(tgt.DID); st != before {
		t.Fatalf("the deferred repo's state moved: %+v, was %+v", st, before)
	}

	if _, err := e.store.FillIndex(context.Background(), 0, nil); err != nil {
		t.Fatal(err)
	}
	ps, err = e.runner(nil).RunOnce(context.Background())
	if err != nil || ps.Results[retry.ResultComplete] != 1 {
		t.Fatalf("the pass after the index backfill: %+v %v", ps, err)
	}
	e.replaced(tgt.DID)
}
