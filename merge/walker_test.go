package merge

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/cockroachdb/pebble/vfs"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type rig struct {
	t       *testing.T
	store   *archive.Store
	w, capw *archive.Writer
	upSeq   int64
}

func newRig(t *testing.T) *rig { return newRigWith(t, archive.WriterOptions{}) }

// newRigWith is newRig with the archive writer's options (its Logger set
// here).
func newRigWith(t *testing.T, opts archive.WriterOptions) *rig {
	s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet, OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		t.Fatal(err)
	}
	opts.Logger = quiet
	w, _ := archive.NewWriter(s, opts)
	cw, _ := archive.NewWriter(s, archive.WriterOptions{Logger: quiet, Capture: true})
	r := &rig{t: t, store: s, w: w, capw: cw}
	t.Cleanup(func() { w.Close(); cw.Close(); s.Close() })
	return r
}

func (r *rig) apply(w *archive.Writer, u *archive.Unit) archive.Receipt {
	r.t.Helper()
	rc, err := w.Apply(context.Background(), u)
	if err != nil || rc.Refused != nil {
		r.t.Fatalf("apply: %v %v", err, rc.Refused)
	}
	return rc
}

func op(did, rev string, kind archive.Kind, rkey string) archive.Event {
	ev := archive.Event{Kind: kind, DID: did, Collection: "app.bsky.feed.post", RKey: rkey, Rev: rev, Source: archive.SourceLive}
	if kind != archive.KindDelete {
		ev.CID, ev.Record = []byte{1, 0x71, 0x12, 0x20, 9}, []byte{0xa0}
	}
	return ev
}

// capture appends one upstream event (all its rows) to cap/, like the
// capture consumer does: one unit per frame with cursor/relay.
func (r *rig) capture(evs ...archive.Event) {
	r.upSeq++
	for i := range evs {
		evs[i].UpstreamSeq = r.upSeq
	}
	r.apply(r.capw, &archive.Unit{Events: evs, Cursor: archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: uint64(r.upSeq)}})
}

func (r *rig) repo(did string, st archive.RepoState, snapshotRev string) {
	var evs []archive.Event
	if snapshotRev != "" {
		e := op(did, snapshotRev, archive.KindCreate, "snap")
		e.Source = archive.SourceBackfill
		evs = append(evs, e)
	}
	r.apply(r.w, &archive.Unit{Events: evs, Repos: []archive.RepoUpdate{{DID: did, Fields: archive.FieldStatus | archive.FieldActive | archive.FieldBackfillRev, State: st}}})
}

func (r *rig) walk(maxRows int) Stats {
	r.t.Helper()
	st, err := Walk(context.Background(), Config{Store: r.store, Writer: r.w, MaxRows: maxRows, Logger: quiet})
	if err != nil {
		r.t.Fatal(err)
	}
	return st
}

// rowsBy returns the merged rows per DID as "kind@rev" strings.
func (r *rig) mergedRows() map[string][]string {
	it, _ := r.store.Events(0)
	defer it.Close()
	out := map[string][]string{}
	for it.Next() {
		ev := it.Event()
		if ev.Source == archive.SourceMerge {
			out[ev.DID] = append(out[ev.DID], fmt.Sprintf("%s@%s", ev.Kind, ev.Rev))
		}
	}
	return out
}

