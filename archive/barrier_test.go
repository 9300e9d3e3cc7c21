package archive

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// barrierRig drives a barrier the way the writer does (admit, apply,
// release), without a store: applying a unit only records its token.
type barrierRig struct {
	t       *testing.T
	b       *barrier
	now     time.Time
	applied []any        // tokens, in the order the units were applied
	refused []any        // tokens of refused units
	invalid map[any]bool // tokens the writer's stage would refuse
}

var t0 = time.Unix(1_700_000_000, 0)

func newRig(t *testing.T, lim barrierLimits) *barrierRig {
	if lim.bytes == 0 {
		lim.bytes = 1 << 30
	}
	if lim.accountBytes == 0 {
		lim.accountBytes = 1 << 30
	}
	if lim.timeout == 0 {
		lim.timeout = time.Minute
	}
	return &barrierRig{t: t, b: newBarrier(lim), now: t0}
}

// offer is Writer.add.
func (r *barrierRig) offer(u *Unit) admission {
	a := r.b.admit(u, r.now)
	if !a.wait && r.apply(u) || len(a.ended) > 0 {
		r.b.release(r.apply)
	}
	return a
}

func (r *barrierRig) apply(u *Unit) bool {
	refused := r.b.refusal(u) != nil || r.invalid[u.Token]
	if refused {
		r.refused = append(r.refused, u.Token)
	} else {
		r.applied = append(r.applied, u.Token)
	}
	return r.b.applied(u, refused, r.now)
}

func (r *barrierRig) want(tokens ...any) {
	r.t.Helper()
	if !slices.Equal(r.applied, tokens) {
		r.t.Fatalf("applied %v, want %v", r.applied, tokens)
	}
}

// liveUnit is a live commit of did at a rev that grows with seq, with
// cursor/relay = seq.
func liveUnit(tok any, did string, seq uint64, a *Acks) *Unit {
	return &Unit{Token: tok, Acks: a, Events: []Event{commitEv(did, liveRev(seq), KindCreate, SourceLive, fmt.Sprint(tok))},
		Cursor: SeqCursor{Key: KeyCursorRelay, Seq: seq}}
}

func liveRev(seq uint64) string { return fmt.Sprintf("3l%010d", seq) }

// chunkUnit is one unit of a replacement of did by job.
func chunkUnit(tok any, did string, job *Acks, final bool) *Unit {
	return &Unit{Token: tok, Acks: job, Replace: &Replacement{DID: did, Rev: "05", Final: final},
		Events: []Event{commitEv(did, "05", KindCreate, SourceRetry, fmt.Sprint(tok))}}
}

var (
	accX = didN(1)
	accY = didN(2)
	accZ = didN(3)
)

// TestBarrierHoldsOnlyTheAccount: while a replacement of X is open, units
// touching X wait (whatever their producer) and every other unit goes at
// once, also the same producer's; the replacement's own units pass; the
// waiting units go in arrival order right after its final unit.
func TestBarrierHoldsOnlyTheAccount(t *testing.T) {
	r := newRig(t, barrierLimits{})
	job, live, other := NewAcks(), NewAcks(), NewAcks()
	r.offer(chunkUnit("c1", accX, job, false))
	if a := r.offer(liveUnit("L1", accX, 1, live)); !a.wait {
		t.Fatal("a live unit of the held account did not wait")
	}
	r.offer(liveUnit("L2", accY, 2, live))
	r.offer(&Unit{Token: "O1", Acks: other, Events: []Event{{Kind: KindIdentity, DID: accX, Source: SourceLive}}})
	r.offer(&Unit{Token: "O2", Acks: other, Events: []Event{{Kind: KindIdentity, DID: accZ, Source: SourceLive}}})
	r.offer(chunkUnit("c2", accX, job, false))
	r.want("c1", "L2", "O2", "c2")
	if r.b.units() != 2 {
		t.Fatalf("%d units waiting, want 2", r.b.units())
	}
	r.offer(chunkUnit("c3", accX, job, true))
	r.want("c1", "L2", "O2", "c2", "c3", "L1", "O1")
	if r.b.units() != 0 || len(r.b.holds) != 0 {
		t.Fatalf("after the final unit: %d waiting, %d holds", r.b.units(), len(r.b.holds))
	}
	// The account is free again.
	r.offer(liveUnit("L3", accX, 3, live))
	r.want("c1", "L2", "O2", "c2", "c3", "L1", "O1", "L3")
}

