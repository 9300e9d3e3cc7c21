package natssink

// Authentication and authorization failures: the sink must show the
// server's reason, retry on its backoff, and go on once the operator has
// put the credentials or permissions right.

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkCredentialsRefusedThenRestored: the servers' users change
// under a running sink (a password rotated on the servers before the
// sink's credentials): every reconnect is refused. The sink shows the
// refusal, and once the servers accept its credentials again it goes on
// without a restart, as it does after any outage.
func TestSinkCredentialsRefusedThenRestored(t *testing.T) {
	c := natstest.Start(t, 1)
	c.SetUsers([]*server.User{{Username: "bs", Password: "old"}})
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs(), Options: []nats.Option{nats.UserInfo("bs", "old")}})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	c.SetUsers([]*server.User{{Username: "bs", Password: "new"}})
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 30*time.Second, "the sink shows the servers' refusal", func() bool {
		return strings.Contains(strings.ToLower(rs.s.Status().LastError), "authorization violation")
	})
	c.SetUsers([]*server.User{{Username: "bs", Password: "old"}})
	rs.waitCaughtUp(t, wd, 30*time.Second)
}

