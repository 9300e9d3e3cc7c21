package natssink

// Streams whose limits or retention remove published messages: the sink
// must neither take the removals for a purge nor refill such a stream
// from --nats-from once it is empty.

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkLimitAddedWhileRunning: the operator gives the sink's stream a
// limit that removes old messages (max_msgs, discard old) while the sink
// publishes into it. The stream's first sequence then moves past messages
// the sink stored, as a purge would move it; the sink must go on
// publishing, not stop and ask for a purge.
func TestSinkLimitAddedWhileRunning(t *testing.T) {
	c, wd, rs := caughtUp(t, 20, Config{})
	ctx := ctxT(t)
	js := jsConnect(t, c.URLs())
	stream, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgs = 5
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := wd.commit(ctx, 10); err != nil {
			t.Fatal(err)
		}
		rs.waitCaughtUp(t, wd, 30*time.Second)
	}
	if st := rs.s.Status(); st.Errors > 0 {
		t.Errorf("%d sink errors after a limit was added, last %q", st.Errors, st.LastError)
	}
	ids := streamIDs(t, c.URLs())
	tip := wd.w.Live().Tip()
	if len(ids) != 5 || ids[4] != strconv.FormatUint(tip, 10) {
		t.Errorf("the stream holds ids %v, want the last 5 up to %d", ids, tip)
	}
}

// TestSinkStreamEmptiedByMaxAge: a stream with max_age loses every
// message while the sink is stopped longer than that age (backstream
// down, or the sink stopped at an event too large). The stream is then
// empty, but it is not new: the sink resumes after its position, it does
// not publish the archive again from --nats-from.
func TestSinkStreamEmptiedByMaxAge(t *testing.T) {
	c := natstest.Start(t, 1)
	js := jsConnect(t, c.URLs())
	createStream(t, js, jetstream.StreamConfig{Duplicates: 500 * time.Millisecond, MaxAge: time.Second})
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	rs.stop() // it writes its position as it stops
	promtest.Eventually(t, 30*time.Second, "the stream's messages expire", func() bool {
		return len(streamIDs(t, c.URLs())) == 0
	})
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	rs = wd.startSink(t, Config{URLs: c.URLs()})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	published := promtest.Value(t, rs.reg, "backstream_nats_published_total", nil)
	ids := streamIDs(t, c.URLs())
	if published != 20 || len(ids) != 20 || ids[0] != "21" {
		t.Errorf("after the stream expired, the sink published %v events, the stream holds ids %v; want the 20 from 21", published, ids)
	}
}

// TestSinkInterestRetention: a stream with interest retention and no
// consumer keeps no message: each is removed once stored. The sink must
// publish every event once, not take the removals for a purge and fill
// the stream again from --nats-from, while it runs or once restarted; the
// differences say the retention removes published events.
func TestSinkInterestRetention(t *testing.T) {
	c := natstest.Start(t, 1)
	js := jsConnect(t, c.URLs())
	createStream(t, js, jetstream.StreamConfig{Duplicates: DefaultDuplicateWindow, Retention: jetstream.InterestPolicy})
	wd := newWorld(t)
	ctx := ctxT(t)
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.logStatusOnFailure(t)
	for range 10 {
		if err := wd.commit(ctx, 10); err != nil {
			t.Fatal(err)
		}
		rs.waitCaughtUp(t, wd, 30*time.Second)
	}
	st := rs.s.Status()
	published := promtest.Value(t, rs.reg, "backstream_nats_published_total", nil)
	if published != 100 || st.Errors > 0 {
		t.Errorf("published %v events for 100 archived, %d errors (last %q)", published, st.Errors, st.LastError)
	}
	if !containsAny(st.ConfigDiffs, "remove published events") {
		t.Errorf("config differences %q do not say the retention removes published events", st.ConfigDiffs)
	}
	// Restarted, the sink finds the stream empty: it goes on after its
	// position.
	rs.stop()
	if err := wd.commit(ctx, 10); err != nil {
		t.Fatal(err)
	}
	rs = wd.startSink(t, Config{URLs: c.URLs()})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	if published := promtest.Value(t, rs.reg, "backstream_nats_published_total", nil); published != 10 {
		t.Errorf("restarted over the empty stream, the sink published %v events, want the 10 new ones", published)
	}
}

// containsAny reports whether one of ss contains sub.
func containsAny(ss []string, sub string) bool {
	for _, s := range ss {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestSinkWritesItsPositionAsItStops: a sink stopped (not killed) writes
// its position on the way out, however long its PositionEvery: the
// position is what a stream emptied by its limits resumes after.
func TestSinkWritesItsPositionAsItStops(t *testing.T) {
	_, wd, rs := caughtUp(t, 20, Config{PositionEvery: time.Hour})
	if err := rs.stop(); err != nil {
		t.Fatal(err)
	}
	pos, err := wd.store.SinkCursor()
	if err != nil || pos != 20 {
		t.Fatalf("the stopped sink's stored position is %d (%v), want 20", pos, err)
	}
}

// TestSinkMaxAgeStreamPurgedRefills: a stream with max_age, purged while
// backstream is stopped, its last message younger than max_age, was
// emptied by the operator, not by its age: the sink fills it again from
// --nats-from.
func TestSinkMaxAgeStreamPurgedRefills(t *testing.T) {
	c := natstest.Start(t, 1)
	js := jsConnect(t, c.URLs())
	// A short duplicate window: the purged ids are refused until it passes.
	stream := createStream(t, js, jetstream.StreamConfig{Duplicates: 500 * time.Millisecond, MaxAge: time.Hour})
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	rs.stop()
	if err := stream.Purge(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	rs = wd.startSink(t, Config{URLs: c.URLs()})
	rs.logStatusOnFailure(t)
	promtest.Eventually(t, 30*time.Second, "the sink fills the purged stream again from --nats-from", func() bool {
		return rs.s.Status().State == StatePublishing && len(missing(t, c.URLs(), 20)) == 0
	})
}
