package natssink

// An emptied stream: purged while the sink runs, found empty by a
// session, or deleted and re-created. The sink fills it again from
// --nats-from, and its position (Status and the gauge) goes back with it.

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkPurgedWhileRunning: a stream purged while the sink runs (its
// last sequence survives the purge, so the sink's next publishes would be
// accepted behind it) is noticed. Either the sink notices before it
// publishes behind the purge, and fills the stream again from --nats-from
// at once; or it has, and it stops (resume errors) until the operator
// purges again. Either way the stream ends up holding every archived
// event once, in order.
func TestSinkPurgedWhileRunning(t *testing.T) {
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	// The server remembers the message ids of its duplicate window across
	// a purge, and refuses the purged events' publishes as duplicates
	// until the window has passed: a short one.
	rs := wd.startSink(t, Config{URLs: c.URLs(), DuplicateWindow: 500 * time.Millisecond})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	stream, err := jsConnect(t, c.URLs()).Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	tip := wd.w.Live().Tip()
	stopped := func() bool {
		return promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errResume}) >= 1
	}
	promtest.Eventually(t, 30*time.Second, "the sink fills the stream again, or stops", func() bool {
		st := rs.s.Status()
		return stopped() || st.State == StatePublishing && st.Position >= tip && len(missing(t, c.URLs(), tip)) == 0
	})
	if stopped() {
		t.Logf("stopped: %s", rs.s.Status().LastError)
		if err := stream.Purge(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rs.waitCaughtUp(t, wd, 30*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}

// TestSinkPositionGaugeAfterEmptiedStream: when a session finds the
// stream emptied, the position goes back to --nats-from, and
// backstream_nats_position with it, even while no publish is acknowledged
// (here NATS loses them all).
func TestSinkPositionGaugeAfterEmptiedStream(t *testing.T) {
	c := natstest.Start(t, 1)
	var drop atomic.Bool
	proxy := natstest.StartProxy(t, c.Addr(0), func(subject string) natstest.Action {
		if drop.Load() && strings.HasPrefix(subject, DefaultStream+".") {
			return natstest.Drop
		}
		return natstest.Forward
	}, nil)
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: proxy.URL, AckTimeout: 500 * time.Millisecond,
		Options: []nats.Option{nats.IgnoreDiscoveredServers()}})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	js := jsConnect(t, c.URLs())
	stream, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	drop.Store(true) // NATS loses the publishes from now on
	if err := wd.commit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 30*time.Second, "a session finds the stream empty: the position goes back to 0", func() bool {
		return rs.s.Status().Position == 0
	})
	st := rs.s.Status()
	gauge := promtest.Value(t, rs.reg, "backstream_nats_position", nil)
	lag := promtest.Value(t, rs.reg, "backstream_nats_lag_events", nil)
	if gauge != float64(st.Position) {
		t.Errorf("backstream_nats_position = %v while /status says %d (state %s, lag_events %v, stream holds %d messages)",
			gauge, st.Position, st.State, lag, len(streamIDs(t, c.URLs())))
	}
}

// TestSinkStreamRecreated: the operator deletes the stream while the sink
// publishes and creates it again with subjects that do not take the
// sink's. The sink shows why its publishes fail
// and how the stream differs; once the subjects are put right it fills the
// new stream from --nats-from, every event once, in order.
func TestSinkStreamRecreated(t *testing.T) {
	c, wd, rs := caughtUp(t, 20, Config{DuplicateWindow: 500 * time.Millisecond})
	ctx := ctxT(t)
	js := jsConnect(t, c.URLs())
	if err := js.DeleteStream(ctx, DefaultStream); err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: DefaultStream, Subjects: []string{"elsewhere.>"}, Duplicates: 500 * time.Millisecond}
	createStream(t, js, cfg)
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 30*time.Second, "the sink shows the new stream's subjects", func() bool {
		st := rs.s.Status()
		return st.State != StatePublishing && containsAny(st.ConfigDiffs, "do not include backstream.>") && st.LastError != ""
	})
	if st := rs.s.Status(); !strings.Contains(st.LastError, "no stream takes the subject") {
		t.Errorf("while the subjects are wrong, the last error %q does not say no stream takes the subject", st.LastError)
	}
	cfg.Subjects = []string{DefaultStream + ".>"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	rs.waitCaughtUp(t, wd, 30*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
	// A session that began before the fix and publishes after it sees the
	// fix at the watch's next look, not at a new session.
	promtest.Eventually(t, 10*time.Second, "the differences gone once the subjects were put right", func() bool {
		return !strings.Contains(strings.Join(rs.s.Status().ConfigDiffs, "; "), "subjects")
	})
}
