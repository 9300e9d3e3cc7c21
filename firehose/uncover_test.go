package firehose

import (
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
)

// TestUncoverRecordsTheHole: capture without a position, told that
// downloads begin (Uncover). A connection open at that moment covers them
// while it lasts: stopped, it leaves no gap and owes none. Once it drops,
// the time until the next connection is a hole: the first frame accepted
// records one no_cursor gap from 0 to it (however many dials failed
// before). Uncovered while no connection is open and stopped before any
// frame, the consumer records nothing and owes the gap (Owing) to whoever
// follows the relay next.
func TestUncoverRecordsTheHole(t *testing.T) {
	gaps := func(t *testing.T, s *archive.Store) []archive.Gap {
		t.Helper()
		gs, err := s.Gaps()
		if err != nil {
			t.Fatal(err)
		}
		return gs
	}
	connected := func(c *Consumer) func() bool { return func() bool { return c.m.Link().Connected } }

	t.Run("covered to the end", func(t *testing.T) {
		relay := newScriptRelay(t, func(int, *int64) session { return session{hold: true} })
		s := openStore(t)
		c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, true), Mode: ModeCapture})
		r := startRun(t, c)
		waitFor(t, 10*time.Second, "the connection", connected(c))
		c.Uncover()
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if gs := gaps(t, s); len(gs) != 0 || c.Owing() {
			t.Fatalf("gaps %+v, owing %v after a connection open from before Uncover to the stop; want none", gs, c.Owing())
		}
	})

	t.Run("dropped, then back", func(t *testing.T) {
		frames := identityFrames(t, 3)
		release := make(chan struct{})
		relay := newScriptRelay(t, func(i int, _ *int64) session {
			switch {
			case i == 0:
				return session{hold: true, noPong: true} // dropped by the idle timeout
			case i < 4:
				return session{status: 503}
			}
			<-release
			return session{msgs: frames, hold: true}
		})
		s := openStore(t)
		c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, true), Mode: ModeCapture, IdleTimeout: time.Second})
		r := startRun(t, c)
		waitFor(t, 10*time.Second, "the connection", connected(c))
		c.Uncover()
		waitFor(t, 10*time.Second, "the refused redials", func() bool { return relay.connections() >= 4 })
		if gs := gaps(t, s); len(gs) != 0 {
			t.Fatalf("gaps %+v before any frame, want none yet (the first frame's unit records it)", gs)
		}
		close(release)
		waitDurable(t, c, 3)
		gs := gaps(t, s)
		if len(gs) != 1 || gs[0].Kind != archive.GapNoCursor || gs[0].FromSeq != 0 || gs[0].ToSeq != 1 {
			t.Fatalf("gaps %+v after a drop, 3 refused dials and 3 frames; want one no_cursor gap from 0 to 1", gs)
		}
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if c.Owing() {
			t.Fatal("owing after the gap was recorded")
		}
	})

	t.Run("owed", func(t *testing.T) {
		relay := newScriptRelay(t, func(int, *int64) session { return session{status: 503} })
		s := openStore(t)
		c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, true), Mode: ModeCapture, BackoffMin: time.Hour})
		r := startRun(t, c)
		waitFor(t, 10*time.Second, "the refused dial", func() bool { return relay.connections() == 1 })
		c.Uncover()
		if err := r.stop(t); err != nil {
			t.Fatal(err)
		}
		if gs := gaps(t, s); len(gs) != 0 || !c.Owing() {
			t.Fatalf("gaps %+v, owing %v after Uncover with no connection and no dial since; want none, owing", gs, c.Owing())
		}
	})
}
