package firehose

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backstream/backstream/archive"
)

// seedCursor makes cursor/relay durable at seq, as a consumer that ran
// before would have left it.
func seedCursor(t *testing.T, w *archive.Writer, seq int64) {
	t.Helper()
	r, err := w.Apply(context.Background(), &archive.Unit{Cursor: archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: uint64(seq)}})
	if err != nil || r.Refused != nil {
		t.Fatalf("seed cursor: %v, %v", err, r.Refused)
	}
}

func gapsOf(t *testing.T, s *archive.Store) []archive.Gap {
	t.Helper()
	gs, err := s.Gaps()
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// TestFutureCursorResets: a relay rebuilt with a fresh sequence answers
// FutureCursor to our cursor. The consumer follows its live tip, records
// the gap in the unit of the first new frame (after the old cursor, before
// the new seq), and cursor/relay goes back to the new sequence, so the
// next reconnect resumes there instead of being refused forever.
func TestFutureCursorResets(t *testing.T) {
	frames := identityFrames(t, 8)
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		if cursor != nil && *cursor > 8 {
			return session{msgs: []msg{{data: errorFrame(t, "FutureCursor", "cursor in the future")}}, closeFrame: true}
		}
		if cursor == nil {
			return session{msgs: frames[:5]} // then drops: the next dial has a cursor
		}
		return session{msgs: after(frames, cursor), hold: true}
	})
	s := openStore(t)
	w := newWriter(t, s, false)
	seedCursor(t, w, 5000)
	start := int64(5000)
	c, m := newConsumer(t, Config{Relay: relay.url(), Writer: w, Mode: ModeLive, Cursor: &start, GapIDs: gapIDsFrom(t, 7)})
	startRun(t, c)
	waitFor(t, 10*time.Second, "durable seq 8 of the new sequence", func() bool { return c.LastDurable() == 8 })
	if got := cursorsString(relay.connCursors()); got != "5000 nil 5" {
		t.Fatalf("connection cursors %q, want 5000 nil 5", got)
	}
	if got := relayCursor(t, s); got != 8 {
		t.Fatalf("cursor/relay %d, want 8", got)
	}
	gs := gapsOf(t, s)
	if len(gs) != 1 || gs[0].ID != 7 || gs[0].Kind != archive.GapFutureCursor || gs[0].FromSeq != 5000 || gs[0].ToSeq != 1 || !gs[0].Open() {
		t.Fatalf("gaps %+v", gs)
	}
	if rows := readLog(t, s, false); len(rows) != 8 {
		t.Fatalf("%d rows, want the new sequence's 8", len(rows))
	}
	if n := testutil.ToFloat64(m.gaps.WithLabelValues("future_cursor")); n != 1 {
		t.Fatalf("gaps_total{future_cursor} = %v", n)
	}
}

// TestOutdatedCursorGapInCursorUnit: after #info OutdatedCursor the relay
// streams from its oldest event; the gap row rides in the same unit as the
// cursor move past it, so no batch has the cursor past a gap it does not
// record.
func TestOutdatedCursorGapInCursorUnit(t *testing.T) {
	frames := identityFrames(t, 60)
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		return session{msgs: append([]msg{{data: infoFrame(t, "OutdatedCursor")}}, frames[49:]...), hold: true}
	})
	s := openStore(t)
	w := newWriter(t, s, false)
	seedCursor(t, w, 10)
	start := int64(10)
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: w, Mode: ModeLive, Cursor: &start})
	var withGap []int64
	c.submit = func(ctx context.Context, u *archive.Unit) error {
		for _, kv := range u.Puts {
			if string(kv.Key) == string(archive.GapKey(1)) {
				withGap = append(withGap, int64(u.Cursor.Seq))
			}
		}
		return w.Submit(ctx, u)
	}
	startRun(t, c)
	waitDurable(t, c, 60)
	if fmt.Sprint(withGap) != "[50]" {
		t.Fatalf("units carrying gap/1 moved the cursor to %v, want [50]", withGap)
	}
	gs := gapsOf(t, s)
	if len(gs) != 1 || gs[0].Kind != archive.GapOutdatedCursor || gs[0].FromSeq != 10 || gs[0].ToSeq != 50 {
		t.Fatalf("gaps %+v", gs)
	}
}

