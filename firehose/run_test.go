package firehose

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
)

// identityFrames returns n #identity frames with seqs 1..n.
func identityFrames(t *testing.T, n int) []msg {
	t.Helper()
	w := buildWorld(t, 2)
	a := activeDIDs(w)[0]
	out := make([]msg, n)
	for i := range out {
		seq := int64(i + 1)
		out[i] = msg{seq: seq, data: encode(t, must(t)(w.SetHandle(a, fmt.Sprintf("h%d.test", seq))), seq)}
	}
	return out
}

// after returns the frames with seq > cursor (all when cursor is nil).
func after(frames []msg, cursor *int64) []msg {
	if cursor == nil {
		return frames
	}
	var out []msg
	for _, m := range frames {
		if m.seq > *cursor {
			out = append(out, m)
		}
	}
	return out
}

func cursorsString(cs []*int64) string {
	var b strings.Builder
	for i, c := range cs {
		if i > 0 {
			b.WriteByte(' ')
		}
		if c == nil {
			b.WriteString("nil")
		} else {
			fmt.Fprint(&b, *c)
		}
	}
	return b.String()
}

// checkOnce asserts the log holds exactly one row per seq 1..n, in order.
func checkOnce(t *testing.T, rows []archive.Event, n int) {
	t.Helper()
	if len(rows) != n {
		t.Fatalf("%d rows, want %d", len(rows), n)
	}
	for i, r := range rows {
		if r.UpstreamSeq != int64(i+1) {
			t.Fatalf("row %d has upstream seq %d", i, r.UpstreamSeq)
		}
	}
}

// TestRunResumesFromLastAccepted: every connection drops after 3 frames;
// each reconnect asks for the last accepted seq, even though the writer
// (lingering) has not made it durable yet, and nothing is lost or repeated
// (S1).
func TestRunResumesFromLastAccepted(t *testing.T) { bothPaths(t, testRunResumes) }

// bothPaths runs test inline (no verification) and again with the
// verification pipeline (#identity frames go through its verifiers): the
// consumer's semantics do not depend on it.
func bothPaths(t *testing.T, test func(t *testing.T, id *ident.Resolver, verifiers int)) {
	t.Run("inline", func(t *testing.T) { test(t, nil, 1) })
	t.Run("pipelined", func(t *testing.T) { test(t, offlineIdentity(t), 3) })
}

func testRunResumes(t *testing.T, id *ident.Resolver, verifiers int) {
	frames := identityFrames(t, 12)
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		rest := after(frames, cursor)
		if len(rest) == 0 {
			return session{hold: true}
		}
		return session{msgs: rest[:min(3, len(rest))]}
	})
	s := openStore(t)
	wr := newWriterOpts(t, s, archive.WriterOptions{Capture: true, Linger: 150 * time.Millisecond})
	c, m := newConsumer(t, Config{Relay: relay.url(), Writer: wr, Mode: ModeCapture, Identity: id, Verifiers: verifiers})
	r := startRun(t, c)
	waitDurable(t, c, 12)
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := cursorsString(relay.connCursors()); got != "nil 3 6 9 12" {
		t.Fatalf("connection cursors %q, want %q", got, "nil 3 6 9 12")
	}
	checkOnce(t, readLog(t, s, true), 12)
	if got := relayCursor(t, s); got != 12 {
		t.Fatalf("cursor/relay %d", got)
	}
	if n := counter(m.anomalies, AnomalyDuplicate); n != 0 {
		t.Fatalf("%d duplicates: a reconnect re-read accepted frames", n)
	}
	if n := testutil.ToFloat64(m.reconnects); n < 4 {
		t.Fatalf("reconnects_total = %v", n)
	}
	if got := testutil.ToFloat64(m.lastSeq); got != 12 {
		t.Fatalf("last_seq gauge %v", got)
	}
}

// TestRunStartCursor: a given cursor is the first connection's, frames at
// or below it are dropped, and Started is closed at once.
func TestRunStartCursor(t *testing.T) {
	frames := identityFrames(t, 8)
	sloppy := make([]msg, len(frames))
	for i, m := range frames {
		sloppy[i] = msg{data: m.data} // seq 0: sent whatever the cursor
	}
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		// A sloppy relay that replays everything, whatever the cursor.
		return session{msgs: sloppy, hold: true}
	})
	s := openStore(t)
	start := int64(5)
	c, m := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, true), Mode: ModeCapture, Cursor: &start})
	select {
	case <-c.Started():
	default:
		t.Fatal("Started not closed with a durable start cursor")
	}
	startRun(t, c)
	waitDurable(t, c, 8)
	if got := cursorsString(relay.connCursors()); got != "5" {
		t.Fatalf("connection cursors %q", got)
	}
	rows := readLog(t, s, true)
	if len(rows) != 3 || rows[0].UpstreamSeq != 6 || rows[2].UpstreamSeq != 8 {
		t.Fatalf("rows %+v", rows)
	}
	if n := counter(m.anomalies, AnomalyDuplicate); n != 5 {
		t.Fatalf("duplicates %d, want 5", n)
	}
}

