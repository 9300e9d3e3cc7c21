package natssink

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync/atomic"
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
		stepDown(t, nc)
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

// stepDown asks the stream's leader to step down (nats stream cluster
// step-down), again until it has (a request that arrives while the stream
// has no leader goes unanswered, or is refused), and waits until the
// stream has a leader again.
func stepDown(t testing.TB, nc *nats.Conn) {
	t.Helper()
	promtest.Eventually(t, 60*time.Second, "the stream's leader steps down", func() bool {
		reply, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+DefaultStream, nil, 5*time.Second)
		var resp struct {
			Success bool `json:"success"`
		}
		return err == nil && json.Unmarshal(reply.Data, &resp) == nil && resp.Success
	})
	promtest.Eventually(t, 60*time.Second, "the stream has a leader again", func() bool {
		reply, err := nc.Request("$JS.API.STREAM.INFO."+DefaultStream, nil, 2*time.Second)
		var resp struct {
			Cluster *struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
		}
		return err == nil && json.Unmarshal(reply.Data, &resp) == nil && resp.Cluster != nil && resp.Cluster.Leader != ""
	})
}

// TestSinkLeaderElectionStatus: a publish that reaches the R3 stream while
// its leader steps down is answered "no responders" (no server takes the
// subject until a new leader does). The stream still takes the sink's
// subjects: the last error must say the stream had no leader, not that no
// stream takes the subject (the advice for a stream re-created with other
// subjects).
func TestSinkLeaderElectionStatus(t *testing.T) {
	c := natstest.Start(t, 3)
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 100); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs(), Window: 256})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 60*time.Second)
	tr := wd.traffic(2 * time.Millisecond)
	defer tr.stop()
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// A step-down fails a session when a publish arrives in the moment
	// without a leader; the stream info the sink then asks may be answered
	// by a replica still without one, or by the new leader. Each failure's
	// last error is looked at.
	failures := uint64(0)
	for range 4 {
		from := rs.s.Status()
		stepDown(t, nc)
		promtest.Eventually(t, 60*time.Second, "the sink publishes after the step-down", func() bool {
			st := rs.s.Status()
			return st.State == StatePublishing && st.Position > from.Position+100
		})
		st := rs.s.Status()
		if st.Errors == from.Errors {
			continue
		}
		failures += st.Errors - from.Errors
		// A publish the old leader took as it stepped down goes
		// unanswered: the session fails on the ack timeout, which says
		// so; a publish no server took must not read as a stream gone.
		if strings.Contains(st.LastError, "no stream takes the subject") ||
			strings.Contains(st.LastError, "no responders") && !strings.Contains(st.LastError, "no leader") {
			t.Errorf("after a step-down the last error is %q: want it to say the stream had no leader (it takes the subject)", st.LastError)
		}
	}
	if failures == 0 {
		t.Fatalf("4 step-downs under traffic, and no session failed")
	}
	t.Logf("%d sessions failed over 4 step-downs", failures)
	tr.stop()
	rs.waitCaughtUp(t, wd, 60*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}

// TestSinkStreamWithoutQuorumStatus: two of the R3 stream's three nodes
// go down (the leader among them), so the stream has no leader until one
// comes back. The sink must show it: state no_leader (the gauge too), the
// last error saying the stream has no leader, at every retry (not the
// step of the session that happened to fail: a timeout, or "JetStream
// system temporarily unavailable"), and one log line for the outage; then
// it goes on once the nodes are back.
func TestSinkStreamWithoutQuorumStatus(t *testing.T) {
	c := natstest.Start(t, 3)
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 100); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	rs := wd.startSink(t, Config{URLs: c.URLs(), Window: 256, AckTimeout: time.Second,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 60*time.Second)
	tr := wd.traffic(20 * time.Millisecond)
	defer tr.stop()
	leader := streamLeader(t, c.URLs(), DefaultStream)
	down := []int{leader, (leader + 1) % 3}
	for _, i := range down {
		c.Stop(i)
	}
	noLeader := func(st Status) bool {
		return st.State == StateNoLeader && strings.Contains(st.LastError, "no leader") &&
			promtest.Value(t, rs.reg, "backstream_nats_state", map[string]string{"state": StateNoLeader}) == 1
	}
	promtest.Eventually(t, 60*time.Second, "the sink shows the stream without a leader", func() bool { return noLeader(rs.s.Status()) })
	e0 := rs.s.Status().Errors
	promtest.Eventually(t, 60*time.Second, "three more sessions fail, each showing the stream without a leader", func() bool {
		st := rs.s.Status()
		if !noLeader(st) {
			t.Fatalf("while the stream has no leader the sink shows state %q, last error %q", st.State, st.LastError)
		}
		return st.Errors >= e0+3
	})
	if n := logs.count("NATS sink session failed"); n != 1 {
		t.Errorf("%d lines \"NATS sink session failed\" over one outage, want 1", n)
	}
	for _, i := range down {
		c.Restart(i)
	}
	c.WaitJetStream()
	tr.stop()
	rs.waitCaughtUp(t, wd, 60*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}

// TestSinkNoLeaderUnansweredCheck: once the sink shows the stream without
// a leader, a later failure whose leader check goes unanswered (a loaded
// server, the one replica left slow to answer) leaves it so: an unanswered
// check does not say the stream has a leader again. Before, the state
// flipped to retrying at the first check that went unanswered, with the
// failure as it came (a publish's "no acknowledgement within …" under
// load; here the session's own stream lookup timing out). The checks are
// lost on the path here, a proxy dropping every stream info request once
// the state is no_leader.
func TestSinkNoLeaderUnansweredCheck(t *testing.T) {
	c := natstest.Start(t, 3)
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 100); err != nil {
		t.Fatal(err)
	}
	var dropInfo atomic.Bool
	proxy := natstest.StartProxy(t, c.Addr(0), func(subject string) natstest.Action {
		if dropInfo.Load() && strings.HasPrefix(subject, "$JS.API.STREAM.INFO.") {
			return natstest.Drop
		}
		return natstest.Forward
	}, nil)
	rs := wd.startSink(t, Config{URLs: proxy.URL, Window: 256, AckTimeout: time.Second, Replicas: 3,
		Options: []nats.Option{nats.IgnoreDiscoveredServers()}})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 60*time.Second)
	tr := wd.traffic(20 * time.Millisecond)
	defer tr.stop()
	for _, i := range []int{1, 2} { // node 0, the one the sink reaches, keeps no quorum alone
		c.Stop(i)
	}
	promtest.Eventually(t, 60*time.Second, "the sink shows the stream without a leader", func() bool {
		return rs.s.Status().State == StateNoLeader
	})
	dropInfo.Store(true)
	e0 := rs.s.Status().Errors
	promtest.Eventually(t, 60*time.Second, "three more sessions fail, their leader checks unanswered", func() bool {
		st := rs.s.Status()
		if st.State != StateNoLeader || !strings.Contains(st.LastError, "no leader") {
			t.Fatalf("a leader check unanswered after the stream was shown without a leader: state %q, last error %q; want no_leader kept", st.State, st.LastError)
		}
		return st.Errors >= e0+3
	})
	dropInfo.Store(false)
	for _, i := range []int{1, 2} {
		c.Restart(i)
	}
	c.WaitJetStream()
	tr.stop()
	rs.waitCaughtUp(t, wd, 60*time.Second)
}

