package crash_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/natssink"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// TestNATSSinkProcess: the real binary on a devnet with live traffic
// publishes into an R3 stream on a real three-node NATS cluster; the
// stream's leader is killed mid-stream and restarted, and backstream is
// SIGKILLed twice while it publishes. At the end the stream, read back with
// a consumer, holds every archived event exactly once in seq order with
// the /subscribe JSON as body, and the consumer's fold of it equals the
// network's ground truth.
func TestNATSSinkProcess(t *testing.T) {
	accounts, rate := 300, 200.0
	if testing.Short() {
		accounts, rate = 120, 150
	}
	crash.Binary(t)
	cl := natstest.Start(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: accounts, RecordsMean: 10, Hosts: 2, Seed: 22, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: append(append([]string(nil), serveArgs...),
		"--nats-url", cl.URLs(), "--nats-replicas", "3")})
	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	h.Traffic = crash.StartTraffic(net, world.TrafficFull, 22, rate)
	defer h.StopTraffic()

	nc, err := nats.Connect(cl.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	info := func() *jetstream.StreamInfo {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		st, err := js.Stream(c, natssink.DefaultStream)
		if err != nil {
			return nil
		}
		i, err := st.Info(c)
		if err != nil {
			return nil
		}
		return i
	}
	grows := func(what string, by uint64) {
		t.Helper()
		var from uint64
		if i := info(); i != nil {
			from = i.State.LastSeq
		}
		deadline := time.Now().Add(2 * time.Minute)
		for {
			if i := info(); i != nil && i.State.LastSeq >= from+by {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the stream did not grow by %d from %d within 2 min\n%s", what, by, from, p.Tail())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	grows("the sink publishes the history", 1)
	if i := info(); i == nil || i.Config.Replicas != 3 || i.Cluster == nil {
		t.Fatalf("stream %+v: want R3", i)
	}
	leader := info().Cluster.Leader
	var li int
	if _, err := fmtSscan(leader, &li); err != nil {
		t.Fatal(err)
	}
	cl.Stop(li)
	grows("the sink goes on with another stream leader", 200)
	cl.Restart(li)
	for range 2 {
		grows("the sink publishes before the kill", 200)
		if err := p.Kill(); err != nil {
			t.Fatal(err)
		}
		p = h.Start()
	}
	h.StopTraffic()
	p = h.WaitConverged(p, 3*time.Minute)
	st, ok := p.Status()
	if !ok {
		t.Fatal("no /status")
	}
	tip := st.Archive.TipSeq
	deadline := time.Now().Add(2 * time.Minute)
	for {
		i := info()
		if i != nil && i.State.Msgs > 0 {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			s, _ := js.Stream(c, natssink.DefaultStream)
			m, err := s.GetMsg(c, i.State.LastSeq)
			cancel()
			if err == nil && m.Header.Get(nats.MsgIdHdr) == strconv.FormatUint(tip, 10) {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not reach the archive tip %d: %+v\n%s", tip, i, p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	// /status shows the sink caught up.
	var last natssink.Status
	for deadline := time.Now().Add(30 * time.Second); ; {
		var sr struct {
			NATS *natssink.Status `json:"nats"`
		}
		if resp, err := http.Get("http://" + p.Listen + "/status"); err == nil {
			_ = json.NewDecoder(resp.Body).Decode(&sr)
			resp.Body.Close()
		}
		if sr.NATS != nil {
			last = *sr.NATS
			if last.Position == tip && last.LagEvents == 0 && last.State == natssink.StatePublishing {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status nats section %+v, want position %d, no lag, publishing", last, tip)
		}
		time.Sleep(100 * time.Millisecond)
	}
	res := h.Finish(p)
	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	msgs := natstest.ReadStream(t, cl.URLs(), natssink.DefaultStream, natstest.ArchiveEvents(t, s))
	natstest.CheckStream(t, s, msgs, func(ev *archive.Event) string { return natssink.Subject(natssink.DefaultStream, ev) })
	fold := check.Fold{}
	for _, m := range msgs {
		var ev crash.WireEvent
		if err := json.Unmarshal(m.Data(), &ev); err != nil {
			t.Fatalf("message %s: %v", m.Headers().Get(nats.MsgIdHdr), err)
		}
		crash.FoldWire(fold, &ev)
	}
	checked, bad := check.Compare(fold, net.World(), nil)
	if len(bad) > 0 {
		t.Fatalf("the stream's fold differs for %d of %d accounts:\n%s", len(bad), checked, check.Describe(bad, 10))
	}
	t.Logf("%d events archived, %d in the stream, exactly once in order; fold = ground truth for %d accounts", res.Events, len(msgs), checked)
}

func fmtSscan(leader string, i *int) (int, error) {
	n, err := strconv.Atoi(leader[1:])
	*i = n
	return 1, err
}