// TestStartedWaitsForDurable: with no start cursor, Started closes only
// when the first frame's unit is durable, and the starting cursor is that
// frame's seq.
func TestStartedWaitsForDurable(t *testing.T) {
	frames := identityFrames(t, 1)
	release := make(chan struct{})
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		<-release
		return session{msgs: frames, hold: true}
	})
	s := openStore(t)
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, true), Mode: ModeCapture})
	startRun(t, c)
	select {
	case <-c.Started():
		t.Fatal("Started before any frame")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	select {
	case <-c.Started():
	case <-time.After(10 * time.Second):
		t.Fatal("Started not closed after the first frame")
	}
	if got := relayCursor(t, s); got != 1 {
		t.Fatalf("starting cursor %d", got)
	}
}

// TestRunUpstreamTrouble: refused dials, error frames, close frames, text
// messages and OutdatedCursor are counted and only reconnect (M2).
func TestRunUpstreamTrouble(t *testing.T) {
	frames := identityFrames(t, 4)
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		switch i {
		case 0:
			return session{status: 503}
		case 1:
			return session{msgs: []msg{{data: errorFrame(t, "FutureCursor", "ahead")}}, closeFrame: true}
		case 2:
			return session{msgs: []msg{{data: errorFrame(t, "ConsumerTooSlow", "slow")}}}
		case 3:
			return session{msgs: append([]msg{{data: []byte("hello"), text: true}}, frames[:2]...), closeFrame: true}
		case 4:
			return session{msgs: append([]msg{{data: infoFrame(t, "OutdatedCursor")}}, after(frames, cursor)...), hold: true}
		}
		return session{hold: true}
	})
	s := openStore(t)
	c, m := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, true), Mode: ModeCapture})
	r := startRun(t, c)
	waitDurable(t, c, 4)
	if err := r.wait(50 * time.Millisecond); err != errTimeout {
		t.Fatalf("Run returned %v on upstream trouble", err)
	}
	checkOnce(t, readLog(t, s, true), 4)
	if got := cursorsString(relay.connCursors()); got != "nil nil nil nil 2" {
		t.Fatalf("connection cursors %q", got)
	}
	for k, n := range map[string]int{AnomalyFutureCursor: 1, AnomalyConsumerTooSlow: 1, AnomalyUndecodable: 1, AnomalyOutdatedCursor: 1} {
		if got := counter(m.anomalies, k); got != n {
			t.Errorf("anomalies{%s} = %d, want %d", k, got, n)
		}
	}
	if got := testutil.ToFloat64(m.reconnects); got != 4 {
		t.Errorf("reconnects_total = %v, want 4", got)
	}
	if got := gaugeValue(m.outdated); got != 1 {
		t.Errorf("outdated_cursor gauge = %v", got)
	}
}

// TestRunIdleTimeout: a connection that sends nothing and answers no ping
// is dropped and redialed; one that answers pings stays up. The consumer
// pings every third of its idle timeout, so twelve pings answered on the
// second connection span four idle periods of the consumer's own clock.
func TestRunIdleTimeout(t *testing.T) {
	frames := identityFrames(t, 3)
	relay := newScriptRelay(t, func(i int, cursor *int64) session {
		if i == 0 {
			return session{msgs: frames[:2], hold: true, noPong: true}
		}
		return session{msgs: after(frames, cursor), hold: true}
	})
	s := openStore(t)
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, true), Mode: ModeCapture, IdleTimeout: 300 * time.Millisecond})
	startRun(t, c)
	waitDurable(t, c, 3)
	waitFor(t, 20*time.Second, "twelve pings answered on the second connection, or a third one", func() bool {
		return relay.pingsOn(1) >= 12 || relay.connections() > 2
	})
	if got := cursorsString(relay.connCursors()); got != "nil 2" {
		t.Fatalf("connection cursors %q, want %q", got, "nil 2")
	}
}

// TestRunWriterClosed: a writer that stops ends Run with its error, even
// while the relay is silent (M2).
func TestRunWriterClosed(t *testing.T) {
	relay := newScriptRelay(t, func(int, *int64) session { return session{hold: true} })
	s := openStore(t)
	wr := newWriter(t, s, true)
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: wr, Mode: ModeCapture})
	r := startRun(t, c)
	waitFor(t, 5*time.Second, "a connection", func() bool { return relay.connections() > 0 })
	wr.Close()
	err := r.wait(5 * time.Second)
	if !errors.Is(err, archive.ErrClosed) {
		t.Fatalf("Run returned %v, want archive.ErrClosed", err)
	}
}

// TestRunWriterFatal: a failed commit (WAL write error) stops the writer;
// Run returns the writer's error and nothing is reported durable.
func TestRunWriterFatal(t *testing.T) { bothPaths(t, testRunWriterFatal) }