// TestBarrierPerAccountOrder: a unit touching a held account and another
// waits whole and makes its other account wait behind it; a second
// replacement of the account waits for the first, and the live units
// after it wait for the second.
func TestBarrierPerAccountOrder(t *testing.T) {
	r := newRig(t, barrierLimits{})
	jobA, jobB, live, merge := NewAcks(), NewAcks(), NewAcks(), NewAcks()
	r.offer(chunkUnit("a1", accX, jobA, false))
	both := &Unit{Token: "M", Acks: merge, Events: []Event{
		commitEv(accY, "09", KindCreate, SourceMerge, "m1"), commitEv(accX, "09", KindCreate, SourceMerge, "m2")}}
	r.offer(both)
	r.offer(liveUnit("Y", accY, 1, live)) // Y is not held, but M (touching Y) waits
	r.offer(liveUnit("Z", accZ, 2, live))
	r.offer(chunkUnit("b1", accX, jobB, false)) // another replacement of X
	r.offer(liveUnit("X", accX, 3, live))
	r.want("a1", "Z")
	r.offer(chunkUnit("a2", accX, jobA, true))
	// M and Y go; b1 opens B's hold, so X waits for B's final.
	r.want("a1", "Z", "a2", "M", "Y", "b1")
	r.offer(chunkUnit("b2", accX, jobB, true))
	r.want("a1", "Z", "a2", "M", "Y", "b1", "b2", "X")
}

// TestBarrierCursor: the position a seq cursor may take is the highest
// applied, never at or past the oldest waiting unit carrying it, and never
// backwards.
func TestBarrierCursor(t *testing.T) {
	r := newRig(t, barrierLimits{})
	job, live := NewAcks(), NewAcks()
	relay, _ := cursorIndex(KeyCursorRelay)
	merge, _ := cursorIndex(KeyCursorMerge)
	pos := func(want uint64, ok bool) {
		t.Helper()
		got, gotOK := r.b.cursorToWrite(relay)
		if gotOK != ok || (ok && got != want) {
			t.Fatalf("cursor %d %v, want %d %v", got, gotOK, want, ok)
		}
	}
	r.offer(liveUnit(9, accY, 9, live))
	pos(9, true)
	r.offer(chunkUnit("c1", accX, job, false))
	r.offer(liveUnit(10, accX, 10, live)) // waits
	r.offer(liveUnit(11, accY, 11, live))
	pos(0, false)                         // min(11, 10-1) = 9: already written
	r.offer(liveUnit(12, accX, 12, live)) // waits
	r.offer(liveUnit(13, accY, 13, live))
	pos(0, false)
	if _, ok := r.b.cursorToWrite(merge); ok {
		t.Fatal("cursor/merge moved without a merge unit")
	}
	r.offer(chunkUnit("c2", accX, job, true))
	pos(13, true)
	r.want(9, "c1", 11, 13, "c2", 10, 12)

	// A producer that goes backwards never moves the cursor back.
	r.offer(chunkUnit("c3", accX, job, false))
	r.offer(liveUnit(5, accX, 5, live)) // waits: oldest waiting 5
	r.offer(liveUnit(14, accY, 14, live))
	pos(0, false) // min(14, 4) < 13
	if r.b.written(relay) != 13 {
		t.Fatalf("written %d, want 13", r.b.written(relay))
	}
}

