package natssink

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// streamLeader is the index of the node leading the stream.
func streamLeader(t testing.TB, urls, stream string) int {
	t.Helper()
	js := jsConnect(t, urls)
	st, err := js.Stream(ctxT(t), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctxT(t))
	if err != nil || info.Cluster == nil {
		t.Fatalf("stream info: %v", err)
	}
	var i int
	if _, err := fmtSscanf(info.Cluster.Leader, &i); err != nil {
		t.Fatalf("leader %q: %v", info.Cluster.Leader, err)
	}
	return i
}

// TestSinkR3ExactlyOnceAcrossFailures: history, then live traffic, into an
// R3 stream on a real three-node cluster; the stream's leader is killed
// mid-stream and restarted, and the sink itself is stopped dead twice
// (whatever it had in flight abandoned, as a SIGKILL would). At the end the
// stream, read back with a consumer, holds every archived event exactly
// once, in seq order, with the /subscribe JSON as body.
func TestSinkR3ExactlyOnceAcrossFailures(t *testing.T) {
	c := natstest.Start(t, 3)
	wd := newWorld(t)
	ctx := ctxT(t)
	for range 50 { // history before the sink starts
		if err := wd.commit(ctx, 40); err != nil {
			t.Fatal(err)
		}
	}
	tr := wd.traffic(5 * time.Millisecond)
	defer tr.stop()
	cfg := Config{URLs: c.URLs(), Window: 256}
	rs := wd.startSink(t, cfg)
	advance := func(what string, n uint64) {
		t.Helper()
		from := rs.s.Status().Position
		promtest.Eventually(t, 60*time.Second, what, func() bool { return rs.s.Status().Position >= from+n })
	}
	advance("the sink publishes the history", 2000)
	if got := promtest.Value(t, rs.reg, "backstream_nats_state", map[string]string{"state": StatePublishing}); got != 1 {
		t.Fatalf("state publishing = %v", got)
	}
	leader := streamLeader(t, c.URLs(), DefaultStream)
	c.Stop(leader)
	advance("the sink goes on with a new stream leader", 1000)
	c.Restart(leader)
	for range 2 {
		rs.stop()
		rs = wd.startSink(t, cfg)
		advance("the restarted sink publishes", 500)
	}
	tr.stop()
	rs.waitCaughtUp(t, wd, 60*time.Second)
	msgs := natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store))
	natstest.CheckStream(t, wd.store, msgs, subjectOf(DefaultStream))
	// The position is durable through the writer.
	promtest.Eventually(t, 10*time.Second, "the position is written", func() bool {
		v, err := wd.store.SinkCursor()
		return err == nil && v == wd.w.Live().Tip()
	})
	t.Logf("%d events in the stream; sink errors %v", len(msgs), rs.s.Status().LastError)
}

