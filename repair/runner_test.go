package repair

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
)

// listing is a RepoSource serving one fixed listRepos page.
type listing struct {
	repos []upstream.RepoEntry
	pages atomic.Int64
}

func (l *listing) ListRepos(ctx context.Context, cursor string, limit int) (upstream.Page, error) {
	l.pages.Add(1)
	return upstream.Page{Repos: l.repos}, nil
}

func (l *listing) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	panic("the repair pass never fetches")
}

const (
	didNew      = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	didInactive = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	didSame     = "did:plc:cccccccccccccccccccccccc"
	revOld      = "3kaaaaaaaaaa2"
	revNew      = "3kbbbbbbbbbb2"
)

// TestScheduledAudit: with --audit-interval, a GapAudit gap is recorded
// once that long has passed since the last gap (here: since the runner
// started), and its pass compares the listing with the store: an unknown
// account with a rev is marked for a replacement, one listed inactive gets
// its account state and no mark, an unchanged one nothing. The gap closes
// only once the marked replacement has finished.
func TestScheduledAudit(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	set := func(did string, st archive.RepoState) { t.Helper(); apply(setRepo(did, st)) }
	set(didInactive, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld})
	set(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew})

	clock := newTestClock()
	ids := new(archive.GapIDs)
	ids.Next()
	src := &listing{repos: []upstream.RepoEntry{
		{DID: didNew, Rev: revNew, Active: true},
		{DID: didInactive, Rev: revNew, Active: false, Status: "deactivated"},
		{DID: didSame, Rev: revNew, Active: true},
	}}
	r, err := New(Config{Store: s, Writer: w, Source: src, GapIDs: ids, AuditInterval: time.Hour,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if gs, _ := s.Gaps(); len(gs) != 0 || src.pages.Load() != 0 {
		t.Fatalf("an audit before the interval: gaps %+v, %d pages", gs, src.pages.Load())
	}
	clock.Add(61 * time.Minute)
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	gs, err := s.Gaps()
	if err != nil || len(gs) != 1 || gs[0].Kind != archive.GapAudit || !gs[0].Open() {
		t.Fatalf("gaps %+v, %v: want one open audit gap", gs, err)
	}
	if st, err := s.RepoState(didNew); err != nil || st.Refetch != archive.RefetchAudit || !st.Active {
		t.Fatalf("unknown listed account: %+v, %v", st, err)
	}
	if st, _ := s.RepoState(didInactive); st.Active || st.AccountStatus != "deactivated" || st.Refetch != archive.RefetchNone {
		t.Fatalf("account listed inactive: %+v", st)
	}
	if st, _ := s.RepoState(didSame); st.Refetch != archive.RefetchNone {
		t.Fatalf("unchanged account marked: %+v", st)
	}
	if got := r.Status(); got.Outstanding != 1 || got.Phase != "done" {
		t.Fatalf("status %+v: want the pass done with 1 replacement outstanding", got)
	}
	set(didNew, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew}) // the retry runner's replacement
	if err := r.step(ctx); err != nil {
		t.Fatal(err)
	}
	if gs, _ := s.Gaps(); len(gs) != 1 || gs[0].Open() {
		t.Fatalf("gaps %+v: want the audit gap closed", gs)
	}
	if _, err := s.Audit(gs[0].ID); err == nil {
		t.Fatal("audit/ position left behind a closed gap")
	}
}

// newStore is an in-memory store and its writer (closed with the test) and
// a function applying a unit that fails the test unless it is durable.
func newStore(t testing.TB) (*archive.Store, *archive.Writer, func(*archive.Unit)) {
	t.Helper()
	return newStoreOn(t, vfs.NewMem())
}

// newStoreOn is newStore over fs.
func newStoreOn(t testing.TB, fs vfs.FS) (*archive.Store, *archive.Writer, func(*archive.Unit)) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: fs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return s, w, func(u *archive.Unit) {
		t.Helper()
		if r, err := w.Apply(context.Background(), u); err != nil || r.Refused != nil {
			t.Fatalf("apply: %v %v", err, r.Refused)
		}
	}
}