// TestBarrierCursorReset: a unit that resets cursor/relay (the relay
// restarted its sequence) while units carrying it wait behind a
// replacement is applied at once, and so are the units after it that touch
// no held account. The cursor is not written until every unit from before
// the reset and the resetting unit are applied: it stays below the oldest
// waiting one, in the old sequence, and then goes back into the new one.
// A resetting unit that waits itself keeps the cursor where it was too.
func TestBarrierCursorReset(t *testing.T) {
	r := newRig(t, barrierLimits{})
	job, live := NewAcks(), NewAcks()
	relay, _ := cursorIndex(KeyCursorRelay)
	pos := func(want uint64, ok bool) {
		t.Helper()
		got, gotOK := r.b.cursorToWrite(relay)
		if gotOK != ok || (ok && got != want) {
			t.Fatalf("cursor %d %v, want %d %v", got, gotOK, want, ok)
		}
	}
	reset := func(u *Unit) *Unit { u.Cursor.Reset = true; return u }
	r.offer(liveUnit(9, accY, 9, live))
	pos(9, true)
	r.offer(chunkUnit("c1", accX, job, false))
	r.offer(liveUnit(10, accX, 10, live)) // waits
	r.offer(liveUnit(11, accY, 11, live))
	pos(0, false) // min(11, 10-1): written already
	if a := r.offer(reset(liveUnit("R1", accY, 1, live))); a.wait {
		t.Fatal("the resetting unit of a free account waited")
	}
	r.offer(liveUnit("n2", accY, 2, live))
	r.offer(liveUnit("n3", accX, 3, live)) // waits, in the new sequence
	r.want(9, "c1", 11, "R1", "n2")
	pos(0, false) // seq 10 of the old sequence waits
	if r.b.written(relay) != 9 {
		t.Fatalf("written %d while seq 10 waits, want 9", r.b.written(relay))
	}
	r.offer(chunkUnit("c2", accX, job, true))
	r.want(9, "c1", 11, "R1", "n2", "c2", 10, "n3")
	pos(3, true) // back into the new sequence, once
	r.offer(liveUnit("n4", accY, 4, live))
	pos(4, true)

	// The resetting unit touches a held account: it waits, and nothing is
	// written until it is applied (it carries the gap), though no unit of
	// the earlier sequence waits.
	r.offer(chunkUnit("c3", accX, job, false))
	r.offer(reset(liveUnit("R2", accX, 1, live)))
	r.offer(liveUnit("m2", accY, 2, live))
	r.offer(liveUnit("m3", accY, 3, live))
	pos(0, false)
	if r.b.written(relay) != 4 {
		t.Fatalf("written %d while the resetting unit waits, want 4", r.b.written(relay))
	}
	r.offer(chunkUnit("c4", accX, job, true))
	r.want(9, "c1", 11, "R1", "n2", "c2", 10, "n3", "n4", "c3", "m2", "m3", "c4", "R2")
	pos(3, true)
}