func testRunWriterFatal(t *testing.T, id *ident.Resolver, verifiers int) {
	var armed atomic.Bool
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if armed.Load() && (op == errorfs.OpFileWrite || op == errorfs.OpFileSync) && strings.HasSuffix(path, ".log") {
			return errors.New("injected EIO")
		}
		return nil
	}))
	s := openStoreFS(t, fs)
	wr := newWriter(t, s, true)
	armed.Store(true)
	frames := identityFrames(t, 3)
	relay := newScriptRelay(t, func(_ int, cursor *int64) session { return session{msgs: after(frames, cursor), hold: true} })
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: wr, Mode: ModeCapture, Identity: id, Verifiers: verifiers})
	r := startRun(t, c)
	err := r.wait(10 * time.Second)
	if err == nil || err == errTimeout || !strings.Contains(err.Error(), "injected EIO") {
		t.Fatalf("Run returned %v, want the writer's fatal error", err)
	}
	if c.LastDurable() != 0 {
		t.Fatalf("last durable %d after a failed commit", c.LastDurable())
	}
	select {
	case <-c.Started():
		t.Fatal("Started closed though nothing is durable")
	default:
	}
}

// TestRunRefusedUnit: a live-mode consumer wired to the capture writer has
// its #account unit refused; Run stops with ErrUnitRefused instead of
// skipping the frame.
func TestRunRefusedUnit(t *testing.T) { bothPaths(t, testRunRefusedUnit) }

func testRunRefusedUnit(t *testing.T, id *ident.Resolver, verifiers int) {
	w := buildWorld(t, 2)
	a := activeDIDs(w)[0]
	frames := []msg{
		{seq: 1, data: encode(t, must(t)(w.SetHandle(a, "x.test")), 1)},
		{seq: 2, data: encode(t, must(t)(w.SetStatus(a, "deactivated")), 2)},
	}
	relay := newScriptRelay(t, func(_ int, cursor *int64) session { return session{msgs: after(frames, cursor), hold: true} })
	s := openStore(t)
	c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, s, true), Mode: ModeLive, Identity: id, Verifiers: verifiers})
	r := startRun(t, c)
	err := r.wait(10 * time.Second)
	if !errors.Is(err, ErrUnitRefused) {
		t.Fatalf("Run returned %v, want ErrUnitRefused", err)
	}
	if c.LastDurable() != 1 {
		t.Fatalf("last durable %d, want 1 (not past the refused unit)", c.LastDurable())
	}
	if err := c.Handle(context.Background(), frames[1].data); !errors.Is(err, ErrUnitRefused) {
		t.Fatalf("Handle after a refusal: %v", err)
	}
}

// TestRunOnce: a second concurrent Run is refused; Run returns nil on
// cancel, promptly, even while a dial is being retried.
func TestRunOnce(t *testing.T) {
	s := openStore(t)
	c, _ := newConsumer(t, Config{Relay: "ws://127.0.0.1:1", Writer: newWriter(t, s, true), Mode: ModeCapture})
	r := startRun(t, c)
	waitFor(t, 5*time.Second, "running", func() bool { return c.running.Load() })
	if err := c.Run(context.Background()); !errors.Is(err, ErrRunning) {
		t.Fatalf("second Run: %v", err)
	}
	start := time.Now()
	if err := r.stop(t); err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Run took %v to stop", d)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	s := openStore(t)
	wr := newWriter(t, s, true)
	neg := int64(-1)
	for name, cfg := range map[string]Config{
		"no relay":        {Writer: wr, Mode: ModeCapture},
		"no writer":       {Relay: "ws://x", Mode: ModeCapture},
		"no mode":         {Relay: "ws://x", Writer: wr},
		"negative cursor": {Relay: "ws://x", Writer: wr, Mode: ModeLive, Cursor: &neg},
		"negative idle":   {Relay: "ws://x", Writer: wr, Mode: ModeLive, IdleTimeout: -1},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestBackoff: the reconnect schedule follows BackoffMin and BackoffMax
// with the internal/backoff rule (±25 %, never above the cap); Reset starts
// over; draws at the cap differ.
func TestBackoff(t *testing.T) {
	wr := newWriter(t, openStore(t), true)
	c, err := New(Config{Relay: "ws://x", Writer: wr, Mode: ModeCapture, BackoffMin: 250 * time.Millisecond, BackoffMax: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := c.reconnects()
	nominal := 250 * time.Millisecond
	for i := 0; i < 20; i++ {
		d := b.Next()
		if lo, hi := nominal*3/4, min(nominal*5/4, 30*time.Second); d < lo || d > hi {
			t.Fatalf("attempt %d: %v outside [%v, %v]", i, d, lo, hi)
		}
		nominal = min(nominal*2, 30*time.Second)
	}
	b.Reset()
	if d := b.Next(); d > 250*time.Millisecond*5/4 {
		t.Fatalf("after reset: %v", d)
	}
	// Jitter: draws at the cap differ.
	c, err = New(Config{Relay: "ws://x", Writer: wr, Mode: ModeCapture, BackoffMin: 30 * time.Second, BackoffMax: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b = c.reconnects()
	seen := map[time.Duration]bool{}
	for i := 0; i < 10; i++ {
		seen[b.Next()] = true
	}
	if len(seen) < 5 {
		t.Fatalf("no jitter: %v", seen)
	}
}
