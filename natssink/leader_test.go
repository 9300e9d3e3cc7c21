package natssink

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkR3LeaderChangesAndRollingRestart: live traffic into an R3
// stream on a three-node cluster while its leader steps down twice (a
// leader change with every node up: the one the operator asks for, and
// the one a node's upgrade begins with), then while every node is
// restarted in turn (a rolling restart: the stream's leader moves, and the
// node the sink is connected to goes away). After each the sink must go
// on publishing, and at the end the stream holds every archived event
// exactly once, in order.
func TestSinkR3LeaderChangesAndRollingRestart(t *testing.T) {
	c := natstest.Start(t, 3)
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 200); err != nil {
		t.Fatal(err)
	}
	tr := wd.traffic(5 * time.Millisecond)
	defer tr.stop()
	rs := wd.startSink(t, Config{URLs: c.URLs(), Window: 256})
	rs.logStatusOnFailure(t)
	advance := func(what string, n uint64) {
		t.Helper()
		from := rs.s.Status().Position
		promtest.Eventually(t, 60*time.Second, what, func() bool { return rs.s.Status().Position >= from+n })
	}
	advance("the sink publishes", 300)
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	stream, err := jsConnect(t, c.URLs()).Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	// The leader, "" while one is elected (an info request may then go
	// unanswered: a short timeout each).
	leaderNow := func() string {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		info, err := stream.Info(cctx)
		if err != nil || info.Cluster == nil {
			return ""
		}
		return info.Cluster.Leader
	}
	for range 2 {
		leader := leaderNow()
		reply, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.LEADER.STEPDOWN."+DefaultStream, nil)
		if err != nil {
			t.Fatal(err)
		}
		var resp struct {
			Success bool `json:"success"`
		}
		if err := json.Unmarshal(reply.Data, &resp); err != nil || !resp.Success {
			t.Fatalf("stepdown: %s %v", reply.Data, err)
		}
		promtest.Eventually(t, 30*time.Second, "another node leads the stream", func() bool {
			now := leaderNow()
			return now != "" && now != leader
		})
		advance("the sink goes on after the leader stepped down", 300)
	}
	for i := range 3 {
		c.Stop(i)
		advance("the sink goes on with a node down", 300)
		c.Restart(i)
		c.WaitJetStream()
		advance("the sink goes on with the node back", 300)
	}
	tr.stop()
	rs.waitCaughtUp(t, wd, 60*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
	t.Logf("%d session failures, last %q", rs.s.Status().Errors, rs.s.Status().LastError)
}