// TestMergeKeptDroppedMatrix: M3 over complete, pending, failed, unavailable
// and never-fetched repos, and M8's side effects.
func TestMergeKeptDroppedMatrix(t *testing.T) {
	r := newRig(t)
	repos := map[string]struct {
		st   archive.RepoState
		snap string
	}{
		"did:plc:complete":    {archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: "05"}, "05"},
		"did:plc:pending":     {archive.RepoState{Status: archive.StatusPending, Active: true}, "05"},
		"did:plc:failed":      {archive.RepoState{Status: archive.StatusFailed, Active: true}, ""},
		"did:plc:unavailable": {archive.RepoState{Status: archive.StatusUnavailable, AccountStatus: "deactivated"}, ""},
	}
	for did, rp := range repos {
		r.repo(did, rp.st, rp.snap)
	}
	dids := []string{"did:plc:complete", "did:plc:pending", "did:plc:failed", "did:plc:unavailable", "did:plc:neverfetched"}
	for _, did := range dids {
		r.capture(op(did, "03", archive.KindCreate, "a"))
		r.capture(op(did, "05", archive.KindUpdate, "a"))
		r.capture(op(did, "07", archive.KindCreate, "b"), op(did, "07", archive.KindDelete, "a"))
		r.capture(archive.Event{Kind: archive.KindIdentity, DID: did, Handle: "h.test", Source: archive.SourceLive})
	}
	r.capture(archive.Event{Kind: archive.KindAccount, DID: "did:plc:unavailable", Active: true, Source: archive.SourceLive})
	r.capture(archive.Event{Kind: archive.KindSync, DID: "did:plc:complete", Rev: "09", Source: archive.SourceLive})
	r.capture(archive.Event{Kind: archive.KindAccount, DID: "did:plc:neverfetched", Active: true, Source: archive.SourceLive})

	st := r.walk(1) // the smallest units: one upstream event each
	got := r.mergedRows()
	want := map[string][]string{
		"did:plc:complete":     {"create@07", "delete@07", "identity@"}, // the #sync: ratchet and mark, no row
		"did:plc:pending":      {"create@07", "delete@07", "identity@"},
		"did:plc:failed":       {"create@03", "update@05", "create@07", "delete@07", "identity@"},
		"did:plc:unavailable":  {"create@03", "update@05", "create@07", "delete@07", "identity@", "account@"},
		"did:plc:neverfetched": {"create@03", "update@05", "create@07", "delete@07", "identity@", "account@"},
	}
	for _, did := range dids {
		if fmt.Sprint(got[did]) != fmt.Sprint(want[did]) {
			t.Errorf("%s merged %v, want %v", did, got[did], want[did])
		}
	}
	if st.Stale != 4 {
		t.Errorf("stale %d, want 4 (03 and 05 for the complete and pending repos)", st.Stale)
	}
	if tip, _ := r.store.CaptureTip(); st.Through != tip {
		t.Errorf("merged through %d, capture tip %d", st.Through, tip)
	}
	if c, err := r.store.MergeCursor(); err != nil || c != st.Through {
		t.Errorf("cursor/merge %d %v", c, err)
	}
	// Side effects (M8).
	if s, _ := r.store.RepoState("did:plc:unavailable"); !s.Active || s.Refetch != archive.RefetchReactivated || s.NextAttemptUS == 0 {
		t.Errorf("reactivation not marked: %+v", s)
	}
	if s, _ := r.store.RepoState("did:plc:complete"); s.Refetch != archive.RefetchSync {
		t.Errorf("#sync not marked: %+v", s)
	}
	if rev, err := r.store.Rev("did:plc:complete"); err != nil || rev != "09" {
		t.Errorf("#sync did not move the ratchet: %q %v, want 09", rev, err)
	}
	if _, err := r.store.RepoState("did:plc:neverfetched"); err == nil {
		t.Error("merge created a repo for an unknown account")
	}
}

// TestMergeResumes: a second walk (after more was captured, or after a
// restart) continues after cursor/merge: nothing twice, nothing skipped (M4).
func TestMergeResumes(t *testing.T) {
	r := newRig(t)
	did := "did:plc:x"
	for i := 0; i < 10; i++ {
		r.capture(archive.Event{Kind: archive.KindIdentity, DID: did, Handle: fmt.Sprintf("h%d.test", i), Source: archive.SourceLive})
	}
	if st := r.walk(3); st.Kept != 10 {
		t.Fatalf("first walk kept %d", st.Kept)
	}
	for i := 10; i < 15; i++ {
		r.capture(archive.Event{Kind: archive.KindIdentity, DID: did, Handle: fmt.Sprintf("h%d.test", i), Source: archive.SourceLive})
	}
	if st := r.walk(3); st.Kept != 5 {
		t.Fatalf("second walk kept %d, want 5", st.Kept)
	}
	if st := r.walk(3); st.Kept != 0 || st.Units != 0 {
		t.Fatalf("third walk did something: %+v", st)
	}
	it, _ := r.store.Events(0)
	defer it.Close()
	n := 0
	for it.Next() {
		if want := fmt.Sprintf("h%d.test", n); it.Event().Handle != want {
			t.Fatalf("row %d is %s, want %s", n, it.Event().Handle, want)
		}
		n++
	}
	if n != 15 {
		t.Fatalf("%d merged rows", n)
	}
}

