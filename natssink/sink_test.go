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

// TestSinkOutageNeverSlowsIngest: NATS unreachable (every node down) while
// the writer commits: ingest goes on between the sink's failed sessions,
// the sink shows its lag and state, and catches up without a gap or a
// duplicate once NATS is back. Decided on counts, not on a clock: while the
// sink fails `retries` more sessions the test commits at least `units`
// units, each durable, and commits begin and end inside every retried
// session (a writer waiting on the sink's sessions would complete none
// there); the position does not move and the lag is tip minus position.
func TestSinkOutageNeverSlowsIngest(t *testing.T) {
	nodes, retries, units := 3, 20, 2000
	if testing.Short() {
		nodes, retries, units = 1, 3, 200
	}
	c := natstest.Start(t, nodes)
	wd := newWorld(t)
	ctx := ctxT(t)
	rs := wd.startSink(t, Config{URLs: c.URLs(), Window: 512})
	for range 50 {
		if err := wd.commit(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	rs.waitCaughtUp(t, wd, 60*time.Second)
	stuck, e0 := rs.s.Status().Position, rs.s.Status().Errors
	for i := range nodes {
		c.Stop(i)
	}
	// within[k]: the commits that began and ended inside the sink's
	// session after k failures (state connecting throughout, no failure
	// in between).
	committed, within := 0, map[uint64]int{}
	for committed < units || rs.s.Status().Errors < e0+uint64(retries) {
		before := rs.s.Status()
		if err := wd.commit(ctx, 10); err != nil {
			t.Fatalf("commit %d while NATS is down: %v", committed, err)
		}
		committed++
		if after := rs.s.Status(); before.State == StateConnecting && after.State == StateConnecting && after.Errors == before.Errors {
			within[after.Errors-e0]++
		}
	}
	st := rs.s.Status()
	t.Logf("while NATS was down: %d units committed over %d failed sink sessions; inside the retried sessions: %v", committed, st.Errors-e0, within)
	for k := uint64(1); k < uint64(retries); k++ {
		if within[k] == 0 {
			t.Errorf("no commit completed inside the sink's session after %d failures: the writer waited for the sink", k)
		}
	}
	if st.Position != stuck || st.State == StatePublishing {
		t.Errorf("NATS down, yet the position moved from %d to %d (state %s)", stuck, st.Position, st.State)
	}
	tip := wd.w.Live().Tip()
	promtest.Eventually(t, 30*time.Second, "the lag is the tip minus the position", func() bool {
		return rs.s.Status().LagEvents == tip-stuck &&
			promtest.Value(t, rs.reg, "backstream_nats_lag_events", nil) == float64(tip-stuck)
	})
	for i := range nodes {
		c.Restart(i)
	}
	c.WaitJetStream()
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

// TestSinkPerSubjectLimitDiscardsOld: max_msgs_per_subject with discard
// new but without discard_new_per_subject removes a subject's oldest
// messages (it refuses nothing): the differences say it removes published
// events.
func TestSinkPerSubjectLimitDiscardsOld(t *testing.T) {
	c := natstest.Start(t, 1)
	js := jsConnect(t, c.URLs())
	createStream(t, js, jetstream.StreamConfig{Duplicates: DefaultDuplicateWindow, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew})
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	held := len(streamIDs(t, c.URLs()))
	diffs := strings.Join(rs.s.Status().ConfigDiffs, "; ")
	if held < 20 && !strings.Contains(diffs, "remove published events") {
		t.Errorf("the stream holds %d of the 20 events published (state %s), yet the differences say %q",
			held, rs.s.Status().State, diffs)
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
