package crash_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// gapsReport is the "gaps" section of serve's /status.
type gapsReport struct {
	Gaps *struct {
		Open     int    `json:"open"`
		Closed   int    `json:"closed"`
		Lagging  string `json:"lagging"`
		OpenGaps []struct {
			Kind string `json:"kind"`
		} `json:"open_gaps"`
	} `json:"gaps"`
}

func readGaps(listen string) (gapsReport, bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + listen + "/status")
	if err != nil {
		return gapsReport{}, false
	}
	defer resp.Body.Close()
	var r gapsReport
	return r, resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&r) == nil && r.Gaps != nil
}

// emitOne makes one new record for did.
func emitOne(t *testing.T, net *oracle.Network, did string) {
	t.Helper()
	if _, err := net.Emit(func(w *world.World) (world.Event, error) {
		return w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "x", "createdAt": "2024-01-01T00:00:00Z"})
	}); err != nil {
		t.Fatal(err)
	}
}

// TestRepairPassCrashResumes: serve is stopped while the relay's replay
// window (10 events) is exceeded by changes to 30 accounts; the restart
// meets OutdatedCursor, records the gap and starts its repair pass, and is
// SIGKILLed right after the pass's first durable unit (repair-page). The
// next run resumes the pass from audit/<gap>, closes the gap, and the
// archive folds to the network's records; getRepo was called once for each
// of the 20 accounts whose commit fell out of the window and for no other
// (the 10 replayed whole are not fetched: the pass compares only once the
// stream has caught up past the gap): nothing fetched twice.
func TestRepairPassCrashResumes(t *testing.T) {
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 60, RecordsMean: 5, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 31, Retention: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	// The pass starts once the stream has caught up past the gap: after
	// the replayed backlog, the stream is quiet for a repair period. A
	// period well above any pause between two replayed frames on a loaded
	// machine, so the pass compares after the whole backlog is durable.
	h := crash.New(t, net, crash.Options{Args: append(append([]string(nil), serveArgs...), "--repair-period", "1s")})
	dids := activeDIDs(net)

	p := h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	waitLive(t, net, p)
	liveEvent(t, net, p, dids[len(dids)-1]) // a durable position to resume from
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.Tail())
	}

	before := net.AllRepoCounts()
	for _, did := range dids[:30] {
		emitOne(t, net, did)
	}
	changed := dids[:20] // out of the 10-event window; the last 10 are replayed whole
	h.KillRun(crash.AtPoint(crashpoint.RepairPage))

	p = h.Start()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if g, ok := readGaps(p.Listen); ok && g.Gaps.Open == 0 && g.Gaps.Closed == 1 {
			break
		}
		if p.Exited() || time.Now().After(deadline) {
			t.Fatalf("the gap never closed after the crash (exited %v):\n%s", p.Exited(), p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.WaitConverged(p, 2*time.Minute)
	res := h.Finish(p)

	fetched := net.FetchedSince(before)
	if err := check.FetchedOnce(fetched, changed); err != nil {
		t.Error(err)
	}
	t.Logf("gap healed across a SIGKILL mid-pass: %d events, fold = ground truth for %d accounts, %d accounts fetched once each", res.Events, res.Checked, len(fetched))
}
