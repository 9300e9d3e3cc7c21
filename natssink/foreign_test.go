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
	c, wd, rs := caughtUp(t, 20, Config{})
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

// TestSinkForeignMessageMidWindow: a message of another publisher lands
// in the stream just before a window of the sink's publishes. Every
// publish after it is refused (Nats-Expected-Last-Sequence for the first,
// then Nats-Expected-Last-Msg-Id: the chain never re-aligns behind it),
// and the sink stops at it with resume errors, its position at the last
// event it published, none missing below.
func TestSinkForeignMessageMidWindow(t *testing.T) {
	c, wd, rs, _ := foreignAfterCatchUp(t, &nats.Msg{Subject: DefaultStream + ".foreign", Data: []byte("x")})
	if err := wd.commit(ctxT(t), 20); err != nil {
		t.Fatal(err)
	}
	rs.waitResumeErrors(t)
	st := rs.s.Status()
	if st.Position != 20 {
		t.Errorf("position %d, want 20 (state %s, last error %q)", st.Position, st.State, st.LastError)
	}
	if gaps := missing(t, c.URLs(), st.Position); len(gaps) > 0 {
		t.Errorf("archive seqs %v are not in the stream, yet the position is %d (last error %q)", gaps, st.Position, st.LastError)
	}
}

// TestSinkForeignMessageWithNumericID: a foreign last message whose
// Nats-Msg-Id is a number is not taken for one of the sink's, whether it
// lacks Backstream-Did and its id is past the archive's tip, or it has
// both but is not the archive's event at that seq: it stops the sink
// (resume errors) instead of making it skip to (or repeat from) that
// number.
func TestSinkForeignMessageWithNumericID(t *testing.T) {
	for _, tc := range []struct{ name, subject, id, did string }{
		{"past the tip", DefaultStream + ".foreign", "1000", ""},
		{"not the archived event", DefaultStream + ".identity", "21", "did:plc:someone-else"}, // the next event's seq (20 and below are in the duplicate window)
	} {
		t.Run(tc.name, func(t *testing.T) {
			foreign := nats.NewMsg(tc.subject)
			foreign.Header.Set(nats.MsgIdHdr, tc.id)
			if tc.did != "" {
				foreign.Header.Set(HeaderDID, tc.did)
			}
			foreign.Data = []byte("not backstream's")
			c, wd, rs, _ := foreignAfterCatchUp(t, foreign)
			if err := wd.commit(ctxT(t), 1); err != nil {
				t.Fatal(err)
			}
			rs.waitResumeErrors(t)
			if st := rs.s.Status(); st.Position != 20 {
				t.Errorf("position %d, want 20 (state %s, last error %q)", st.Position, st.State, st.LastError)
			}
			if gaps := missing(t, c.URLs(), 20); len(gaps) > 0 {
				t.Errorf("archive seqs %v are not in the stream", gaps)
			}
		})
	}
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