// TestSinkOutageNeverSlowsIngest: NATS unreachable (every node down) under
// live traffic: the writer commits at the same rate as before, the sink
// shows its lag and state, and catches up without a gap or a duplicate
// once NATS is back. The full outage is 60 s; -short uses 3 s.
func TestSinkOutageNeverSlowsIngest(t *testing.T) {
	// The machine is shared: -short's 2 s windows are noisy, so it only
	// catches ingest blocked or halved; the full run asks for 80 %.
	outage, nodes, floor := 60*time.Second, 3, 0.8
	if testing.Short() {
		outage, nodes, floor = 2*time.Second, 1, 0.5
	}
	c := natstest.Start(t, nodes)
	wd := newWorld(t)
	tr := wd.traffic(5 * time.Millisecond)
	defer tr.stop()
	rs := wd.startSink(t, Config{URLs: c.URLs(), Window: 512})
	promtest.Eventually(t, 30*time.Second, "the sink publishes", func() bool { return rs.s.Status().Position > 500 })
	before := time.Now()
	time.Sleep(outage) // a baseline as long as the outage
	down := time.Now()
	for i := range nodes {
		c.Stop(i)
	}
	promtest.Eventually(t, outage+10*time.Second, "the status shows the outage", func() bool {
		st := rs.s.Status()
		return st.LagEvents > 0 && st.Errors > 0 && st.State != StatePublishing
	})
	time.Sleep(time.Until(down.Add(outage)))
	up := time.Now()
	st := rs.s.Status()
	lagMetric := promtest.Value(t, rs.reg, "backstream_nats_lag_events", nil)
	for i := range nodes {
		c.Restart(i)
	}
	c.WaitJetStream()
	nBefore, _ := tr.units(before, down)
	nDuring, worst := tr.units(down, up)
	rateBefore := float64(nBefore) / down.Sub(before).Seconds()
	rateDuring := float64(nDuring) / up.Sub(down).Seconds()
	t.Logf("ingest: %.0f units/s before, %.0f during the outage (worst unit %v); lag at the end of the outage %v events, %.1f s",
		rateBefore, rateDuring, worst, lagMetric, st.LagSeconds)
	if rateDuring < floor*rateBefore || worst > time.Second {
		t.Errorf("ingest slowed while NATS was down: %.0f units/s before, %.0f during, worst unit %v", rateBefore, rateDuring, worst)
	}
	tr.stop()
	rs.waitCaughtUp(t, wd, 120*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}

// TestSinkResumesFromTheStream: the durable position lags the stream (a
// SIGKILL between the publish and the position's write) or is ahead of it;
// a new sink resumes after the stream's last message id either way.
func TestSinkResumesFromTheStream(t *testing.T) {
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 300); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	rs.stop()
	for _, pos := range []uint64{10, 100000} {
		v, _ := archive.EncodeSeqCursor(pos)
		if _, err := wd.w.Apply(ctx, &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorSinkNATS, Value: v}}}); err != nil {
			t.Fatal(err)
		}
		if err := wd.commit(ctx, 100); err != nil {
			t.Fatal(err)
		}
		rs = wd.startSink(t, Config{URLs: c.URLs()})
		rs.waitCaughtUp(t, wd, 30*time.Second)
		rs.stop()
	}
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}

// TestSinkFrom: an empty stream starts at --nats-from; the events before it
// are not published.
func TestSinkFrom(t *testing.T) {
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 100); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs(), From: 61})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	msgs := natstest.ReadStream(t, c.URLs(), DefaultStream, 40)
	if len(msgs) != 40 || msgs[0].Headers().Get(nats.MsgIdHdr) != "61" {
		t.Fatalf("got %d messages from id %s, want 40 from 61", len(msgs), msgs[0].Headers().Get(nats.MsgIdHdr))
	}
}

// TestSinkConfigDiffs: an existing stream is used as it is; how it differs
// from what the sink would create is logged, shown and counted.
func TestSinkConfigDiffs(t *testing.T) {
	c := natstest.Start(t, 1)
	js := jsConnect(t, c.URLs())
	if _, err := js.CreateStream(ctxT(t), jetstream.StreamConfig{Name: "bs", Subjects: []string{"bs.>"},
		Storage: jetstream.MemoryStorage, MaxMsgs: 1 << 20, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 10); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs(), Stream: "bs"})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	diffs := strings.Join(rs.s.Status().ConfigDiffs, "; ")
	for _, want := range []string{"storage Memory", "duplicate window 1m0s", "limits"} {
		if !strings.Contains(diffs, want) {
			t.Errorf("differences %q lack %q", diffs, want)
		}
	}
	if got := promtest.Value(t, rs.reg, "backstream_nats_stream_config_mismatch", nil); got != 1 {
		t.Errorf("mismatch metric %v", got)
	}
}

func TestSubject(t *testing.T) {
	for _, c := range []struct {
		ev   archive.Event
		want string
	}{
		{archive.Event{Kind: archive.KindCreate, Collection: "app.bsky.feed.post"}, "p.commit.app.bsky.feed.post"},
		{archive.Event{Kind: archive.KindDelete, Collection: "a..b"}, "p.commit"},
		{archive.Event{Kind: archive.KindUpdate, Collection: "a.*"}, "p.commit"},
		{archive.Event{Kind: archive.KindIdentity}, "p.identity"},
		{archive.Event{Kind: archive.KindAccount}, "p.account"},
		{archive.Event{Kind: archive.KindSync}, "p.sync"},
	} {
		if got := Subject("p", &c.ev); got != c.want {
			t.Errorf("%+v: %s, want %s", c.ev, got, c.want)
		}
	}
}

func subjectOf(prefix string) func(*archive.Event) string {
	return func(ev *archive.Event) string { return Subject(prefix, ev) }
}