// TestSeqSkipAndRegression: a skip above the threshold is a gap; frames
// that stay below the last accepted seq past the threshold are a relay
// that restarted its sequence unannounced: a gap, and cursor/relay follows
// the new sequence. A skip at the threshold and a short replay below the
// cursor are not gaps. (The skip's pass begins before the regression, else
// the regression would extend the skip's gap: TestSeqSkipsEveryFrameOneGap.)
func TestSeqSkipAndRegression(t *testing.T) {
	wd := buildWorld(t, 2)
	a := activeDIDs(wd)[0]
	s := openStore(t)
	w := newWriter(t, s, false)
	ids := gapIDsFrom(t, 1)
	c, _ := newConsumer(t, Config{Writer: w, Mode: ModeLive, GapThreshold: 3, GapIDs: ids})
	ctx := context.Background()
	n := 0
	feed := func(seqs ...int64) {
		t.Helper()
		for _, q := range seqs {
			n++
			if err := c.Handle(ctx, encode(t, must(t)(wd.SetHandle(a, fmt.Sprintf("h%d.test", n))), q)); err != nil {
				t.Fatal(err)
			}
		}
	}
	feed(1, 5, 6, 16)   // 1→5 skips 3: not a gap; 6→16 skips 9: a gap
	ids.Begin(1)        // its repair pass begins: the next hole is a gap of its own
	feed(2, 3, 4, 17)   // a short replay below the cursor, then on: duplicates
	feed(2, 3, 4, 5, 6) // below the cursor past the threshold: 5 starts a new sequence
	waitFor(t, 10*time.Second, "durable seq 6 of the new sequence", func() bool { return c.LastDurable() == 6 })
	gs := gapsOf(t, s)
	if len(gs) != 2 || gs[0].Kind != archive.GapSeqSkip || gs[0].FromSeq != 6 || gs[0].ToSeq != 16 ||
		gs[1].Kind != archive.GapSeqRegression || gs[1].FromSeq != 17 || gs[1].ToSeq != 5 {
		t.Fatalf("gaps %+v", gs)
	}
	if got := relayCursor(t, s); got != 6 {
		t.Fatalf("cursor/relay %d, want 6", got)
	}
}

// TestBehindGrowsWhileRefused: a relay refusing every cursor delivers
// nothing, and Behind grows from Run's start with the clock; a frame
// brings it back to its event's age.
func TestBehindGrowsWhileRefused(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		return session{msgs: []msg{{data: errorFrame(t, "FutureCursor", "no")}}, closeFrame: true}
	})
	s := openStore(t)
	start := int64(3)
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, false), Mode: ModeLive, Cursor: &start, Now: now})
	if c.Behind() != 0 {
		t.Fatal("behind before Run")
	}
	startRun(t, c)
	waitFor(t, 5*time.Second, "two refused connections", func() bool { return relay.connections() >= 2 })
	clock.Add(int64(10 * time.Minute))
	if b := c.Behind(); b != 10*time.Minute {
		t.Fatalf("behind %v, want 10m", b)
	}
}

// gapIDsFrom is an allocator whose next id is id.
func gapIDsFrom(t *testing.T, id uint64) *archive.GapIDs {
	t.Helper()
	g := new(archive.GapIDs)
	for g.Next() < id-1 {
	}
	return g
}

// TestBehindQuietRelay: a healthy relay with nothing to send answers pings
// on an otherwise silent connection: the archive is at its tip, so Behind
// stays near zero however long the silence lasts.
//
// The read deadline (IdleTimeout, 30 ms here to keep the test short) runs
// on the real clock: on a loaded machine a pong can miss it, and the
// consumer redials. A new connection's silence starts at its dial (the
// fake clock's now, already advanced), and the fake clock stands still:
// no pong on it could ever look idle. So the silence goes on, as it would
// in time: each answered ping that did not bring Behind back advances the
// clock again, until one does.
func TestBehindQuietRelay(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Unix(1_800_000_000, 0).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	relay := newScriptRelay(t, func(i int, cursor *int64) session { return session{hold: true} })
	s := openStore(t)
	start := int64(3)
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, false), Mode: ModeLive, Cursor: &start, Now: now,
		IdleTimeout: 30 * time.Millisecond})
	startRun(t, c)
	waitFor(t, 10*time.Second, "a ping answered", func() bool { return relay.pingsAnswered() > 0 })
	answered := relay.pingsAnswered()
	clock.Add(int64(10 * time.Minute)) // silence: the next pong finds the connection idle
	waitFor(t, 10*time.Second, "an idle pong", func() bool {
		if c.Behind() < time.Minute {
			return true
		}
		if n := relay.pingsAnswered(); n > answered { // answered without an idle pong: a redial since
			answered = n
			clock.Add(int64(10 * time.Minute))
		}
		return false
	})
}

