package natssink

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// logBuffer is a slog text handler's output, safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// errors counts the ERROR lines logged.
func (l *logBuffer) errors() int { return l.count("level=ERROR") }

// count counts the lines logged that hold s.
func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// bigPost is a create of a post whose text makes its JSON over n bytes.
func bigPost(t testing.TB, did string, n int) archive.Event {
	t.Helper()
	text := strings.Repeat("x", n)
	rec := []byte{0xa2, 0x65}
	rec = append(rec, "$type"...)
	rec = append(rec, 0x72)
	rec = append(rec, "app.bsky.feed.post"...)
	rec = append(rec, 0x64)
	rec = append(rec, "text"...)
	rec = append(rec, 0x79, byte(len(text)>>8), byte(len(text)))
	rec = append(rec, text...)
	h, err := multihash.Sum(rec, multihash.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	return archive.Event{Kind: archive.KindCreate, DID: did, Collection: "app.bsky.feed.post", RKey: "3kbig000000000",
		Rev: "3l99999999999", CID: cid.NewCidV1(cid.DagCBOR, h).Bytes(), Record: rec, Source: archive.SourceLive}
}

// TestSinkStopsAtTooLargeEvent: an event larger than the servers'
// max_payload can never be published as it is. The sink publishes up to
// it, stops there (never skipping it) in state too_large, names the
// event's seq and size in Status, a metric and one ERROR line however many
// rechecks follow, and goes on without a gap once the operator raises
// max_payload.
func TestSinkStopsAtTooLargeEvent(t *testing.T) {
	const maxPayload = 4 << 10
	c := natstest.Start(t, 1)
	c.SetMaxPayload(maxPayload)
	wd, big, rs, logs := startAtBigEvent(t, c, maxPayload)
	var last Status
	defer func() {
		if t.Failed() {
			t.Logf("last status: %+v", last)
		}
	}()
	promtest.Eventually(t, 60*time.Second, fmt.Sprintf("the sink stopped at seq %d, rechecked 3 times", big), func() bool {
		st := rs.s.Status()
		last = st
		return st.State == StateTooLarge && st.Position == big-1 && st.Errors >= 3 &&
			promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errTooLarge}) >= 3
	})
	st := rs.s.Status()
	if tl := st.TooLarge; tl == nil || tl.Seq != big || tl.Bytes <= maxPayload || tl.MaxPayload != maxPayload {
		t.Fatalf("status too_large %+v, want seq %d over %d bytes", tl, big, maxPayload)
	}
	if !strings.Contains(st.LastError, "max_payload") || !strings.Contains(st.LastError, fmt.Sprint(big)) {
		t.Errorf("last error %q does not name max_payload and seq %d", st.LastError, big)
	}
	if got := promtest.Value(t, rs.reg, "backstream_nats_too_large_seq", nil); got != float64(big) {
		t.Errorf("backstream_nats_too_large_seq = %v, want %d", got, big)
	}
	if got := promtest.Value(t, rs.reg, "backstream_nats_state", map[string]string{"state": StateTooLarge}); got != 1 {
		t.Errorf("state too_large = %v", got)
	}
	if n := logs.errors(); n != 1 {
		t.Errorf("%d ERROR lines over %d rechecks, want 1:\n%s", n, st.Errors, logs.b.String())
	}
	// Nothing after it was published: no gap, nothing skipped.
	if msgs := natstest.ReadStream(t, c.URLs(), DefaultStream, int(big-1)); len(msgs) != int(big-1) {
		t.Fatalf("the stream holds %d messages while stopped at seq %d, want %d", len(msgs), big, big-1)
	}

	c.SetMaxPayload(1 << 20)
	rs.waitCaughtUp(t, wd, 60*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
	if st := rs.s.Status(); st.TooLarge != nil {
		t.Errorf("still too_large after max_payload was raised: %+v", st.TooLarge)
	}
	if got := promtest.Value(t, rs.reg, "backstream_nats_too_large_seq", nil); got != 0 {
		t.Errorf("backstream_nats_too_large_seq = %v after it was published", got)
	}
	if n := logs.errors(); n != 1 {
		t.Errorf("%d ERROR lines, want 1", n)
	}
}

