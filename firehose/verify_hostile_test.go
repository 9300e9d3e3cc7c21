package firehose

import (
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// heldPath is a path other than skip that the partial MST of the #commit m
// holds a value for (the commit's blocks prove the record is there), or
// skip itself when there is none.
func heldPath(t *testing.T, m *comatproto.SyncSubscribeRepos_Commit, paths map[string]cid.Cid, skip string) string {
	t.Helper()
	bs, err := upstream.ReadCommitBlocks(m.Blocks, cid.Cid(m.Commit))
	if err != nil {
		t.Fatal(err)
	}
	s, err := decodeCommit(&bs, cid.Cid(m.Commit))
	if err != nil {
		t.Fatal(err)
	}
	tree, err := loadTree(&bs, s.commit.Data)
	if err != nil {
		t.Fatal(err)
	}
	for p := range paths {
		if p == skip {
			continue
		}
		if v, err := tree.Get([]byte(p)); err == nil && v != nil {
			return p
		}
	}
	return skip
}

// TestLiveForgedDeleteOp: ops are not signed, so a relay can add a delete
// op to a genuine commit; without prev (a legacy op) the commit is not
// inverted. A delete of a path whose record the commit's own MST still
// holds is a lie all the same: the frame is dropped, counted as inversion
// and its account marked for a replacement, whether the lie disables the
// inversion (a delete without prev next to a sync 1.1 create) or the frame
// carries no prevData at all.
func TestLiveForgedDeleteOp(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 35, Accounts: 8, RecordsMean: 40})
	v := startVerify(t, n, ident.ModeStrict)
	dids := activeDIDs(n.World())
	victims := map[string]string{}
	for i, did := range dids[:2] {
		stripPrevData := i == 1
		v.emit(t, func(w *world.World) (world.Event, error) {
			ev, err := like(did)(w)
			if err != nil {
				return ev, err
			}
			created := ev.Commit.Ops[0].Path
			victim := heldPath(t, ev.Commit, w.Records(did), created)
			victims[did] = victim
			ev.Commit.Ops = append(ev.Commit.Ops, &comatproto.SyncSubscribeRepos_RepoOp{Action: "delete", Path: victim})
			if stripPrevData {
				ev.Commit.PrevData = nil
			}
			return ev, nil
		})
	}
	waitCaughtUp(t, n, v.c, nil)

	for _, r := range readLog(t, v.s, false) {
		if r.Kind == archive.KindDelete && victims[r.DID] == r.Collection+"/"+r.RKey {
			t.Errorf("%s: a delete of %s archived, a record its commit's MST holds", r.DID, victims[r.DID])
		}
	}
	for did := range victims {
		if st, err := v.s.RepoState(did); err != nil || st.Refetch != archive.RefetchUnverified {
			t.Errorf("%s not marked for a replacement: %+v %v", did, st, err)
		}
	}
	if got := promtest.Value(t, v.reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "inversion"}); got != 2 {
		t.Errorf("verify_total{live,inversion} = %v, want 2", got)
	}
}