// TestCleanup: one synced batch ends merging (M7).
func TestCleanup(t *testing.T) {
	r := newRig(t)
	r.capture(archive.Event{Kind: archive.KindIdentity, DID: "did:plc:x", Source: archive.SourceLive})
	r.walk(10)
	cur, _ := archive.EncodeListCursor(archive.ListCursor{Finished: true})
	r.apply(r.w, &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorListRepos, Value: cur}}})
	if err := Cleanup(Config{Store: r.store, Writer: r.w, Now: func() time.Time { return time.Unix(1, 0) }}); err != nil {
		t.Fatal(err)
	}
	if p, _ := r.store.Phase(); p != archive.PhaseSteadyState {
		t.Fatalf("phase %s", p)
	}
	if tip, _ := r.store.CaptureTip(); tip != 0 {
		t.Fatalf("capture not deleted: tip %d", tip)
	}
	for _, f := range []func() error{
		func() error { _, err := r.store.MergeCursor(); return err },
		func() error { _, err := r.store.ListCursor(false); return err },
	} {
		if err := f(); err == nil {
			t.Fatal("a merging cursor survived cleanup")
		}
	}
	if c, err := r.store.RelayCursor(); err != nil || c != 1 {
		t.Fatalf("relay cursor lost: %d %v", c, err)
	}
}

// TestMergeUnitBytesBounded: captured records may be up to 1 MiB each, so
// the walk cuts units by their bytes as well as their rows: 40 upstream
// events of a 512 KiB record each (20 MiB, far under 1,024 rows) are
// submitted as units of at most 4 MiB and one event, not as one unit of
// everything (8 such in flight would hold 8 GiB of 1 MiB records).
func TestMergeUnitBytesBounded(t *testing.T) {
	r := newRig(t)
	did := "did:plc:x"
	body := make([]byte, 512<<10)
	record := append([]byte{0xa1, 0x61, 't', 0x5a, 0, 8, 0, 0}, body...) // {"t": 512 KiB of bytes}
	for i := 0; i < 40; i++ {
		ev := op(did, fmt.Sprintf("3l%011d", i+1), archive.KindCreate, fmt.Sprintf("r%d", i))
		ev.Record = record
		r.capture(ev)
	}
	st := r.walk(0)
	perUnit := DefaultMaxUnitBytes/archive.EventBytes(&archive.Event{Record: record}) + 1
	if st.Kept != 40 || int64(st.Units) < (40+perUnit-1)/perUnit {
		t.Fatalf("walk: %d units kept %d rows of 512 KiB, want 40 rows in units of at most %d", st.Units, st.Kept, perUnit)
	}
}

// TestWalkReleasesCompactedTables: the walk reads cap/ through an iterator
// it opens again where it stands every iterMaxAge, so the tables the store
// compacts away meanwhile leave the disk during the walk, not at its end.
// The walk's clock (called once a unit) compacts cap/ away under the open
// iterator at its third reading, then runs 11 s a reading.
func TestWalkReleasesCompactedTables(t *testing.T) {
	r := newRig(t)
	did := "did:plc:x"
	for i := 0; i < 4; i++ { // four tables of cap/
		for j := 0; j < 40; j++ {
			r.capture(op(did, fmt.Sprintf("3l%011d", 40*i+j+1), archive.KindCreate, fmt.Sprintf("r%d", 40*i+j)))
		}
		if err := r.store.DB().Flush(); err != nil {
			t.Fatal(err)
		}
	}
	base, calls := time.Unix(1_700_000_000, 0), 0
	pinned, released := int64(-1), int64(-1)
	now := func() time.Time {
		calls++
		switch calls {
		case 3:
			if err := r.store.DB().Compact([]byte("cap/"), []byte("cap0"), false); err != nil { // '0' follows '/'
				t.Error(err)
			}
			pinned = storefault.HeldTables(r.store.DB())
		case 5:
			released = storefault.WaitReleased(r.store.DB(), 10*time.Second)
		}
		return base.Add(time.Duration(max(0, calls-3)) * 11 * time.Second)
	}
	st, err := Walk(context.Background(), Config{Store: r.store, Writer: r.w, MaxRows: 10, Logger: quiet, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if st.Kept != 160 || calls < 6 {
		t.Fatalf("walk kept %d rows with %d clock readings, want 160 rows and more than 5 readings", st.Kept, calls)
	}
	if pinned <= 0 || released != 0 {
		t.Fatalf("tables compacted away under the walk: %d held by it at once, %d still held two units after its clock ran past %v; want some, then none", pinned, released, iterMaxAge)
	}
}