// setRepo is a unit setting did's repo/ row to st.
func setRepo(did string, st archive.RepoState) *archive.Unit {
	return &archive.Unit{Repos: []archive.RepoUpdate{{DID: did, Func: func(archive.RepoState, bool) (archive.RepoState, bool) { return st, true }}}}
}

// stream is a Stream whose last accepted frame and last event's upstream
// time the test sets, on the test's clock.
type stream struct {
	now        func() time.Time
	acceptedUS atomic.Int64 // when the last frame was accepted
	eventUS    atomic.Int64 // the upstream time of the last accepted event
}

func (s *stream) AcceptedSince(us int64) bool { return s.acceptedUS.Load() >= us }
func (s *stream) Behind() time.Duration {
	return s.now().Sub(time.UnixMicro(s.eventUS.Load()))
}

// accept is a frame accepted now, carrying an event the relay stamped at
// eventUS.
func (s *stream) accept(eventUS int64) {
	s.acceptedUS.Store(s.now().UnixMicro())
	s.eventUS.Store(eventUS)
}

// outdatedCursorPass records an outdated-cursor gap found now and returns
// a runner whose listing names didSame at revNew, its live stream (a
// Period of 1 s), and the gap's time.
func outdatedCursorPass(t *testing.T, s *archive.Store, w *archive.Writer, apply func(*archive.Unit), now func() time.Time) (*Runner, *listing, *stream, int64) {
	t.Helper()
	gapUS := now().UnixMicro()
	kv, err := archive.GapPut(archive.Gap{ID: 1, Kind: archive.GapOutdatedCursor, FromSeq: 4, ToSeq: 25, FirstSeenUS: gapUS})
	if err != nil {
		t.Fatal(err)
	}
	apply(&archive.Unit{Puts: []archive.KV{kv}})
	src := &listing{repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}}
	live := &stream{now: now}
	r, err := New(Config{Store: s, Writer: w, Source: src, Stream: live, Period: time.Second,
		Logger: slog.New(slog.DiscardHandler), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	return r, src, live, gapUS
}

// TestPassWaitsForReplay: after an outdated cursor the relay replays its
// retained backlog, events stamped before the gap was found. A pass that
// compared while the backlog streams in would mark every account whose
// replayed commit is not yet in the ratchet (a needless whole-repo fetch
// each), so it starts only once the stream has caught up past the gap: an
// event stamped after the gap was found, or no frame for a whole Period.
func TestPassWaitsForReplay(t *testing.T) {
	for _, tc := range []struct {
		name    string
		catchUp func(s *stream, clock *testClock, gapUS int64)
	}{
		{"an event stamped after the gap", func(s *stream, clock *testClock, gapUS int64) {
			clock.Add(time.Millisecond)
			s.accept(gapUS + 1)
		}},
		{"a quiet stream for a Period", func(s *stream, clock *testClock, gapUS int64) {
			clock.Add(time.Second + time.Microsecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, w, apply := newStore(t)
			ctx := context.Background()
			clock := newTestClock()
			now := clock.Now
			r, src, live, gapUS := outdatedCursorPass(t, s, w, apply, now)
			waiting := func(what string) {
				t.Helper()
				if err := r.step(ctx); err != nil {
					t.Fatal(err)
				}
				if st := r.Status(); src.pages.Load() != 0 || st.Phase != "waiting_for_stream" {
					t.Fatalf("%s: the pass listed %d pages (status %+v): want it waiting for the stream", what, src.pages.Load(), st)
				}
			}
			waiting("no frame accepted since the gap")
			// The first replayed frame carries the gap; the backlog's
			// events were stamped before it was found.
			for i := range 3 {
				clock.Add(100 * time.Millisecond)
				live.accept(gapUS - int64(10-i)*1000)
				waiting("the backlog streaming in")
			}
			apply(setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew})) // the replayed commit
			tc.catchUp(live, clock, gapUS)
			if err := r.step(ctx); err != nil {
				t.Fatal(err)
			}
			if src.pages.Load() != 1 {
				t.Fatalf("caught up: %d pages listed, want the pass to run", src.pages.Load())
			}
			if st, _ := s.RepoState(didSame); st.Refetch != archive.RefetchNone {
				t.Fatalf("the account whose commit was replayed is marked: %+v", st)
			}
			if gs, _ := s.Gaps(); len(gs) != 1 || gs[0].Open() {
				t.Fatalf("gaps %+v: want the gap closed (nothing to fetch)", gs)
			}
		})
	}
}

