package archive

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

func FuzzDecodeGap(f *testing.F) {
	for _, g := range []Gap{
		{Kind: GapOutdatedCursor, FromSeq: 10, ToSeq: 500, FirstSeenUS: 1},
		{Kind: GapAudit, FirstSeenUS: 1 << 50, ClosedUS: 1<<50 + 7},
	} {
		b, err := EncodeGap(g)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x01, 0x07, 0, 0, 1, 0})          // guards: an unknown kind
	f.Add([]byte{0x01, 0x01, 0, 0, 0, 0})          // guards: no first-seen time
	f.Add([]byte{0x01, 0x01, 0x80, 0x00, 0, 1, 0}) // guards: a non-minimal uvarint
	f.Add([]byte{0x02, 0x01, 0, 0, 1, 0})          // guards: an unknown version
	f.Fuzz(func(t *testing.T, b []byte) {
		g, err := DecodeGap(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if re, _ := EncodeGap(g); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

// TestGapRowsThroughUnits: a gap and an audit cursor travel as unit Puts,
// and Gaps reads them back in id order; a malformed gap row fails the read
// naming its key, never an empty list.
func TestGapRowsThroughUnits(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	var puts []KV
	for _, g := range []Gap{
		{ID: 2, Kind: GapSeqSkip, FromSeq: 7, ToSeq: 9000, FirstSeenUS: 20},
		{ID: 1, Kind: GapFutureCursor, FromSeq: 500, ToSeq: 3, FirstSeenUS: 10},
	} {
		kv, err := GapPut(g)
		if err != nil {
			t.Fatal(err)
		}
		puts = append(puts, kv)
	}
	ac, err := AuditPut(1, Audit{Phase: AuditList, Cursor: "abc", Marked: 3, Listed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	puts = append(puts, ac)
	if r := apply(t, w, &Unit{Puts: puts}); r.Refused != nil {
		t.Fatalf("refused: %v", r.Refused)
	}
	gs, err := s.Gaps()
	if err != nil || len(gs) != 2 || gs[0].ID != 1 || gs[1].ID != 2 || gs[0].Kind != GapFutureCursor || gs[1].ToSeq != 9000 {
		t.Fatalf("gaps %+v, %v", gs, err)
	}
	if id, _ := s.NextGapID(); id != 3 {
		t.Fatalf("next gap id %d, want 3", id)
	}
	if a, err := s.Audit(1); err != nil || a.Cursor != "abc" || a.Phase != AuditList || a.Marked != 3 || a.Listed != 1000 {
		t.Fatalf("audit %+v, %v", a, err)
	}
	if r := apply(t, w, &Unit{Puts: []KV{{Key: GapKey(3), Value: []byte{0x01, 0x09, 0, 0, 1, 0}}}}); r.Refused != nil {
		t.Fatalf("refused: %v", r.Refused) // the writer stores Puts as given
	}
	if _, err := s.Gaps(); !errors.Is(err, ErrMalformed) {
		t.Fatalf("malformed gap row read as %v", err)
	}
}

// TestRecordRelayGap: --reset-relay-cursor's batch records the gap after the
// durable cursor, the new relay, and drops the cursor, all at once.
func TestRecordRelayGap(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	apply(t, w, &Unit{Cursor: SeqCursor{Key: KeyCursorRelay, Seq: 4321}})
	w.Close()
	now := time.Unix(1700000000, 0)
	g, err := s.RecordRelayGap("relay.example", true, now)
	if err != nil {
		t.Fatal(err)
	}
	gs, err := s.Gaps()
	if err != nil || len(gs) != 1 || gs[0] != g || g.FromSeq != 4321 || g.Kind != GapRelayReset || g.FirstSeenUS != now.UnixMicro() || !g.Open() {
		t.Fatalf("gaps %+v (returned %+v), %v", gs, g, err)
	}
	if _, err := s.RelayCursor(); !errors.Is(err, ErrNotFound) {
		t.Fatalf("cursor/relay after the reset: %v", err)
	}
	if h, _ := s.Relay(); h != "relay.example" {
		t.Fatalf("relay %q", h)
	}
}

// TestCursorReset: a unit whose cursor resets moves cursor/relay down once
// (a relay restarted its sequence), and later units move it up from there;
// without Reset the cursor never goes backwards. (A reset while units
// carrying the cursor wait behind a replacement: TestBarrierCursorReset.)
func TestCursorReset(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	at := func(seq uint64, reset bool) Receipt {
		return apply(t, w, &Unit{Cursor: SeqCursor{Key: KeyCursorRelay, Seq: seq, Reset: reset}})
	}
	at(5000, false)
	if r := at(3, false); r.Cursor != 5000 {
		t.Fatalf("a plain unit moved the cursor back: %d", r.Cursor)
	}
	if r := at(3, true); r.Refused != nil || r.Cursor != 3 {
		t.Fatalf("reset: cursor %d, refused %v", r.Cursor, r.Refused)
	}
	if c, _ := s.RelayCursor(); c != 3 {
		t.Fatalf("durable cursor %d after the reset, want 3", c)
	}
	if r := at(4, false); r.Cursor != 4 {
		t.Fatalf("after the reset: cursor %d, want 4", r.Cursor)
	}
	if c, _ := s.RelayCursor(); c != 4 {
		t.Fatalf("durable cursor %d, want 4", c)
	}
}

func FuzzDecodeAudit(f *testing.F) {
	for _, a := range []Audit{
		{Phase: AuditList},
		{Phase: AuditList, Cursor: "did:plc:xyz", Marked: 7, Listed: 1000},
		{Phase: AuditDone},
	} {
		b, err := EncodeAudit(a)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x01, 0x03, 0, 0, 0}) // guards: an unknown phase
	f.Add([]byte{0x01, 0x01, 5, 'a'})  // guards: a cursor longer than the bytes left
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := DecodeAudit(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is not ErrMalformed", err)
			}
			return
		}
		if re, _ := EncodeAudit(a); !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %x", b)
		}
	})
}

