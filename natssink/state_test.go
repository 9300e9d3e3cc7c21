package natssink

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkStateBeforeFirstAck: the stream is there, but NATS loses every
// publish (each times out): the state never says publishing, neither in
// /status nor in backstream_nats_state, while a publish waits for the
// session's first acknowledgement. Once publishes get through it does;
// and a sink restarted with nothing to publish (the stream holds the
// archive to its tip) says publishing too.
func TestSinkStateBeforeFirstAck(t *testing.T) {
	c := natstest.Start(t, 1)
	var drop atomic.Bool
	drop.Store(true)
	var sink atomic.Pointer[runningSink]
	var mu sync.Mutex
	var states []string // the state as each lost publish goes by
	proxy := natstest.StartProxy(t, c.Addr(0), func(subject string) natstest.Action {
		if !drop.Load() || !strings.HasPrefix(subject, DefaultStream+".") {
			return natstest.Forward
		}
		if rs := sink.Load(); rs != nil {
			st := rs.s.Status().State
			if g := promtest.Value(t, rs.reg, "backstream_nats_state", map[string]string{"state": StatePublishing}); g != 0 {
				st += " (gauge publishing 1)"
			}
			mu.Lock()
			states = append(states, st)
			mu.Unlock()
		}
		return natstest.Drop
	}, nil)
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 20); err != nil {
		t.Fatal(err)
	}
	cfg := Config{URLs: proxy.URL, AckTimeout: 300 * time.Millisecond, Options: []nats.Option{nats.IgnoreDiscoveredServers()}}
	rs := wd.startSink(t, cfg)
	sink.Store(rs)
	rs.logStatusOnFailure(t)
	lost := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), states...)
	}
	promtest.Eventually(t, 30*time.Second, "three sessions each lose a publish", func() bool {
		return len(lost()) >= 3 && rs.s.Status().Errors >= 2
	})
	for i, st := range lost() {
		if st != StateConnecting {
			t.Errorf("lost publish %d went by in state %q, want %q: nothing was acknowledged yet (states %v)", i, st, StateConnecting, lost())
			break
		}
	}
	drop.Store(false)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	rs.stop()
	rs = wd.startSink(t, cfg)
	rs.waitCaughtUp(t, wd, 30*time.Second)
}
