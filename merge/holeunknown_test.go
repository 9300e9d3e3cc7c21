package merge

import (
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestMergedHoleOfUnknownThenAccount: an account no listing named whose
// captured commit has a since (a history the archive lacks) is created
// pending, to be replaced wholesale; when its #account deleting, taking
// down or deactivating it was captured after that commit, the account
// must end as that #account leaves it, inactive, as it does when the two
// events are merged in two units: the pending pass then leaves it alone
// (a deleted account's replacement would meet RepoNotFound for an account
// shown active and fail, retried for good). The walk puts up to 1,024
// rows in a unit, so the two events share one far more often than not.
// An account with no #account after its commit stays pending and active.
func TestMergedHoleOfUnknownThenAccount(t *testing.T) {
	const open = "did:plc:unknownopen"
	statuses := map[string]string{
		"did:plc:unknowndeleted":     "deleted",
		"did:plc:unknowntakendown":   "takendown",
		"did:plc:unknowndeactivated": "deactivated",
	}
	for _, rows := range []int{1, 100} { // one event a unit; every event in one unit
		r := newRigWith(t, archive.WriterOptions{DiscoverUnknown: true})
		for did, status := range statuses {
			c := op(did, "05", archive.KindCreate, "a")
			c.Since = "03"
			r.capture(c)
			r.capture(archive.Event{Kind: archive.KindAccount, DID: did, Status: status, Source: archive.SourceLive})
		}
		c := op(open, "05", archive.KindCreate, "a")
		c.Since = "03"
		r.capture(c)
		if st := r.walk(rows); rows == 100 && st.Units != 1 {
			t.Fatalf("%d units, want 1", st.Units)
		}
		for did, status := range statuses {
			s, err := r.store.RepoState(did)
			if err != nil || s.Active || s.AccountStatus != status || s.Status != archive.StatusPending {
				t.Errorf("units of %d rows: %s, commit with a since then #account %s, is %+v (%v); want pending, inactive, %s",
					rows, did, status, s, err, status)
			}
		}
		if s, err := r.store.RepoState(open); err != nil || !s.Active || s.Status != archive.StatusPending || s.Refetch != archive.RefetchDiscovered {
			t.Errorf("units of %d rows: %s is %+v (%v); want pending, active, discovered", rows, open, s, err)
		}
	}
}
