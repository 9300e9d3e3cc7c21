package firehose

import (
	"context"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// TestCaptureChainBreakMarks: in capture mode, the consumer marks an
// account for a replacement at once when a captured commit's since is
// newer than the account's last captured commit (broken). An account's
// first captured commit is not judged here, whatever its snapshot
// (firstLost: merging does, against the snapshot, from the since cap/
// keeps — merge.TestMergeMarksCapturedHole). Not marked either: an account
// whose captured commits chain (whole), a first captured commit that
// follows its snapshot (firstOK), and one whose snapshot completed before
// this capture began (earlier).
func TestCaptureChainBreakMarks(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 36, Accounts: 16})
	s := openStore(t)
	archiveW, captureW := newWriter(t, s, false), newWriter(t, s, true)
	dids := activeDIDs(n.World())
	broken, whole, firstLost, firstOK, earlier := dids[0], dids[1], dids[2], dids[3], dids[4]
	complete := func(did string, at time.Time) {
		t.Helper()
		a, _ := n.World().Account(did)
		r, err := archiveW.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: did,
			Fields: archive.FieldStatus | archive.FieldActive | archive.FieldBackfillRev | archive.FieldCompleted,
			State:  archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: a.Rev, CompletedUS: at.UnixMicro()}}}})
		if err != nil || r.Refused != nil {
			t.Fatalf("seed: %v %v", err, r.Refused)
		}
	}
	post := func(did string) int64 {
		t.Helper()
		ev, err := n.Emit(func(w *world.World) (world.Event, error) {
			return w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "x", "createdAt": "2024-01-01T00:00:00Z"})
		})
		if err != nil {
			t.Fatal(err)
		}
		return ev.Seq
	}
	complete(earlier, time.Now().Add(-time.Hour))
	post(earlier) // taken by an earlier capture
	zero := int64(n.Status().Seq)
	c, m := newConsumer(t, Config{Relay: n.RelayURL(), Writer: captureW, MarkWriter: archiveW, Mode: ModeCapture, Cursor: &zero})
	for _, did := range []string{broken, whole, firstLost, firstOK} {
		complete(did, time.Now().Add(time.Second))
	}
	startRun(t, c)
	// drop swallows the next frame, which is did's commit.
	drop := func(did string) {
		t.Helper()
		n.Faults().DropFrames(1)
		fired := n.Faults().Fired(oracle.FaultDroppedFrame)
		post(did)
		waitFor(t, 5*time.Second, "the frame dropped", func() bool { return n.Faults().Fired(oracle.FaultDroppedFrame) > fired })
		n.Faults().DropFrames(0)
	}
	waitDurable(t, c, post(broken))
	waitDurable(t, c, post(whole))
	drop(broken)
	drop(firstLost)
	post(whole)
	post(firstLost)
	post(firstOK)
	post(broken)
	waitDurable(t, c, post(earlier))
	waitFor(t, 5*time.Second, "the replacement mark of "+broken, func() bool {
		st, err := s.RepoState(broken)
		return err == nil && st.Refetch == archive.RefetchUnverified
	})
	for _, did := range []string{whole, firstLost, firstOK, earlier} {
		if st, _ := s.RepoState(did); st.Refetch != archive.RefetchNone {
			t.Fatalf("%s marked: %+v", did, st)
		}
	}
	if got := counter(m.anomalies, AnomalyChainBreak); got != 1 {
		t.Fatalf("chain breaks counted %d, want 1", got)
	}
}

// TestCapturedChainFull: past its bound the chain remembers no new
// account: their commits are not checked, counted each time, and reported
// (linkFull) once; remembered accounts are still checked.
func TestCapturedChainFull(t *testing.T) {
	m := NewMetrics(nil)
	ch := newCapturedChain(1)
	commit := func(did, rev, since string) link {
		f := &upstream.Frame{Commit: &comatproto.SyncSubscribeRepos_Commit{Repo: did, Rev: rev, Since: &since}}
		return ch.next(f, m)
	}
	const a, b = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	got := []link{commit(a, "3kbbbbbbbbbb2", "3kaaaaaaaaaa2"), commit(b, "3kbbbbbbbbbb2", "3kaaaaaaaaaa2"),
		commit(b, "3kdddddddddd2", "3kcccccccccc2"), commit(a, "3kdddddddddd2", "3kcccccccccc2")}
	want := []link{linkOK, linkFull, linkOK, linkBroken}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("links %v, want %v", got, want)
		}
	}
	if n := counter(m.anomalies, AnomalyChainUntracked); n != 2 {
		t.Fatalf("untracked counted %d, want 2", n)
	}
}
