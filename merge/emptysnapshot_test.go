package merge

import (
	"fmt"
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestMergeEmptySnapshotIsTheRatchet: an account whose snapshot holds no
// record completes with its rev in BackfillRev but writes no row, so it
// sets no rev/. The commits captured before that snapshot are covered by
// it as much as a non-empty snapshot's are: merged after it, they must be
// dropped as stale. Both accounts here have a create at 03 captured, and
// the delete at 04 that erased the record never reached cap/ (a frame
// that failed verification: capture marked the account, and the bootstrap
// job that started after the mark cleared it); their snapshots at 05 are
// empty. The idle account commits nothing after it: the create at 03,
// kept, would bring back for good a record it deleted before its
// snapshot. The busy one commits at 07 (since 05): kept, the create at 03
// would also make that commit's since look like a hole, and the account
// fetched again whole for nothing.
func TestMergeEmptySnapshotIsTheRatchet(t *testing.T) {
	r := newRig(t)
	const idle, busy = "did:plc:emptyidle", "did:plc:emptybusy"
	for _, did := range []string{idle, busy} {
		r.repo(did, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: "05"}, "") // no rows
		created := op(did, "03", archive.KindCreate, "a")
		created.Since = "02"
		r.capture(created)
		// the delete at 04 (since 03) was lost
	}
	later := op(busy, "07", archive.KindCreate, "b")
	later.Since = "05"
	r.capture(later)
	st := r.walk(1)
	rows, folds := r.mergedRows(), merged(t, r.store)
	for did, want := range map[string][2]string{
		idle: {"[]", "map[]"},
		busy: {"[create@07]", "map[app.bsky.feed.post/b:true]"},
	} {
		if got := fmt.Sprint(rows[did]); got != want[0] {
			t.Errorf("%s merged %s, want %s: a commit older than the account's empty snapshot is covered by it", did, got, want[0])
		}
		if got := fmt.Sprint(folds[did]); got != want[1] {
			t.Errorf("%s folds to %s, want %s", did, got, want[1])
		}
		if s, _ := r.store.RepoState(did); s.Refetch != archive.RefetchNone {
			t.Errorf("%s was marked for a replacement (%v); nothing is missing after its snapshot", did, s.Refetch)
		}
	}
	if st.Stale != 2 {
		t.Errorf("stale %d, want 2 (each account's create at 03)", st.Stale)
	}
}