// TestPrevRevMarksHole: a live commit whose previous rev (since) is newer
// than the archived rev follows a commit that never reached the archive:
// its account is marked for a replacement in the same batch. A since equal
// to the ratchet, or an account without one, marks nothing.
func TestPrevRevMarksHole(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	did := testDID
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: did, Func: func(RepoState, bool) (RepoState, bool) {
		return RepoState{Status: StatusComplete, Active: true}, true
	}}}})
	live := func(rev, since, rkey string) RepoState {
		t.Helper()
		ev := commitEv(did, rev, KindCreate, SourceLive, rkey)
		ev.Since = since
		r := apply(t, w, &Unit{Events: []Event{ev}})
		if r.Refused != nil || r.Kept != 1 {
			t.Fatalf("live commit %s: %+v", rev, r)
		}
		st, err := s.RepoState(did)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := live("3kaaaaaaaaaa2", "3jzzzzzzzzzz2", "a"); st.Refetch != RefetchNone {
		t.Fatalf("first commit (no ratchet yet) marked: %+v", st)
	}
	if st := live("3kbbbbbbbbbb2", "3kaaaaaaaaaa2", "b"); st.Refetch != RefetchNone {
		t.Fatalf("commit following the archived one marked: %+v", st)
	}
	st := live("3kdddddddddd2", "3kcccccccccc2", "d")
	if st.Refetch != RefetchSync || st.NextAttemptUS == 0 {
		t.Fatalf("commit after a missing one not marked: %+v", st)
	}
	// Marked already (its replacement may be running on a snapshot older
	// than this hole): due again from now, its reason kept.
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: did, Func: func(cur RepoState, _ bool) (RepoState, bool) {
		cur.Refetch, cur.NextAttemptUS = RefetchAudit, 1
		return cur, true
	}}}})
	if st := live("3kffffffffff2", "3keeeeeeeeee2", "f"); st.Refetch != RefetchAudit || st.NextAttemptUS <= 1 {
		t.Fatalf("a second hole while marked: %+v, want the mark due again", st)
	}
}