// TestPassWaitsForItsOwnUnit: the stream has accepted the relay's replayed
// commit of an account, but the writer has not made it durable yet (its
// write-ahead log write is held) when the pass may begin. The pass first
// waits until a unit of its own is durable: the writer applies units in
// order, so the commit is in the ratchet before any listed rev is compared
// with it, and the account is not marked for a needless whole-repo fetch.
// The test runs in a synctest bubble, so "the pass has listed nothing
// while the commit is held" is a fact about the runner once the bubble
// settles, not what a sleep happened to see.
func TestPassWaitsForItsOwnUnit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var held atomic.Bool
		release := make(chan struct{})
		fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
			if op == errorfs.OpFileWrite && strings.HasSuffix(path, ".log") && held.Load() {
				<-release // the write-ahead log's write of the replayed commit
			}
			return nil
		}))
		s, w, apply := newStoreOn(t, fs)
		var once sync.Once
		unhold := func() { once.Do(func() { held.Store(false); close(release) }) }
		var stepping bool
		stepped := make(chan struct{}) // closed when the pass's step returns
		t.Cleanup(func() {
			// Before the writer and the store close, should the test
			// fail while the write is held: let the step finish.
			unhold()
			if stepping {
				<-stepped
			}
		})
		ctx := context.Background()
		now := time.Now // the bubble's clock
		apply(setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld}))
		r, src, live, gapUS := outdatedCursorPass(t, s, w, apply, now)

		// The replayed commit, accepted and submitted; then an event the
		// relay stamped after the gap: the stream has caught up.
		held.Store(true)
		if err := w.Submit(ctx, setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revNew})); err != nil {
			t.Fatal(err)
		}
		live.accept(gapUS + 1)
		done := make(chan error, 1)
		stepping = true
		go func() { defer close(stepped); done <- r.step(ctx) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("the pass finished (%v) while the replayed commit is not durable", err)
		default:
		}
		if n := src.pages.Load(); n != 0 {
			t.Fatalf("the pass listed %d pages while the replayed commit is not durable: want it waiting for its own unit", n)
		}
		unhold()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if n := src.pages.Load(); n != 1 {
			t.Fatalf("%d pages listed, want the pass to run once the commit is durable", n)
		}
		if st, _ := s.RepoState(didSame); st.Refetch != archive.RefetchNone {
			t.Fatalf("the account whose replayed commit was in flight is marked: %+v", st)
		}
		if gs, _ := s.Gaps(); len(gs) != 1 || gs[0].Open() {
			t.Fatalf("gaps %+v: want the gap closed (nothing to fetch)", gs)
		}
	})
}