// TestBarrierOverflow: a unit that would wait past the per-account cap
// loses its rows of the held account, goes at once, and carries a mark of
// the account for another replacement; the replacement's final unit gets
// the mark too (after its own updates). Past the total cap the same holds
// for any account. Replacement units are never dropped.
func TestBarrierOverflow(t *testing.T) {
	one := eventBytes(&liveUnit("x", accX, 1, nil).Events[0])
	r := newRig(t, barrierLimits{accountBytes: one + one/2, bytes: 4 * (one + unitOverhead)})
	job, jobZ, live := NewAcks(), NewAcks(), NewAcks()
	r.offer(chunkUnit("c1", accX, job, false))
	r.offer(liveUnit(1, accX, 1, live)) // waits
	u := liveUnit(2, accX, 2, live)
	a := r.offer(u)
	if a.wait || a.dropped != 1 || !slices.Equal(a.marked, []string{accX}) {
		t.Fatalf("overflowing unit: %+v", a)
	}
	if len(u.Events) != 0 || len(u.Repos) != 1 || u.Repos[0].DID != accX {
		t.Fatalf("overflowing unit after the drop: %d rows, repos %+v", len(u.Events), u.Repos)
	}
	checkMark(t, u.Repos[0], r.now)
	r.want("c1", 2)
	// Replacement units wait whatever the caps.
	r.offer(chunkUnit("b1", accX, NewAcks(), false))
	r.offer(chunkUnit("b2", accX, NewAcks(), false))
	if r.b.units() != 3 {
		t.Fatalf("%d units waiting, want 3", r.b.units())
	}
	final := chunkUnit("c2", accX, job, true)
	terminal := RepoUpdate{DID: accX, Fields: FieldRefetch}
	final.Repos = []RepoUpdate{terminal}
	r.offer(final)
	if len(final.Repos) != 2 || final.Repos[0].Fields != FieldRefetch {
		t.Fatalf("final unit repos %+v, want its own update then the mark", final.Repos)
	}
	checkMark(t, final.Repos[1], r.now)

	// The total cap: Z is held too; X's waiting units fill the total.
	r = newRig(t, barrierLimits{bytes: 2*(one+unitOverhead) + 1})
	r.offer(chunkUnit("x1", accX, job, false))
	r.offer(chunkUnit("z1", accZ, jobZ, false))
	r.offer(liveUnit(1, accX, 1, live))
	r.offer(liveUnit(2, accX, 2, live))
	z := liveUnit(3, accZ, 3, live)
	if a := r.offer(z); a.wait || a.dropped != 1 || !slices.Equal(a.marked, []string{accZ}) {
		t.Fatalf("unit past the total cap: %+v", a)
	}
	if !r.b.holds[accZ].dropped || r.b.holds[accX].dropped {
		t.Fatal("the dropped mark is on the wrong hold")
	}
}

// TestBarrierOverflowEndsHoldsForAccountRows: a unit past a cap that
// carries an account or identity row of an account it waits for is not
// dropped (no replacement brings such a row back): it ends the holds it
// waits for, also through a unit waiting with it for another account's
// replacement, and goes right after the units waiting before it; the
// ended replacement's later units are refused.
func TestBarrierOverflowEndsHoldsForAccountRows(t *testing.T) {
	one := eventBytes(&liveUnit("x", accY, 1, nil).Events[0])
	r := newRig(t, barrierLimits{accountBytes: one + one/2})
	job, live := NewAcks(), NewAcks()
	r.offer(chunkUnit("c1", accX, job, false))
	// A unit of X and Y (a merge's, a repair page's) waits for X's hold,
	// and Y's live units wait behind it.
	both := liveUnit("XY", accX, 1, live)
	both.Events = append(both.Events, commitEv(accY, liveRev(1), KindCreate, SourceLive, "y"))
	r.offer(both)
	acct := &Unit{Token: "Yacct", Acks: live, Events: []Event{{Kind: KindAccount, DID: accY, Source: SourceLive, Status: "takendown"}},
		Cursor: SeqCursor{Key: KeyCursorRelay, Seq: 2}}
	a := r.offer(acct)
	if a.dropped != 0 || len(acct.Events) != 1 || !slices.Equal(a.ended, []string{accX}) {
		t.Fatalf("account row past the cap: %+v, %d rows left; want X's hold ended, nothing dropped", a, len(acct.Events))
	}
	r.want("c1", "XY", "Yacct")
	if r.b.units() != 0 || len(r.b.holds) != 0 {
		t.Fatalf("%d units waiting, %d holds", r.b.units(), len(r.b.holds))
	}
	r.offer(chunkUnit("c2", accX, job, false))
	r.offer(chunkUnit("c3", accX, job, true))
	if !slices.Equal(r.refused, []any{"c2", "c3"}) || len(r.b.ended) != 0 {
		t.Fatalf("refused %v, %d ended remembered; want the ended replacement's later units refused, then forgotten", r.refused, len(r.b.ended))
	}
}

