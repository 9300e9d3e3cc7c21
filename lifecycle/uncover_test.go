package lifecycle

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// uncoverRig is a runner over an in-memory store following a simulated
// relay whose firehose refuses connections until the test lets it.
type uncoverRig struct {
	net *oracle.Network
	s   *archive.Store
	r   *runner
}

func newUncoverRig(t *testing.T) *uncoverRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 4, RecordsMean: 1, Hosts: 1, Traffic: oracle.TrafficNone, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { net.Close() })
	net.Faults().RefuseFirehose(true)
	quiet := slog.New(slog.DiscardHandler)
	s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	r := &runner{cfg: Config{Store: s, Writer: w, Relay: net.RelayURL(), CaptureWait: time.Millisecond, Logger: quiet, Now: time.Now}, log: quiet}
	return &uncoverRig{net: net, s: s, r: r}
}

// speak lets the firehose connect, waits for the connections-th, emits
// an event and waits until cond holds for the store's gaps.
func (g *uncoverRig) speak(t *testing.T, connections int64, cond func([]archive.Gap) bool) []archive.Gap {
	t.Helper()
	g.net.Faults().RefuseFirehose(false)
	for deadline := time.Now().Add(10 * time.Second); g.net.FirehoseConnections() < connections; time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no firehose connection within 10 s")
		}
	}
	did := g.net.World().Accounts()[0].DID
	if _, err := g.net.Emit(func(w *world.World) (world.Event, error) { return w.SetHandle(did, "spoke.test") }); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		gs, err := g.s.Gaps()
		if err != nil {
			t.Fatal(err)
		}
		if cond(gs) || time.Now().After(deadline) {
			return gs
		}
	}
}

// TestCaptureOwingHandedToLive: capture's wait expires while the relay
// refuses its firehose, and capture stops before any frame: it recorded
// no gap and owes one (bootstrap downloaded with no position and no
// connection). The live consumer after it, in the same process, records
// that no_cursor gap with its first frame.
func TestCaptureOwingHandedToLive(t *testing.T) {
	g := newUncoverRig(t)
	ctx := context.Background()
	if err := g.r.startCapture(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.r.awaitCapture(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.r.stopCapture(); err != nil {
		t.Fatal(err)
	}
	if gs, err := g.s.Gaps(); err != nil || len(gs) != 0 || !g.r.capOwing {
		t.Fatalf("after capture stopped with no frame: gaps %+v (%v), owing %v; want none recorded, owed", gs, err, g.r.capOwing)
	}
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.r.steady(sctx) }()
	gs := g.speak(t, 1, func(gs []archive.Gap) bool { return len(gs) > 0 })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Kind != archive.GapNoCursor || gs[0].FromSeq != 0 || gs[0].ToSeq != 1 {
		t.Fatalf("gaps %+v after the live consumer's first frame, want one no_cursor gap from 0 to 1", gs)
	}
}

// TestRestartedCaptureRecordsTheHole: a restart in bootstrap after
// capture's wait expired (meta/relay_silent_at, no cursor/relay): the
// downloads before it are covered by no position, so capture's first
// frame records a no_cursor gap.
func TestRestartedCaptureRecordsTheHole(t *testing.T) {
	g := newUncoverRig(t)
	if err := g.s.MarkRelaySilent(time.Now()); err != nil {
		t.Fatal(err)
	}
	g.r.cfg.CaptureWait = DefaultCaptureWait
	if err := g.r.startCapture(context.Background()); err != nil {
		t.Fatal(err)
	}
	gs := g.speak(t, 1, func(gs []archive.Gap) bool { return len(gs) > 0 })
	if err := g.r.stopCapture(); err != nil {
		t.Fatal(err)
	}
	if len(gs) != 1 || gs[0].Kind != archive.GapNoCursor || gs[0].ToSeq != 1 || g.r.capOwing {
		t.Fatalf("gaps %+v (owing %v) after a restart in bootstrap with the relay silent since the wait; want one no_cursor gap to 1", gs, g.r.capOwing)
	}
}
