package natssink

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// world is a store and its writer, with a producer of live traffic.
type world struct {
	t     testing.TB
	store *archive.Store
	w     *archive.Writer
	n     atomic.Int64 // events generated
}

func newWorld(t testing.TB) *world {
	t.Helper()
	store, err := archive.Open(t.TempDir(), archive.Options{Logger: quiet, CacheSize: 16 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// A small live log, so a lagging sink reads the store as well.
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet, LiveLogBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close(); store.Close() })
	return &world{t: t, store: store, w: w}
}

// event i: deletes, identity and account rows over 50 accounts, each with
// a rev above every earlier one, so the ratchet keeps them all.
func (wd *world) event(i int64) archive.Event {
	did := fmt.Sprintf("did:plc:%024d", i%50)
	ev := archive.Event{DID: did, Source: archive.SourceLive, UpstreamSeq: i + 1}
	switch i % 5 {
	case 1:
		ev.Kind, ev.Handle = archive.KindIdentity, fmt.Sprintf("u%d.test", i%50)
	case 2:
		ev.Kind, ev.Active = archive.KindAccount, true
	default:
		colls := []string{"app.bsky.feed.post", "app.bsky.feed.like", "app.bsky.graph.follow"}
		ev.Kind, ev.Collection, ev.RKey, ev.Rev = archive.KindDelete, colls[i%3], fmt.Sprintf("3k%011d", i), fmt.Sprintf("3l%011d", i+1)
	}
	return ev
}

// commit appends n events as one unit.
func (wd *world) commit(ctx context.Context, n int) error {
	evs := make([]archive.Event, n)
	for i := range evs {
		evs[i] = wd.event(wd.n.Add(1))
	}
	r, err := wd.w.Apply(ctx, &archive.Unit{Events: evs})
	if err != nil {
		return err
	}
	if r.Kept != n {
		return fmt.Errorf("receipt %+v for %d events", r, n)
	}
	return nil
}

// traffic commits units of 10 events every period until stop is called.
type traffic struct {
	stop func()
}

func (wd *world) traffic(period time.Duration) *traffic {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := wd.commit(ctx, 10); err != nil {
				if ctx.Err() == nil {
					wd.t.Errorf("traffic: %v", err)
				}
				return
			}
		}
	}()
	return &traffic{stop: func() { cancel(); <-done }}
}

// runningSink is a Sink running in a goroutine.
type runningSink struct {
	s    *Sink
	reg  *prometheus.Registry
	stop func() error
}

func (wd *world) startSink(t testing.TB, cfg Config) *runningSink {
	t.Helper()
	cfg.Store, cfg.Writer = wd.store, wd.w
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	reg := prometheus.NewRegistry()
	cfg.Metrics = NewMetrics(reg)
	if cfg.PositionEvery == 0 {
		cfg.PositionEvery = 50 * time.Millisecond
	}
	if cfg.AckTimeout == 0 {
		cfg.AckTimeout = 2 * time.Second
	}
	cfg.Backoff.Base, cfg.Backoff.Max = 50*time.Millisecond, 500*time.Millisecond
	cfg.Options = append(cfg.Options, nats.ReconnectWait(100*time.Millisecond))
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Run(ctx) }()
	var once sync.Once
	var runErr error
	rs := &runningSink{s: s, reg: reg, stop: func() error {
		once.Do(func() { cancel(); runErr = <-errc })
		return runErr
	}}
	t.Cleanup(func() { rs.stop() })
	return rs
}

// caughtUp starts a one-node cluster, archives n events, and starts a
// sink with cfg (its URLs the cluster's) that has published them.
func caughtUp(t *testing.T, n int, cfg Config) (*natstest.Cluster, *world, *runningSink) {
	t.Helper()
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), n); err != nil {
		t.Fatal(err)
	}
	cfg.URLs = c.URLs()
	rs := wd.startSink(t, cfg)
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	return c, wd, rs
}

// createStream creates the stream as an operator would, cfg's name and
// subjects defaulting to the sink's.
func createStream(t testing.TB, js jetstream.JetStream, cfg jetstream.StreamConfig) jetstream.Stream {
	t.Helper()
	if cfg.Name == "" {
		cfg.Name = DefaultStream
	}
	if cfg.Subjects == nil {
		cfg.Subjects = []string{cfg.Name + ".>"}
	}
	stream, err := js.CreateStream(ctxT(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

// logStatusOnFailure logs the sink's status at the test's end if it failed.
func (rs *runningSink) logStatusOnFailure(t testing.TB) {
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sink status at the end: %+v", rs.s.Status())
		}
	})
}

// waitCaughtUp waits until the sink publishes and its position is the
// archive's tip. (Until a session has read the stream, the position shown
// is the durable one, which may be ahead of the stream.)
func (rs *runningSink) waitCaughtUp(t testing.TB, wd *world, d time.Duration) {
	t.Helper()
	tip := wd.w.Live().Tip()
	promtest.Eventually(t, d, fmt.Sprintf("the sink reaches the tip %d", tip), func() bool {
		st := rs.s.Status()
		return st.State == StatePublishing && st.Position >= tip
	})
}

// jsConnect is a JetStream client of urls, closed at the test's end.
func jsConnect(t testing.TB, urls string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// streamIDs is the Nats-Msg-Id of every message in the stream, in order
// ("" for a message without one).
func streamIDs(t testing.TB, urls string) []string {
	t.Helper()
	js := jsConnect(t, urls)
	stream, err := js.Stream(ctxT(t), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := info.State.FirstSeq; i <= info.State.LastSeq; i++ {
		m, err := stream.GetMsg(ctxT(t), i)
		if err != nil {
			continue
		}
		ids = append(ids, m.Header.Get(nats.MsgIdHdr))
	}
	return ids
}

// missing is the archive seqs from 1 to upto that no message of the stream
// carries as its Nats-Msg-Id.
func missing(t testing.TB, urls string, upto uint64) []uint64 {
	t.Helper()
	have := map[string]bool{}
	for _, id := range streamIDs(t, urls) {
		have[id] = true
	}
	var gaps []uint64
	for seq := uint64(1); seq <= upto; seq++ {
		if !have[strconv.FormatUint(seq, 10)] {
			gaps = append(gaps, seq)
		}
	}
	return gaps
}

func fmtSscanf(leader string, i *int) (int, error) { return fmt.Sscanf(leader, "n%d", i) }
