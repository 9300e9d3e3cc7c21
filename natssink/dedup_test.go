package natssink

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

// TestSinkStalePublishAfterDuplicateWindow: backstream is killed with a
// publish on its way (held on the path), starts again and publishes on;
// the held publish reaches the server only after the stream's duplicate
// window has passed, so the server no longer knows its Nats-Msg-Id. It
// must still be refused (its Nats-Expected-Last-Sequence is stale): the
// duplicate window is a second guard only, and a restart long after it
// lands nothing twice.
func TestSinkStalePublishAfterDuplicateWindow(t *testing.T) {
	c := natstest.Start(t, 1)
	const window = 100 * time.Millisecond
	js := jsConnect(t, c.URLs())
	stream := createStream(t, js, jetstream.StreamConfig{Duplicates: window})
	stall := newStall(50)
	proxy := natstest.StartProxy(t, c.Addr(0), stall.decide(), nil)
	t.Cleanup(stall.releaseAll)
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 100); err != nil {
		t.Fatal(err)
	}
	// Window 1: after 49 acknowledged, the 50th is the one publish on its
	// way when the sink dies.
	rs := wd.startSink(t, Config{URLs: proxy.URL, Window: 1, AckTimeout: time.Hour,
		Options: []nats.Option{nats.IgnoreDiscoveredServers()}})
	stall.waitHeld(t, 50)
	rs.stop()

	rs = wd.startSink(t, Config{URLs: c.URLs()})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)

	// Replies to every inbox: the held publish's comes on the dead sink's
	// (the running sink publishes nothing more).
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var refused, accepted atomic.Int64
	sub, err := nc.Subscribe("_INBOX.>", func(m *nats.Msg) {
		// Only publish replies: not the API's (typed), a status, nor a
		// consumer's delivery.
		if len(m.Data) == 0 || strings.Contains(string(m.Data), `"type":`) || m.Reply != "" {
			return
		}
		switch r := parseAck(m); {
		case r.err != nil:
			t.Logf("the held publish: %v", r.err)
			refused.Add(1)
		case r.err == nil:
			accepted.Add(1)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	// The server has forgotten id 50 once a probe with it and a stale
	// expected sequence is refused for the sequence, not taken for a
	// duplicate (its replies come on a subject of its own).
	probes, err := nc.SubscribeSync("probe.reply")
	if err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 30*time.Second, "the server forgets id 50", func() bool {
		probe := nats.NewMsg(DefaultStream + ".identity")
		probe.Reply = "probe.reply"
		probe.Header.Set(nats.MsgIdHdr, "50")
		probe.Header.Set(nats.ExpectedLastSeqHdr, "1")
		if err := nc.PublishMsg(probe); err != nil {
			return false
		}
		reply, err := probes.NextMsg(5 * time.Second)
		if err != nil {
			return false
		}
		r := parseAck(reply)
		return r.err != nil && strings.Contains(r.err.Error(), "wrong last sequence")
	})
	if n := refused.Load() + accepted.Load(); n != 0 {
		t.Fatalf("%d replies on inboxes before the held publish was let go", n)
	}
	if _, err := stream.Info(ctx); err != nil { // the stream is up
		t.Fatal(err)
	}
	stall.release(50)
	promtest.Eventually(t, 30*time.Second, "the held publish is answered", func() bool {
		return refused.Load()+accepted.Load() > 0
	})
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	if n := accepted.Load(); n > 0 {
		t.Errorf("the held publish of the killed sink was accepted %d times after the duplicate window", n)
	}
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}
