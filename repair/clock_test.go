package repair

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
)

// TestGapFoundByAClockAhead: the gap was found while the wall clock ran 6
// hours ahead; the clock has been put right since (an NTP step back, a VM
// restored), and the runner reads the gap after a restart. The stream then
// accepts a frame the relay stamped now: every frame the relay held when
// the gap was found came before it, so the pass runs at once instead of
// waiting (and /readyz with it) until the clock passes the gap's time; and
// the next scheduled audit comes an audit interval after that, not after
// the gap's time.
func TestGapFoundByAClockAhead(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	clock := newTestClock()
	now := clock.Now
	ahead := func() time.Time { return now().Add(6 * time.Hour) }
	apply(setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew})) // as listed
	r, src, live, _ := outdatedCursorPass(t, s, w, apply, ahead)
	live.now = now
	ids, err := archive.NewGapIDs(s)
	if err != nil {
		t.Fatal(err)
	}
	r.cfg.Now, r.cfg.AuditInterval, r.cfg.GapIDs = now, time.Hour, ids
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	clock.Add(time.Millisecond)
	live.accept(now().UnixMicro())
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if st := r.Status(); src.pages.Load() != 1 {
		t.Fatalf("a frame stamped after the gap was read: %d pages listed (status %+v), want the pass to run", src.pages.Load(), st)
	}
	if gs, _ := s.Gaps(); len(gs) != 1 || gs[0].Open() {
		t.Fatalf("gaps %+v: want the gap closed", gs)
	}
	clock.Add(61 * time.Minute)
	live.accept(now().UnixMicro())
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if gs, _ := s.Gaps(); len(gs) != 2 || gs[1].Kind != archive.GapAudit {
		t.Fatalf("61 min after the gap was read: gaps %+v, want a scheduled audit", gs)
	}
}

// TestFirstReadsOfGapsLetGo: the runner remembers when it first read a gap
// found while the clock ran ahead (foundAt) only while that gap can still
// be asked about: while it is open (its pass waits on it) or the newest
// (the next scheduled audit counts from it). A clock that keeps running
// ahead (a VM whose clock drifts and is stepped back again and again)
// finds such a gap on every outage; closed and followed by a newer one,
// each is let go, so the runner holds at most one whatever the months of
// gaps.
func TestFirstReadsOfGapsLetGo(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	clock := newTestClock()
	now := clock.Now
	ahead := func() time.Time { return now().Add(6 * time.Hour) }
	apply(setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew})) // as listed
	r, _, live, _ := outdatedCursorPass(t, s, w, apply, ahead)
	live.now = now
	r.cfg.Now = now
	const gaps = 20
	for id := uint64(1); id <= gaps; id++ {
		if id > 1 { // another outage found while the clock ran ahead
			kv, err := archive.GapPut(archive.Gap{ID: id, Kind: archive.GapOutdatedCursor, FromSeq: 4, ToSeq: 25, FirstSeenUS: ahead().UnixMicro()})
			if err != nil {
				t.Fatal(err)
			}
			apply(&archive.Unit{Puts: []archive.KV{kv}})
		}
		if err := r.step(ctx); err != nil { // reads the gap: waits for the stream
			t.Fatal(err)
		}
		clock.Add(time.Millisecond)
		live.accept(now().UnixMicro())
		if err := r.step(ctx); err != nil {
			t.Fatal(err)
		}
		if gs, _ := s.Gaps(); gs[len(gs)-1].ID != id || gs[len(gs)-1].Open() {
			t.Fatalf("gaps %+v: want gap %d closed", gs, id)
		}
		clock.Add(time.Minute)
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	held := len(r.read)
	r.mu.Unlock()
	if held > 1 {
		t.Fatalf("the runner remembers the first read of %d gaps after %d gaps found ahead of the clock were closed; want at most 1 (the newest)", held, gaps)
	}
}
