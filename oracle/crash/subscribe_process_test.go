package crash_test

// TestSubscribeSurvivesSIGKILL: process-level delivery through the real
// /subscribe websocket. D1: a SIGKILL during live traffic never takes back an
// event a subscriber was handed, nor reuses its seq (the subscriber stays
// connected across the kill, resumes with its last cursor, and everything it
// held is byte-identical in a fresh read from cursor 0, with no gap). D7:
// folding the full stream from cursor 0 gives exactly the network's current
// records.

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
)

func TestSubscribeSurvivesSIGKILL(t *testing.T) {
	citest.Long(t, "process-level delivery test")
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 300, RecordsMean: 20, Hosts: 3, Rate: 300, Events: 6000, Traffic: oracle.TrafficFull, Seed: 21})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	h := crash.New(t, net, crash.Options{Args: serveArgs, Subscribe: true})
	// Let live traffic flow to the subscriber, then kill -9 mid-stream.
	l := h.KillRun(crash.Kill{Kind: crash.KillInSteady, Delay: 3 * time.Second})
	if l.SubHeld == 0 {
		t.Fatal("the subscriber got nothing before the kill")
	}
	p := h.Converge(3 * time.Minute)
	res := h.Finish(p)
	t.Logf("D1: %d events held at the kill, %d in all over %d connections, intact in a fresh read; D7: %d events fold to ground truth for %d accounts",
		l.SubHeld, res.SubHeld, res.SubConns, res.FreshRead, res.Checked)
}