// TestUnknownAccountWithSinceIsDiscovered: a live commit of an account
// the archive does not know (no repo/, no rev/: no listing named it) whose
// since names an earlier commit proves a history the archive lacks: the
// account is created pending, discovered, due now, in the commit's batch,
// and its row kept. A first commit (no since) is an account's whole
// history from the start: nothing is created; nor by a writer that
// discovers nothing (DiscoverUnknown off: a run of a few repos).
func TestUnknownAccountWithSinceIsDiscovered(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	now := time.Unix(1_800_000_000, 0)
	w := newWriter(t, s, WriterOptions{Now: func() time.Time { return now }, DiscoverUnknown: true})
	defer w.Close()
	const known, fresh = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	for _, c := range []struct{ did, since string }{{known, "3kaaaaaaaaaa2"}, {fresh, ""}} {
		ev := commitEv(c.did, "3kbbbbbbbbbb2", KindCreate, SourceLive, "a")
		ev.Since = c.since
		if r := apply(t, w, &Unit{Events: []Event{ev}}); r.Refused != nil || r.Kept != 1 {
			t.Fatalf("live commit of %s: %+v", c.did, r)
		}
	}
	st, err := s.RepoState(known)
	want := RepoState{Status: StatusPending, Active: true, Refetch: RefetchDiscovered, NextAttemptUS: now.UnixMicro()}
	if err != nil || st != want {
		t.Fatalf("an unknown account whose commit has a since: %+v (%v), want %+v", st, err, want)
	}
	if st, err := s.RepoState(fresh); !errors.Is(err, ErrNotFound) {
		t.Fatalf("an unknown account's first commit created %+v (%v), want no repo", st, err)
	}
	// A writer that discovers nothing (a run restricted to a few repos).
	s2 := openMem(t, vfs.NewMem())
	defer s2.Close()
	w2 := newWriter(t, s2, WriterOptions{})
	defer w2.Close()
	ev := commitEv(known, "3kbbbbbbbbbb2", KindCreate, SourceLive, "a")
	ev.Since = "3kaaaaaaaaaa2"
	if r := apply(t, w2, &Unit{Events: []Event{ev}}); r.Kept != 1 {
		t.Fatalf("live commit: %+v", r)
	}
	if st, err := s2.RepoState(known); !errors.Is(err, ErrNotFound) {
		t.Fatalf("without DiscoverUnknown, an unknown account's commit created %+v (%v), want no repo", st, err)
	}
}

// TestSinceCheckedPerCommit: a merge unit holds many commits of many
// accounts; each commit's since is checked against its account's ratchet as
// it stands when that commit applies, once per commit (its first row). A
// chain of commits in one unit marks nothing (each since is the rev the
// previous commit just set, newer than the ratchet before the unit); a
// commit missing between two of them marks that account only.
func TestSinceCheckedPerCommit(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	const chained, holed = testDID, "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	// An empty snapshot stores no row, so it sets no ratchet: its rev is
	// the snapshot's.
	const empty, emptyHoled = "did:plc:cccccccccccccccccccccccc", "did:plc:dddddddddddddddddddddddd"
	for _, did := range []string{chained, holed, empty, emptyHoled} {
		var rows []Event
		if did == chained || did == holed {
			rows = append(rows, commitEv(did, "3kaaaaaaaaaa2", KindCreate, SourceBackfill, "s"))
		}
		apply(t, w, &Unit{Events: rows, Repos: []RepoUpdate{{DID: did, Func: func(RepoState, bool) (RepoState, bool) {
			return RepoState{Status: StatusComplete, Active: true, BackfillRev: "3kaaaaaaaaaa2"}, true
		}}}})
	}
	commit := func(did, rev, since string, rkeys ...string) []Event {
		var evs []Event
		for i, rk := range rkeys {
			ev := commitEv(did, rev, KindCreate, SourceMerge, rk)
			if i == 0 {
				ev.Since = since
			}
			evs = append(evs, ev)
		}
		return evs
	}
	var evs []Event
	evs = append(evs, commit(chained, "3kbbbbbbbbbb2", "3kaaaaaaaaaa2", "b")...)
	evs = append(evs, commit(holed, "3kbbbbbbbbbb2", "3kaaaaaaaaaa2", "b")...)
	evs = append(evs, commit(chained, "3kcccccccccc2", "3kbbbbbbbbbb2", "c1", "c2")...)
	evs = append(evs, commit(holed, "3kdddddddddd2", "3kcccccccccc2", "d")...) // 3kccc… never came
	evs = append(evs, commit(chained, "3kdddddddddd2", "3kcccccccccc2", "d")...)
	evs = append(evs, commit(empty, "3kbbbbbbbbbb2", "3kaaaaaaaaaa2", "b")...)
	evs = append(evs, commit(emptyHoled, "3kcccccccccc2", "3kbbbbbbbbbb2", "c")...) // 3kbbb… never came
	if r := apply(t, w, &Unit{Events: evs}); r.Kept != len(evs) {
		t.Fatalf("kept %d of %d rows", r.Kept, len(evs))
	}
	for _, did := range []string{chained, empty} {
		if st, _ := s.RepoState(did); st.Refetch != RefetchNone {
			t.Fatalf("%s: chained commits in one unit marked: %+v", did, st)
		}
	}
	for _, did := range []string{holed, emptyHoled} {
		if st, _ := s.RepoState(did); st.Refetch != RefetchSync || st.NextAttemptUS == 0 {
			t.Fatalf("%s: a commit missing inside a unit not marked: %+v", did, st)
		}
	}
}
