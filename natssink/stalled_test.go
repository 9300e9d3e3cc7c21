package natssink

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkStalledSocket: the path to the servers stops taking bytes (a
// partition that drops packets, a server frozen): the sink's writes
// fill the socket's buffers and block. The sink must still fail the
// session within its ack timeout, as when the servers read but do not
// answer, and stop when asked; not wait on the blocked write for nats.go's
// own write timeout (a minute), its store iterator held all along and
// backstream's shutdown waiting with it. Here the proxy stops reading the
// sink's connection at its 10th publish, with some 20 MB of history to
// publish and a window that holds it all.
func TestSinkStalledSocket(t *testing.T) {
	c := natstest.Start(t, 1)
	stall := newStall(10)
	proxy := natstest.StartProxy(t, c.Addr(0), stall.decide(), nil)
	t.Cleanup(stall.releaseAll) // before the proxy closes
	wd := newWorld(t)
	for range 60 {
		if err := wd.commit(ctxT(t), 1000); err != nil {
			t.Fatal(err)
		}
	}
	rs := wd.startSink(t, Config{URLs: proxy.URL, Window: 1 << 16, AckTimeout: time.Second,
		Options: []nats.Option{nats.IgnoreDiscoveredServers()}})
	rs.logStatusOnFailure(t)
	stall.waitHeld(t, 10)
	promtest.Eventually(t, 20*time.Second, "a session fails while the path takes no bytes", func() bool {
		return promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errPublish}) >= 1
	})
	stopped := make(chan struct{})
	go func() { rs.stop(); close(stopped) }()
	promtest.Eventually(t, 20*time.Second, "the sink stops", func() bool {
		select {
		case <-stopped:
			return true
		default:
			return false
		}
	})
	t.Logf("last error %q", rs.s.Status().LastError)
}

// TestSinkInFlightBoundedByWindow: the servers take the sink's publishes
// but stop answering after the first (a stream leader that lost its
// quorum; from then on nothing on the connection is answered). The sink
// has a long history to publish; it must have at most its window of
// publishes unanswered, then fail the session at the ack timeout; the
// sessions after it find no stream and publish nothing.
func TestSinkInFlightBoundedByWindow(t *testing.T) {
	c := natstest.Start(t, 1)
	var pubs atomic.Int64
	proxy := natstest.StartProxy(t, c.Addr(0), func(subject string) natstest.Action {
		if strings.HasPrefix(subject, DefaultStream+".") {
			pubs.Add(1)
		}
		return natstest.Forward
	}, func(subject string) natstest.Action {
		if strings.HasPrefix(subject, "_INBOX.") && pubs.Load() > 1 {
			return natstest.Drop
		}
		return natstest.Forward
	})
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 5000); err != nil {
		t.Fatal(err)
	}
	const window = 64
	rs := wd.startSink(t, Config{URLs: proxy.URL, Window: window, AckTimeout: 300 * time.Millisecond,
		Options: []nats.Option{nats.IgnoreDiscoveredServers()}})
	rs.logStatusOnFailure(t)
	promtest.Eventually(t, 30*time.Second, "a session fails for want of acknowledgements, and two more after it", func() bool {
		return promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errPublish}) >= 1 &&
			rs.s.Status().Errors >= 3
	})
	if n := pubs.Load(); n > 1+window {
		t.Errorf("%d publishes with only the first answered, window %d: more than the window in flight", n, window)
	}
	if st := rs.s.Status(); st.Position != 1 {
		t.Errorf("position %d, want 1 (only the first publish answered)", st.Position)
	}
}