func checkMark(t *testing.T, up RepoUpdate, now time.Time) {
	t.Helper()
	if up.Func == nil {
		t.Fatalf("mark %+v has no func", up)
	}
	cur := RepoState{Status: StatusComplete, Active: true, BackfillRev: "05"}
	next, write := up.Func(cur, true)
	if !write || next.Refetch != RefetchSync || next.NextAttemptUS != now.UnixMicro() || next.Status != StatusComplete {
		t.Fatalf("mark of a complete repo: %+v %v", next, write)
	}
	if _, write := up.Func(RepoState{}, false); write {
		t.Fatal("the mark created an unknown repo")
	}
	cur.Refetch = RefetchReactivated
	if next, _ := up.Func(cur, true); next.Refetch != RefetchReactivated {
		t.Fatalf("the mark replaced the reason %v", cur.Refetch)
	}
}

// TestBarrierExpiry: each unit of the replacement moves its deadline; at
// the deadline the hold closes, the waiting units go in arrival order, and
// the replacement's later units are refused with ErrHoldExpired (which is
// also a stale replacement).
func TestBarrierExpiry(t *testing.T) {
	r := newRig(t, barrierLimits{timeout: time.Minute})
	job, live := NewAcks(), NewAcks()
	if _, ok := r.b.deadline(); ok {
		t.Fatal("a deadline with no hold")
	}
	r.offer(chunkUnit("c1", accX, job, false))
	r.now = t0.Add(30 * time.Second)
	r.offer(chunkUnit("c2", accX, job, false))
	if d, ok := r.b.deadline(); !ok || !d.Equal(t0.Add(90*time.Second)) {
		t.Fatalf("deadline %v %v, want the last unit + 1 min", d, ok)
	}
	r.offer(liveUnit(1, accX, 1, live))
	r.offer(liveUnit(2, accX, 2, live))
	if got := r.b.expire(t0.Add(89 * time.Second)); len(got) != 0 {
		t.Fatalf("expired early: %v", got)
	}
	if got := r.b.expire(t0.Add(90 * time.Second)); !slices.Equal(got, []string{accX}) {
		t.Fatalf("expired %v", got)
	}
	r.b.release(r.apply)
	r.want("c1", "c2", 1, 2)
	c3 := chunkUnit("c3", accX, job, false)
	if err := r.b.refusal(c3); !errors.Is(err, ErrHoldExpired) || !errors.Is(err, ErrStaleReplacement) {
		t.Fatalf("refusal of a later unit: %v", err)
	}
	r.offer(c3)
	r.offer(liveUnit(3, accX, 3, live)) // no hold: goes at once
	r.offer(chunkUnit("c4", accX, job, true))
	r.want("c1", "c2", 1, 2, 3)
	if !slices.Equal(r.refused, []any{"c3", "c4"}) {
		t.Fatalf("refused %v", r.refused)
	}
	if len(r.b.ended) != 0 {
		t.Fatal("the expired replacement is still remembered after its final unit")
	}
	if _, ok := r.b.deadline(); ok {
		t.Fatal("a deadline after the expiry")
	}
}

// TestBarrierRefusedUnitEndsReplacement: a unit refused in the middle of a
// replacement closes its hold (the waiting units go) and its later units
// are refused, so it cannot resume over the rows released meanwhile.
func TestBarrierRefusedUnitEndsReplacement(t *testing.T) {
	r := newRig(t, barrierLimits{})
	r.invalid = map[any]bool{"c2": true}
	job, live := NewAcks(), NewAcks()
	r.offer(chunkUnit("c1", accX, job, false))
	r.offer(liveUnit(1, accX, 1, live))
	r.offer(chunkUnit("c2", accX, job, false))
	r.want("c1", 1)
	c3 := chunkUnit("c3", accX, job, false)
	if err := r.b.refusal(c3); !errors.Is(err, errInvalidUnit) {
		t.Fatalf("refusal of a later unit: %v", err)
	}
	r.offer(c3)
	r.offer(chunkUnit("c4", accX, job, true))
	r.offer(liveUnit(2, accX, 2, live))
	r.want("c1", 1, 2)
	if !slices.Equal(r.refused, []any{"c2", "c3", "c4"}) || len(r.b.holds) != 0 || len(r.b.ended) != 0 {
		t.Fatalf("refused %v, %d holds, %d ended", r.refused, len(r.b.holds), len(r.b.ended))
	}
}
