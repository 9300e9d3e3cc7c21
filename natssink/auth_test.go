package natssink

// Authentication and authorization failures: the sink must show the
// server's reason, retry on its backoff, and go on once the operator has
// put the credentials or permissions right.

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkCredentialsRefusedThenRestored: the servers' users change
// under a running sink (authentication turned on, or a password rotated,
// on the servers before the sink's credentials): every reconnect is
// refused. The sink shows the
// refusal, and once the servers accept its credentials again it goes on
// without a restart, as it does after any outage.
func TestSinkCredentialsRefusedThenRestored(t *testing.T) {
	var logs logBuffer
	c, wd, rs := caughtUp(t, 20, Config{Options: []nats.Option{nats.UserInfo("bs", "old")}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := ctxT(t)
	c.SetUsers([]*server.User{{Username: "bs", Password: "new"}})
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 30*time.Second, "the sink shows the servers' refusal", func() bool {
		return strings.Contains(strings.ToLower(rs.s.Status().LastError), "authorization violation")
	})
	e0 := rs.s.Status().Errors
	promtest.Eventually(t, 30*time.Second, "the sink retries 5 more times", func() bool { return rs.s.Status().Errors >= e0+5 })
	if n := logs.count("NATS connection was closed"); n != 1 {
		t.Errorf("%d lines \"the NATS connection was closed\" over one refusal, want 1", n)
	}
	c.SetUsers([]*server.User{{Username: "bs", Password: "old"}})
	rs.waitCaughtUp(t, wd, 30*time.Second)
}

// TestSinkPermissionDenied: the sink's user may not ask for the stream's
// info, or may not publish into it. The servers answer such a request or
// publish with nothing but a permissions violation on the connection; the
// sink's last error must name it (not only a timeout, the reason left to
// nats.go's own line on stderr), and the sink goes on once the operator
// grants the permission.
func TestSinkPermissionDenied(t *testing.T) {
	for _, tc := range []struct{ name, deny string }{
		{"stream info", "$JS.API.STREAM.INFO.>"},
		{"publish", DefaultStream + ".>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := natstest.Start(t, 1)
			c.SetUsers([]*server.User{{Username: "bs", Password: "pw",
				Permissions: &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{tc.deny}}}}})
			wd := newWorld(t)
			if err := wd.commit(ctxT(t), 20); err != nil {
				t.Fatal(err)
			}
			rs := wd.startSink(t, Config{URLs: c.URLs(), AckTimeout: 500 * time.Millisecond, Options: []nats.Option{nats.UserInfo("bs", "pw")}})
			rs.logStatusOnFailure(t)
			promtest.Eventually(t, 30*time.Second, "the sink names the permissions violation", func() bool {
				return strings.Contains(strings.ToLower(rs.s.Status().LastError), "permissions violation")
			})
			c.SetUsers([]*server.User{{Username: "bs", Password: "pw"}})
			rs.waitCaughtUp(t, wd, 30*time.Second)
		})
	}
}
