package natssink

// Foreign messages: nothing but the sink may publish into the stream. One
// that lands there anyway must stop the sink (resume errors) without an
// archived event being skipped, and the sink must go on once it is removed.

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// foreignAfterCatchUp starts a sink over 20 archived events on a one-node
// cluster, waits until it has published them, then publishes m into the
// stream as another publisher would.
func foreignAfterCatchUp(t *testing.T, m *nats.Msg) (*natstest.Cluster, *world, *runningSink, uint64) {
	t.Helper()
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.waitCaughtUp(t, wd, 30*time.Second)
	ack, err := jsConnect(t, c.URLs()).PublishMsg(ctxT(t), m)
	if err != nil {
		t.Fatal(err)
	}
	return c, wd, rs, ack.Sequence
}

// waitResumeErrors waits until the sink counts a resume error: it stopped
// at a last message not its own.
func (rs *runningSink) waitResumeErrors(t *testing.T) {
	t.Helper()
	promtest.Eventually(t, 30*time.Second, "the sink stops at the foreign message (resume errors)", func() bool {
		return promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errResume}) >= 1
	})
}

// TestSinkForeignMessageRemoved: a foreign message stops the sink (resume
// errors) until it is removed; once the operator removes it (the stream's
// last sequence stays the removed message's), the sink resumes from its
// own last message and catches up.
func TestSinkForeignMessageRemoved(t *testing.T) {
	c, wd, rs, seq := foreignAfterCatchUp(t, &nats.Msg{Subject: DefaultStream + ".foreign", Data: []byte("x")})
	if err := wd.commit(ctxT(t), 1); err != nil { // one event: its publish is refused
		t.Fatal(err)
	}
	rs.waitResumeErrors(t)
	stream, err := jsConnect(t, c.URLs()).Stream(ctxT(t), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctxT(t), seq); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("status after the removal: %+v", rs.s.Status())
		}
	}()
	rs.waitCaughtUp(t, wd, 30*time.Second)
	if gaps := missing(t, c.URLs(), wd.w.Live().Tip()); len(gaps) > 0 {
		t.Errorf("archive seqs %v are not in the stream", gaps)
	}
}