// TestSinkLeaderWithoutQuorum: the R3 stream's leader is the node the sink
// reaches when the other two go down. It goes on answering for the stream
// as its leader, reads included, until it notices it lost its quorum
// (about ten seconds without hearing from a replica), but stores nothing:
// every publish goes unanswered. Its stream info names itself the leader,
// both replicas offline. The sink must show the stream without a leader,
// not retrying on "no acknowledgement within …", through the whole outage;
// one log line for it. (TestSinkStreamWithoutQuorumStatus once failed so
// under load: the leader stopped first handed its leadership to the node
// left up.)
func TestSinkLeaderWithoutQuorum(t *testing.T) {
	c := natstest.Start(t, 3)
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 100); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	rs := wd.startSink(t, Config{URLs: "nats://" + c.Addr(0), Window: 256, AckTimeout: time.Second, Replicas: 3,
		Options: []nats.Option{nats.IgnoreDiscoveredServers()},
		Logger:  slog.New(slog.NewTextHandler(&logs, nil))})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 60*time.Second)
	nc, err := nats.Connect(c.URLs())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	leadOn(t, nc, "n0")
	tr := wd.traffic(20 * time.Millisecond)
	defer tr.stop()
	rs.waitCaughtUp(t, wd, 60*time.Second)
	e0 := rs.s.Status().Errors
	for _, i := range []int{1, 2} {
		c.Stop(i)
	}
	promtest.Eventually(t, 60*time.Second, "three sessions fail, the stream shown without a leader", func() bool {
		st := rs.s.Status()
		if st.State == StateRetrying {
			t.Fatalf("the stream's leader left without a quorum: state %q, last error %q; want no_leader", st.State, st.LastError)
		}
		return st.State == StateNoLeader && st.Errors >= e0+3
	})
	if st := rs.s.Status(); !strings.Contains(st.LastError, "the stream has no leader") {
		t.Errorf("last error %q: want it to say the stream has no leader", st.LastError)
	}
	if n := logs.count("NATS sink session failed"); n != 1 {
		t.Errorf("%d lines \"NATS sink session failed\" over one outage, want 1", n)
	}
	for _, i := range []int{1, 2} {
		c.Restart(i)
	}
	c.WaitJetStream()
	tr.stop()
	rs.waitCaughtUp(t, wd, 60*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}

// leadOn asks the stream's leader to step down in favour of the server
// named name, again until that server leads the stream.
func leadOn(t testing.TB, nc *nats.Conn, name string) {
	t.Helper()
	req := []byte(`{"placement":{"preferred":"` + name + `"}}`)
	promtest.Eventually(t, 60*time.Second, name+" leads the stream", func() bool {
		reply, err := nc.Request("$JS.API.STREAM.INFO."+DefaultStream, nil, 2*time.Second)
		var resp struct {
			Cluster *struct {
				Leader string `json:"leader"`
			} `json:"cluster"`
		}
		if err == nil && json.Unmarshal(reply.Data, &resp) == nil && resp.Cluster != nil {
			switch resp.Cluster.Leader {
			case name:
				return true
			case "":
				return false // electing one: ask again
			}
		}
		_, _ = nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+DefaultStream, req, 5*time.Second)
		return false
	})
}
