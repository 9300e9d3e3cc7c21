package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
)

// TestTakedownBetweenFetchAndSubmit (S5, S8): a #sync makes a repo due;
// while its replacement is between download and submission, the account is
// taken down and the live consumer archives its account row. The
// replacement must not archive the snapshot's records after the takedown:
// the account folds to nothing, as the network says.
func TestTakedownBetweenFetchAndSubmit(t *testing.T) {
	for _, status := range []string{world.StatusTakendown, world.StatusDeleted} {
		t.Run(status, func(t *testing.T) {
			e := newEnv(t, replaceWorld())
			e.archiveAll()
			e.live()
			tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 2 })
			e.emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(tgt.DID, 5) })
			eventually(t, 10*time.Second, "the #sync mark", func() bool { return e.state(tgt.DID).Refetch == archive.RefetchSync })
			e.src.afterGet = func(did string, n int) {
				if did != tgt.DID || n != 1 {
					return
				}
				if _, err := e.net.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(did, status) }); err != nil {
					t.Error(err)
					return
				}
				if !poll(10*time.Second, func() bool {
					st, err := e.store.RepoState(did)
					return err == nil && !st.Active
				}) {
					t.Error("the takedown was never archived")
				}
			}
			if _, err := e.runner(nil).RunOnce(context.Background()); err != nil {
				t.Fatal(err)
			}
			f := fold(t, e.store)
			if _, bad := check.Compare(f, e.net.World(), func(a world.Account) bool { return a.DID == tgt.DID }); len(bad) > 0 {
				t.Fatalf("after a replacement that raced the account's %s: %s", status, check.Describe(bad, 3))
			}
			if st := e.state(tgt.DID); st.Active || st.Status == archive.StatusFailed {
				t.Fatalf("%s after the replacement: %+v; want it inactive and not failed", tgt.DID, st)
			}
			// S8: an account the archive holds inactive is not fetched again.
			if n := e.src.callsOf(tgt.DID); n != 1 {
				t.Fatalf("getRepo %d times for %s, want 1 (none once it is inactive)", n, tgt.DID)
			}
		})
	}
}