// TestSeqRegressionMidConnection: a relay whose sequence starts over while
// the connection stays open (a proxy that fails over to another relay, a
// relay rebuilt behind it) sends frames below the last accepted seq; past
// the threshold that is the same unannounced restart as on a fresh
// connection: a gap, and cursor/relay follows the new sequence. Dropping
// them all as duplicates loses the new sequence's first events with no
// gap/ row, and the cursor moves on past them once the new sequence
// climbs above the old one. Here the new sequence begins with the very
// frames accepted under 1 to 5 (duplicates, in the window of accepted
// frames or below it), so only the count finds it: at 4, the fourth frame
// below the last accepted seq in a row.
func TestSeqRegressionMidConnection(t *testing.T) {
	old := identityFrames(t, 5)
	restarted := append(append([]msg(nil), old...), identityFrames(t, 20)[5:]...)
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		if i > 0 {
			return session{hold: true}
		}
		var msgs []msg
		for _, m := range append(append([]msg(nil), old...), restarted...) {
			msgs = append(msgs, msg{data: m.data}) // sent whatever the cursor
		}
		return session{msgs: msgs, hold: true}
	})
	s := openStore(t)
	w := newWriter(t, s, false)
	c, m := newConsumer(t, Config{Relay: relay.url(), Writer: w, Mode: ModeLive, GapThreshold: 3})
	startRun(t, c)
	waitDurable(t, c, 20)
	gs := gapsOf(t, s)
	if len(gs) != 1 || gs[0].Kind != archive.GapSeqRegression || gs[0].FromSeq != 5 || gs[0].ToSeq != 4 {
		t.Fatalf("gaps %+v, want one seq_regression from 5 to 4 (duplicates dropped: %d)", gs, counter(m.anomalies, AnomalyDuplicate))
	}
	if got := relayCursor(t, s); got != 20 {
		t.Fatalf("cursor/relay %d, want 20", got)
	}
	if n := testutil.ToFloat64(m.gaps.WithLabelValues("seq_regression")); n != 1 {
		t.Fatalf("gaps_total{seq_regression} = %v", n)
	}
}

// seqSkipFrames are n identity frames, each skipping 9 seqs (10, 20, ...).
func seqSkipFrames(t *testing.T, n int) []msg {
	wd := buildWorld(t, 2)
	a := activeDIDs(wd)[0]
	frames := make([]msg, n)
	for i := range frames {
		seq := int64(i+1) * 10
		frames[i] = msg{seq: seq, data: encode(t, must(t)(wd.SetHandle(a, fmt.Sprintf("h%d.test", i))), seq)}
	}
	return frames
}

// TestSeqSkipsEveryFrameOneGap: a relay skipping more seqs than the
// threshold before every frame breaks its stream on every frame. Each hole
// found before the repair pass of the gap recording the first one begins
// extends that gap, so the store holds one open gap row (one pass to run),
// not one per frame, and every hole is still counted.
func TestSeqSkipsEveryFrameOneGap(t *testing.T) {
	const n = 300
	frames := seqSkipFrames(t, n)
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		return session{msgs: after(frames, cursor), hold: true}
	})
	s := openStore(t)
	w := newWriter(t, s, false)
	seedCursor(t, w, 1)
	start := int64(1)
	c, m := newConsumer(t, Config{Relay: relay.url(), Writer: w, Mode: ModeLive, Cursor: &start, GapIDs: gapIDsFrom(t, 1), GapThreshold: 3})
	startRun(t, c)
	waitDurable(t, c, 10*n)
	gs := gapsOf(t, s)
	if len(gs) != 1 {
		t.Fatalf("%d gap rows after %d holes, want the first gap extended by every later one (1 row)", len(gs), n)
	}
	if g := gs[0]; g.Kind != archive.GapSeqSkip || g.FromSeq != 1 || g.ToSeq != 10*n || !g.Open() {
		t.Fatalf("gap %+v, want seq_skip from 1 to %d, open", g, 10*n)
	}
	if got := testutil.ToFloat64(m.gaps.WithLabelValues("seq_skip")); got != n {
		t.Fatalf("gaps_total{seq_skip} = %v, want every hole counted (%d)", got, n)
	}
}

