package natssink

import (
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/freeport"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkServersDownNamed: --nats-url names servers none of which
// answers (down, or a wrong address). nats.go keeps reconnecting without
// an error of its own to show, so each session fails on its first
// JetStream request's timeout. Before, /status nats.last_error said only
// "stream: stream backstream: context deadline exceeded", which does not
// tell the operator that no server answers; now it says the sink is not
// connected to the servers it names.
func TestSinkServersDownNamed(t *testing.T) {
	addr, err := freeport.Addr() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	url := "nats://" + addr
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: url, AckTimeout: 300 * time.Millisecond})
	promtest.Eventually(t, 30*time.Second, "a failed session", func() bool { return rs.s.Status().Errors > 0 })
	st := rs.s.Status()
	if !strings.Contains(st.LastError, "not connected to the NATS servers "+url) {
		t.Fatalf("no NATS server answers: state %s, last error %q; want it to say the sink is not connected to %s", st.State, st.LastError, url)
	}
	t.Logf("state %s, last error %q", st.State, st.LastError)
}
