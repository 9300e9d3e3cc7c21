package merge

import (
	"fmt"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
)

// TestMergedCommitOfListedTakedown: bootstrap's listing named two accounts
// taken down (recorded not_started, inactive, status takendown: no rows),
// and the firehose captured before that listing holds a commit of each.
// For one the #account takedown that followed its commit was lost (a
// dropped frame): the merged archive must still not serve the commit's
// records, as the archive holds the account taken down and no audit looks
// at it again (seen as a taken-down account with "3 extra" records in
// crash.TestProcessHealDroppedFrames). The other was reactivated, its
// #account captured before a new commit, in the same unit: that commit
// is kept.
func TestMergedCommitOfListedTakedown(t *testing.T) {
	r := newRig(t)
	const gone, back = "did:plc:takendown", "did:plc:reactivated"
	for _, did := range []string{gone, back} {
		r.apply(r.w, &archive.Unit{Repos: []archive.RepoUpdate{{DID: did, Fields: archive.FieldStatus | archive.FieldActive | archive.FieldAccountStatus,
			State: archive.RepoState{Status: archive.StatusNotStarted, AccountStatus: "takendown"}}}})
	}
	r.capture(op(gone, "03", archive.KindCreate, "a"), op(gone, "03", archive.KindCreate, "b"))
	r.capture(op(back, "03", archive.KindCreate, "a"))
	r.capture(archive.Event{Kind: archive.KindAccount, DID: back, Status: "takendown", Source: archive.SourceLive})
	r.capture(archive.Event{Kind: archive.KindAccount, DID: back, Active: true, Source: archive.SourceLive})
	r.capture(op(back, "05", archive.KindCreate, "c"))
	st := r.walk(100) // one unit
	if st.Units != 1 {
		t.Fatalf("%d units, want 1", st.Units)
	}
	folds := merged(t, r.store)
	if recs := folds[gone]; len(recs) > 0 {
		t.Errorf("an account the archive holds taken down folds to %d records after the merge: %v", len(recs), recs)
	}
	if got := fmt.Sprint(folds[back]); got != "map[app.bsky.feed.post/c:true]" {
		t.Errorf("the reactivated account folds to %s, want its commit after the reactivation", got)
	}
	if st.Stale != 3 {
		t.Errorf("stale %d, want 3 (the commits before each account's takedown)", st.Stale)
	}
}

// merged folds ev/: each account's records (an erasing #account row
// clears what came before it).
func merged(t *testing.T, s *archive.Store) map[string]map[string]bool {
	t.Helper()
	it, err := s.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string]map[string]bool{}
	for it.Next() {
		ev := it.Event()
		recs := out[ev.DID]
		if recs == nil {
			recs = map[string]bool{}
			out[ev.DID] = recs
		}
		switch ev.Kind {
		case archive.KindAccount:
			if check.Erases(ev.Status) {
				clear(recs)
			}
		case archive.KindCreate, archive.KindUpdate:
			recs[ev.Collection+"/"+ev.RKey] = true
		case archive.KindDelete:
			delete(recs, ev.Collection+"/"+ev.RKey)
		}
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