// TestPassBeginsUnderABreakingRelay: a relay that breaks its stream again
// and again (a seq skip every few hundred ms, for hours) extends the gap
// waiting for its pass (archive.GapIDs.Record), each time to the later
// hole's time, and every frame's event reaches us some hundreds of ms after
// the relay stamped it: no event is ever stamped after the latest hole, and
// the stream is never quiet, so a pass waiting to catch up past the latest
// hole would wait for as long as the relay breaks, /readyz 503 all along
// and nothing the first hole lost fetched. After it has waited
// waitExtended, the gap stops being extended (later holes make the next
// gap), so the stream catches up past its last hole and the pass runs.
func TestPassBeginsUnderABreakingRelay(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	clock := newTestClock()
	now := clock.Now
	apply(setRepo(didSame, archive.RepoState{Status: archive.StatusComplete, Active: true, BackfillRev: revOld}))
	ids, err := archive.NewGapIDs(s)
	if err != nil {
		t.Fatal(err)
	}
	src := &listing{repos: []upstream.RepoEntry{{DID: didSame, Rev: revNew, Active: true}}}
	live := &stream{now: now}
	r, err := New(Config{Store: s, Writer: w, Source: src, Stream: live, GapIDs: ids, Period: time.Second,
		Logger: slog.New(slog.DiscardHandler), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	seq := uint64(100)
	hole := func() { // a seq skip, in the unit of the frame after it, as the consumer records it
		t.Helper()
		seq += 2000
		if _, err := ids.Record(archive.Gap{Kind: archive.GapSeqSkip, FromSeq: seq - 2000, ToSeq: seq, FirstSeenUS: now().UnixMicro()}, func(g archive.Gap) error {
			kv, err := archive.GapPut(g)
			if err != nil {
				return err
			}
			apply(&archive.Unit{Puts: []archive.KV{kv}})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		live.accept(now().Add(-300 * time.Millisecond).UnixMicro()) // the frame's event, stamped 300 ms ago
	}
	const steps = 60 // a minute of Periods, twice waitExtended's
	for range steps {
		for range 4 { // a hole every 250 ms
			clock.Add(250 * time.Millisecond)
			hole()
		}
		if err := r.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	gs, err := s.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	if src.pages.Load() == 0 {
		t.Fatalf("the relay broke its stream every 250 ms for %d periods: no pass began (status %+v, gaps %+v); want the first gap's pass to run", steps, r.Status(), gs)
	}
	if len(gs) > 3 {
		t.Fatalf("%d gap rows after %d periods of holes: want at most 3 (one per pass, and the one waiting)", len(gs), steps)
	}
}

// TestLongReplayGapStillExtended: a pass waiting long for a relay
// replaying hours of backlog, with no later hole meanwhile, leaves its gap
// extendable: a hole found after the long wait extends it (one pass), it
// does not add a gap of its own.
func TestLongReplayGapStillExtended(t *testing.T) {
	s, w, apply := newStore(t)
	ctx := context.Background()
	clock := newTestClock()
	now := clock.Now
	ids, err := archive.NewGapIDs(s)
	if err != nil {
		t.Fatal(err)
	}
	live := &stream{now: now}
	r, err := New(Config{Store: s, Writer: w, Source: &listing{}, Stream: live, GapIDs: ids, Period: time.Second,
		Logger: slog.New(slog.DiscardHandler), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	record := func() archive.Gap {
		t.Helper()
		g, err := ids.Record(archive.Gap{Kind: archive.GapOutdatedCursor, FirstSeenUS: now().UnixMicro()}, func(g archive.Gap) error {
			kv, err := archive.GapPut(g)
			if err != nil {
				return err
			}
			apply(&archive.Unit{Puts: []archive.KV{kv}})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	first := record()
	gapUS := now().UnixMicro()
	for i := range 3 * waitExtended {
		clock.Add(time.Second)
		live.accept(gapUS - int64(3*waitExtended-i)*int64(time.Minute/time.Microsecond)) // the backlog, stamped before the gap
		if err := r.step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got := record(); got.ID != first.ID {
		t.Fatalf("a hole after %d periods of replay with no hole: gap %d, want gap %d extended", 3*waitExtended, got.ID, first.ID)
	}
}

// testClock is a clock a test sets: its Now starts at a fixed instant and
// moves only by Add.
type testClock struct{ ns atomic.Int64 }

func newTestClock() *testClock {
	c := &testClock{}
	c.ns.Store(time.Unix(1_800_000_000, 0).UnixNano())
	return c
}

func (c *testClock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

func (c *testClock) Add(d time.Duration) { c.ns.Add(int64(d)) }