// TestSinkStopsAtEventOverStreamMaxMsgSize: the operator's stream has a
// max_msg_size, and an event's message is larger: the stream refuses it
// every time. Like an event over the servers' max_payload, the sink
// publishes up to it and stops there in state too_large, names the
// event, its size and the stream's max_msg_size in Status, a metric, one
// ERROR line and the config differences, rechecks slowly, and goes on
// without a gap once the operator raises max_msg_size. (Not state
// retrying on the fast backoff, the limit unnamed but in the last error.)
func TestSinkStopsAtEventOverStreamMaxMsgSize(t *testing.T) {
	const maxMsgSize = 4 << 10
	c := natstest.Start(t, 1)
	js := jsConnect(t, c.URLs())
	cfg := jetstream.StreamConfig{Name: DefaultStream, Subjects: []string{DefaultStream + ".>"}, Storage: jetstream.FileStorage,
		Duplicates: DefaultDuplicateWindow, MaxMsgSize: maxMsgSize}
	createStream(t, js, cfg)
	wd, big, rs, logs := startAtBigEvent(t, c, maxMsgSize)
	var last Status
	defer func() {
		if t.Failed() {
			t.Logf("last status: %+v", last)
		}
	}()
	promtest.Eventually(t, 30*time.Second, fmt.Sprintf("the sink stopped at seq %d in state too_large, rechecked 3 times", big), func() bool {
		st := rs.s.Status()
		last = st
		return st.State == StateTooLarge && st.Position == big-1 &&
			promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errTooLarge}) >= 3
	})
	st := rs.s.Status()
	if tl := st.TooLarge; tl == nil || tl.Seq != big || tl.Bytes <= maxMsgSize || tl.MaxMsgSize != maxMsgSize {
		t.Fatalf("status too_large %+v, want seq %d over the stream's max_msg_size %d", tl, big, maxMsgSize)
	}
	if !strings.Contains(st.LastError, "max_msg_size") || !strings.Contains(st.LastError, fmt.Sprint(big)) {
		t.Errorf("last error %q does not name max_msg_size and seq %d", st.LastError, big)
	}
	if !containsAny(st.ConfigDiffs, "max_msg_size") {
		t.Errorf("config differences %q do not name max_msg_size", st.ConfigDiffs)
	}
	if got := promtest.Value(t, rs.reg, "backstream_nats_too_large_seq", nil); got != float64(big) {
		t.Errorf("backstream_nats_too_large_seq = %v, want %d", got, big)
	}
	if n := logs.errors(); n != 1 {
		t.Errorf("%d ERROR lines over %d rechecks, want 1:\n%s", n, st.Errors, logs.b.String())
	}
	if msgs := natstest.ReadStream(t, c.URLs(), DefaultStream, int(big-1)); len(msgs) != int(big-1) {
		t.Fatalf("the stream holds %d messages while stopped at seq %d, want %d", len(msgs), big, big-1)
	}

	cfg.MaxMsgSize = -1
	if _, err := js.UpdateStream(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	rs.waitCaughtUp(t, wd, 60*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
	if st := rs.s.Status(); st.TooLarge != nil {
		t.Errorf("still too_large after max_msg_size was raised: %+v", st.TooLarge)
	}
	if n := logs.errors(); n != 1 {
		t.Errorf("%d ERROR lines, want 1", n)
	}
}

// startAtBigEvent commits 100 events, one of 2 × limit bytes, 100 more,
// and starts a sink on c that rechecks a too-large event every 20-50 ms,
// logging to logs: the world, the big event's seq, the running sink.
func startAtBigEvent(t *testing.T, c *natstest.Cluster, limit int64) (wd *world, big uint64, rs *runningSink, logs *logBuffer) {
	t.Helper()
	wd, ctx := newWorld(t), ctxT(t)
	if err := wd.commit(ctx, 100); err != nil {
		t.Fatal(err)
	}
	r, err := wd.w.Apply(ctx, &archive.Unit{Events: []archive.Event{bigPost(t, "did:plc:big", 2*int(limit))}})
	if err != nil || r.Kept != 1 {
		t.Fatalf("big event: %+v %v", r, err)
	}
	if err := wd.commit(ctx, 100); err != nil {
		t.Fatal(err)
	}
	logs = &logBuffer{}
	rs = wd.startSink(t, Config{URLs: c.URLs(), Window: 32,
		Logger:          slog.New(slog.NewTextHandler(logs, nil)),
		TooLargeBackoff: backoff.Policy{Base: 20 * time.Millisecond, Max: 50 * time.Millisecond}})
	return wd, r.FirstSeq, rs, logs
}