// TestGapBegunIsNotExtended: once a gap's repair pass has begun
// (GapIDs.Begin) a later hole may not move it (the pass compares a listing
// taken after the holes it knows of): it opens one new gap, which the
// holes after it extend in turn.
func TestGapBegunIsNotExtended(t *testing.T) {
	const n = 50
	frames := seqSkipFrames(t, 2*n)
	released := make(chan struct{})
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		if i == 0 {
			return session{msgs: frames[:n]} // then drops
		}
		<-released // the next connection waits for the pass to begin
		return session{msgs: after(frames, cursor), hold: true}
	})
	defer func() {
		select {
		case <-released:
		default:
			close(released)
		}
	}()
	s := openStore(t)
	w := newWriter(t, s, false)
	seedCursor(t, w, 1)
	start := int64(1)
	ids := gapIDsFrom(t, 1)
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: w, Mode: ModeLive, Cursor: &start, GapIDs: ids, GapThreshold: 3})
	startRun(t, c)
	waitDurable(t, c, 10*n)
	gs := gapsOf(t, s)
	if len(gs) != 1 {
		t.Fatalf("gaps %+v, want 1", gs)
	}
	first := gs[0]
	ids.Begin(first.ID)
	close(released)
	waitDurable(t, c, 20*n)
	gs = gapsOf(t, s)
	if len(gs) != 2 || gs[0] != first || gs[1].FromSeq != 10*n || gs[1].ToSeq != 20*n {
		t.Fatalf("gaps %+v after the pass of %+v began, want it unchanged and one new gap from %d to %d", gs, first, 10*n, 20*n)
	}
}

// TestWaitingGapAdoptedAfterRestart: a gap whose repair pass has not begun
// (no audit/ row: the pass waits for the stream) is still extended by a
// hole found after a restart, as it is within a process: the restart
// costs no pass of its own. A gap whose pass began (its audit/ row
// durable) is not: the next hole makes a new gap.
func TestWaitingGapAdoptedAfterRestart(t *testing.T) {
	frames := seqSkipFrames(t, 3) // seqs 10, 20, 30: each a hole over the threshold of 3
	fs := vfs.NewMem()
	s := openStoreFS(t, fs)
	w := newWriter(t, s, false)
	seedCursor(t, w, 1)
	ctx := context.Background()
	// run is one process: the store's gap ids, a consumer from cursor/relay,
	// one frame; it stops with its store closed.
	run := func(f msg, before func(*archive.Writer)) {
		t.Helper()
		if before != nil {
			before(w)
		}
		ids, err := archive.NewGapIDs(s)
		if err != nil {
			t.Fatal(err)
		}
		start := relayCursor(t, s)
		c, _ := newConsumer(t, Config{Writer: w, Mode: ModeLive, Cursor: &start, GapIDs: ids, GapThreshold: 3})
		if err := c.Handle(ctx, f.data); err != nil {
			t.Fatal(err)
		}
		waitDurable(t, c, f.seq)
		w.Close()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = openStoreFS(t, fs)
		w = newWriter(t, s, false)
	}
	run(frames[0], nil)
	run(frames[1], nil)
	gs := gapsOf(t, s)
	if len(gs) != 1 || gs[0].ID != 1 || gs[0].Kind != archive.GapSeqSkip || gs[0].FromSeq != 1 || gs[0].ToSeq != 20 || !gs[0].Open() {
		t.Fatalf("gaps %+v after a hole in each of two runs, the first gap's pass not begun; want gap 1 from 1 extended to 20", gs)
	}
	run(frames[2], func(w *archive.Writer) { // gap 1's pass began: its position is durable
		kv, err := archive.AuditPut(1, archive.Audit{Phase: archive.AuditList})
		if err != nil {
			t.Fatal(err)
		}
		if r, err := w.Apply(ctx, &archive.Unit{Puts: []archive.KV{kv}}); err != nil || r.Refused != nil {
			t.Fatalf("audit/1: %v, %v", err, r.Refused)
		}
	})
	gs = gapsOf(t, s)
	if len(gs) != 2 || gs[0].ToSeq != 20 || gs[1].ID != 2 || gs[1].FromSeq != 20 || gs[1].ToSeq != 30 {
		t.Fatalf("gaps %+v after a hole in a run where gap 1's pass had begun; want gap 1 unchanged and gap 2 from 20 to 30", gs)
	}
}
