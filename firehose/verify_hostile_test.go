package firehose

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// heldPath is a path other than skip that the partial MST of the #commit m
// holds a value for (the commit's blocks prove the record is there), or
// skip itself when there is none.
func heldPath(t *testing.T, m *comatproto.SyncSubscribeRepos_Commit, paths map[string]cid.Cid, skip string) string {
	t.Helper()
	bs, s := commitBlocks(t, m)
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

// TestLiveFutureRevCommit: a commit whose rev is a TID a year ahead of the
// clock, validly signed (the account's PDS holds its key), is dropped,
// counted and its account marked for a replacement, as the relay's own
// check does (five minutes of skew allowed): archived, it would move the
// account's ratchet a year ahead and every genuine commit after it would
// be dropped as stale. So is such a #sync (which moves the ratchet alone).
// A rev a minute ahead (clock skew) is archived.
func TestLiveFutureRevCommit(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 36, Accounts: 6})
	v := startVerify(t, n, ident.ModeStrict)
	dids := activeDIDs(n.World())
	did, skewed, synced := dids[0], dids[1], dids[2]
	syncedRev, _ := v.s.Rev(synced)
	v.emit(t, like(did))
	bad := v.emit(t, func(w *world.World) (world.Event, error) { return w.FutureRevCommit(did, 365*24*time.Hour) })
	badSync := v.emit(t, func(w *world.World) (world.Event, error) { return w.FutureRevSync(synced, 365*24*time.Hour) })
	skew := v.emit(t, func(w *world.World) (world.Event, error) { return w.FutureRevCommit(skewed, time.Minute) })
	after := v.emit(t, like(did))
	waitCaughtUp(t, n, v.c, nil)

	got := v.paths(t)
	for _, p := range opPaths(bad) {
		if got[did][p] {
			t.Errorf("record %s of a commit of rev %s (a year ahead) archived", p, bad.Event.Commit.Rev)
		}
	}
	for _, e := range []oracle.Emitted{after, skew} {
		for _, p := range opPaths(e) {
			if !got[e.Event.DID][p] {
				t.Errorf("%s: record %s of rev %s missing", e.Event.DID, p, e.Event.Commit.Rev)
			}
		}
	}
	if rev, _ := v.s.Rev(synced); rev != syncedRev {
		t.Errorf("a #sync of rev %s (a year ahead) moved the ratchet to %q", badSync.Event.Sync.Rev, rev)
	}
	for _, d := range []string{did, synced} {
		if st, err := v.s.RepoState(d); err != nil || st.Refetch != archive.RefetchUnverified {
			t.Errorf("%s not marked for a replacement: %+v %v", d, st, err)
		}
	}
	if got := promtest.Value(t, v.reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "rev"}); got != 2 {
		t.Errorf("verify_total{live,rev} = %v, want 2", got)
	}
}

// TestLiveHiddenDeleteSchedulesReplacement: the oracle's relay drops a
// genuine commit's delete op and strips its prevData and prevs
// (Faults.HideDeletes), so the commit looks legacy and cannot be inverted.
// It is archived, as legacy commits are, but counted (anomaly uninverted)
// and its account scheduled for a replacement (uninverted): due now for an
// account whose snapshot is older than the interval, due at its snapshot's
// completion plus the interval for one completed since (the bound on what
// a PDS that never sends prevData costs: one download per interval), and
// an account already marked keeps its reason, due again from now if it
// was due already (its replacement may be running from an older
// snapshot), at its own time if that is later. A sync 1.1 delete is inverted
// and schedules nothing.
func TestLiveHiddenDeleteSchedulesReplacement(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 37, Accounts: 12, RecordsMean: 20})
	v := startVerify(t, n, ident.ModeStrict)
	dids := activeDIDs(n.World())
	old, recent, marked, later, genuine, loop := dids[0], dids[1], dids[2], dids[3], dids[4], dids[5]
	nowUS := v.now.UnixMicro()
	recentUS := nowUS - time.Hour.Microseconds()
	markedUS := nowUS - 5*time.Second.Microseconds()
	laterUS := nowUS + time.Minute.Microseconds()
	r, err := v.w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{
		{DID: recent, Fields: archive.FieldCompleted, State: archive.RepoState{CompletedUS: recentUS}},
		{DID: marked, Fields: archive.FieldRefetch | archive.FieldNextAttempt, State: archive.RepoState{Refetch: archive.RefetchSync, NextAttemptUS: markedUS}},
		{DID: later, Fields: archive.FieldRefetch | archive.FieldNextAttempt, State: archive.RepoState{Refetch: archive.RefetchSync, NextAttemptUS: laterUS}},
		// Replaced an hour ago and due again: a legacy commit during that
		// replacement must not make it due at once after it, or an account
		// committing during each of its replacements would be downloaded
		// without end.
		{DID: loop, Fields: archive.FieldRefetch | archive.FieldNextAttempt | archive.FieldCompleted, State: archive.RepoState{Refetch: archive.RefetchUninverted, NextAttemptUS: markedUS, CompletedUS: recentUS}},
	}})
	if err != nil || r.Refused != nil {
		t.Fatalf("seed: %v %v", err, r.Refused)
	}
	n.Faults().HideDeletes(5)
	for _, did := range []string{old, recent, marked, later, loop, genuine} {
		path := slices.Sorted(maps.Keys(n.World().Records(did)))[0]
		v.emit(t, func(w *world.World) (world.Event, error) { return w.DeleteRecord(did, path) })
	}
	waitCaughtUp(t, n, v.c, nil)
	if got := n.Faults().Fired(oracle.FaultHiddenDelete); got != 5 {
		t.Fatalf("hidden_delete fired %d times, want 5", got)
	}

	want := map[string]archive.RepoState{
		old:     {Refetch: archive.RefetchUninverted, NextAttemptUS: nowUS},
		recent:  {Refetch: archive.RefetchUninverted, NextAttemptUS: recentUS + DefaultUninvertedInterval.Microseconds()},
		marked:  {Refetch: archive.RefetchSync, NextAttemptUS: nowUS}, // due again from now: its replacement may be running
		later:   {Refetch: archive.RefetchSync, NextAttemptUS: laterUS},
		loop:    {Refetch: archive.RefetchUninverted, NextAttemptUS: recentUS + DefaultUninvertedInterval.Microseconds()},
		genuine: {Refetch: archive.RefetchNone},
	}
	for did, w := range want {
		st, err := v.s.RepoState(did)
		if err != nil || st.Refetch != w.Refetch || st.NextAttemptUS != w.NextAttemptUS {
			t.Errorf("%s: refetch %s next %d (%v), want %s next %d", did, st.Refetch, st.NextAttemptUS, err, w.Refetch, w.NextAttemptUS)
		}
	}
	if got := counter(v.c.m.anomalies, AnomalyUninverted); got != 5 {
		t.Errorf("anomalies{uninverted} = %v, want 5", got)
	}
	if got := promtest.Value(t, v.reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "ok"}); got != 6 {
		t.Errorf("verify_total{live,ok} = %v, want 6 (a legacy commit is archived)", got)
	}
}
