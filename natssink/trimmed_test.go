package natssink

// The operator trims the stream's front while the sink publishes into it:
// a partial purge (nats stream purge --keep N, or --seq N), or messages
// removed at the front (nats stream rmm). The sink publishes on behind
// what is left when that holds a message the stream held at the sink's
// last look; when it does not, nothing tells the trim from a purge
// followed by the sink's publishes.

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// trims are the operator's ways of removing the messages below stream
// sequence 36 of a stream holding 1 to 40.
var trims = []struct {
	name string
	trim func(context.Context, jetstream.Stream) error
}{
	{"purge --keep 5", func(ctx context.Context, s jetstream.Stream) error { return s.Purge(ctx, jetstream.WithPurgeKeep(5)) }},
	{"purge --seq 36", func(ctx context.Context, s jetstream.Stream) error {
		return s.Purge(ctx, jetstream.WithPurgeSequence(36))
	}},
	{"rmm 1 to 35", func(ctx context.Context, s jetstream.Stream) error {
		for i := uint64(1); i < 36; i++ {
			if err := s.DeleteMsg(ctx, i); err != nil {
				return err
			}
		}
		return nil
	}},
}

// TestSinkFrontTrimmedWhileRunning: the sink resumed on a stream holding
// archive seqs 1 to 40 (so its watch knows all 40 stored) and the
// operator trims the front, keeping 36 to 40: the sink publishes on
// behind them, no resume error, no purge in the log, nothing published
// again.
func TestSinkFrontTrimmedWhileRunning(t *testing.T) {
	for _, tc := range trims {
		t.Run(tc.name, func(t *testing.T) {
			c := natstest.Start(t, 1)
			wd, rs, logs := resumedOn40(t, c.URLs(), Config{})
			stream, err := jsConnect(t, c.URLs()).Stream(ctxT(t), DefaultStream)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.trim(ctxT(t), stream); err != nil {
				t.Fatal(err)
			}
			if err := wd.commit(ctxT(t), 5); err != nil {
				t.Fatal(err)
			}
			rs.waitCaughtUp(t, wd, 30*time.Second)
			if ids, want := strings.Join(streamIDs(t, c.URLs()), " "), seqRange(36, 45); ids != want {
				t.Errorf("the stream holds ids [%s], want [%s]", ids, want)
			}
			if n := promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errResume}); n != 0 || logs.count(logPurged) != 0 {
				t.Errorf("%v resume errors, %d purge warnings: the trim was taken for a purge", n, logs.count(logPurged))
			}
		})
	}
}

// resumedOn40 archives 40 events, has a first sink publish them and
// stop, and starts a second one (cfg, its URLs urls, logging to the
// buffer returned) that resumes after the stream's last message.
func resumedOn40(t *testing.T, urls string, cfg Config) (*world, *runningSink, *logBuffer) {
	t.Helper()
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 40); err != nil {
		t.Fatal(err)
	}
	first := wd.startSink(t, Config{URLs: urls, Options: cfg.Options})
	first.waitCaughtUp(t, wd, 30*time.Second)
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	cfg.URLs, cfg.Logger = urls, slog.New(slog.NewTextHandler(&logs, nil))
	rs := wd.startSink(t, cfg)
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	return wd, rs, &logs
}

// seqRange is "from from+1 … to".
func seqRange(from, to int) string {
	var b strings.Builder
	for i := from; i <= to; i++ {
		if i > from {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Itoa(i))
	}
	return b.String()
}

// TestSinkTrimKeepingOnlyNewerTakenForAPurge: the operator purges with
// --keep 1 after the sink published archive seq 41 and before its watch
// looks again (the look is held on the path until the purge is done).
// What is left holds nothing the stream held at the watch's last look,
// and a purge followed by the sink's publish of 41 leaves the very same
// stream (TestTrimLooksLikePurgeThenPublishes): the sink takes it for a
// purge and publishes nothing more, republishing nothing either. Its last
// error must say what else it may be and the way out: backstream
// restarted publishes on behind the kept message.
func TestSinkTrimKeepingOnlyNewerTakenForAPurge(t *testing.T) {
	c := natstest.Start(t, 1)
	var hold atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	proxy := natstest.StartProxy(t, c.Addr(0), func(subject string) natstest.Action {
		if subject == "$JS.API.STREAM.INFO."+DefaultStream && hold.CompareAndSwap(true, false) {
			close(held)
			<-release
		}
		return natstest.Forward
	}, nil)
	// The watch looks at the session's first acknowledgement only.
	wd, rs, logs := resumedOn40(t, proxy.URL, Config{PositionEvery: time.Hour, Options: []nats.Option{nats.IgnoreDiscoveredServers()}})
	hold.Store(true)
	if err := wd.commit(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-ctxT(t).Done():
		t.Fatal("the watch never looked at the stream")
	}
	stream, err := jsConnect(t, c.URLs()).Stream(ctxT(t), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctxT(t), jetstream.WithPurgeKeep(1)); err != nil {
		t.Fatal(err)
	}
	close(release)
	promtest.Eventually(t, 30*time.Second, "the sink takes the trim for a purge", func() bool {
		return promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errResume}) >= 2
	})
	if err := wd.commit(ctxT(t), 5); err != nil {
		t.Fatal(err)
	}
	e0 := rs.s.Status().Errors
	promtest.Eventually(t, 30*time.Second, "three more sessions refuse to publish", func() bool { return rs.s.Status().Errors >= e0+3 })
	st := rs.s.Status()
	if ids := strings.Join(streamIDs(t, c.URLs()), " "); ids != "41" {
		t.Errorf("the stream holds ids [%s], want [41]: the sink published after taking the trim for a purge", ids)
	}
	if n := logs.count(logPurged); n != 1 {
		t.Errorf("%d purge warnings, want 1", n)
	}
	t.Logf("state %s, last error %q", st.State, st.LastError)
	if !strings.Contains(st.LastError, "--keep") || !strings.Contains(st.LastError, "restart backstream") {
		t.Errorf("the last error %q does not say a partial purge looks the same, nor that backstream restarted publishes on behind what was kept", st.LastError)
	}
	// The way out for a trim: backstream restarted publishes on behind it.
	rs.stop()
	rs = wd.startSink(t, Config{URLs: c.URLs()})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	if ids, want := strings.Join(streamIDs(t, c.URLs()), " "), seqRange(41, 46); ids != want {
		t.Errorf("after a restart the stream holds ids [%s], want [%s]", ids, want)
	}
}

// TestTrimLooksLikePurgeThenPublishes: on a real server (one node, and an
// R3 stream on three), streams holding ids 1 to 10 are trimmed to 6 to 10
// by purge --keep 5, by purge --seq 6, by removing 1 to 5 (nats stream
// rmm), and another stream is purged after 1 to 5 and then given 6 to 10;
// and streams holding 1 and 2 are purged, or have both removed. Within
// each group the streams' states are the same in every field the stream
// info gives (deleted details included; the times are their messages')
// and they hold the same messages: once nothing the stream held at the
// sink's last look is left, nothing the servers show tells a trim from a
// purge followed by the sink's publishes, or removals from a purge.
func TestTrimLooksLikePurgeThenPublishes(t *testing.T) {
	publish := func(t *testing.T, js jetstream.JetStream, name string, from, to int) {
		t.Helper()
		for i := from; i <= to; i++ {
			msg := nats.NewMsg(name + ".identity")
			msg.Header.Set(nats.MsgIdHdr, strconv.Itoa(i))
			msg.Data = []byte(`{"seq":` + strconv.Itoa(i) + `}`)
			if _, err := js.PublishMsg(ctxT(t), msg); err != nil {
				t.Fatal(err)
			}
		}
	}
	type way struct {
		name string
		make func(t *testing.T, js jetstream.JetStream, s jetstream.Stream, name string) error
	}
	trimmed := func(trim func(context.Context, jetstream.Stream) error) func(*testing.T, jetstream.JetStream, jetstream.Stream, string) error {
		return func(t *testing.T, js jetstream.JetStream, s jetstream.Stream, name string) error {
			publish(t, js, name, 1, 10)
			return trim(ctxT(t), s)
		}
	}
	groups := [][]way{{
		{"purge --keep 5", trimmed(func(ctx context.Context, s jetstream.Stream) error { return s.Purge(ctx, jetstream.WithPurgeKeep(5)) })},
		{"purge --seq 6", trimmed(func(ctx context.Context, s jetstream.Stream) error {
			return s.Purge(ctx, jetstream.WithPurgeSequence(6))
		})},
		{"rmm 1 to 5", trimmed(func(ctx context.Context, s jetstream.Stream) error {
			for i := uint64(1); i <= 5; i++ {
				if err := s.DeleteMsg(ctx, i); err != nil {
					return err
				}
			}
			return nil
		})},
		{"purge, then 6 to 10 published", func(t *testing.T, js jetstream.JetStream, s jetstream.Stream, name string) error {
			publish(t, js, name, 1, 5)
			if err := s.Purge(ctxT(t)); err != nil {
				return err
			}
			publish(t, js, name, 6, 10)
			return nil
		}},
	}, {
		{"purge of 2", func(t *testing.T, js jetstream.JetStream, s jetstream.Stream, name string) error {
			publish(t, js, name, 1, 2)
			return s.Purge(ctxT(t))
		}},
		{"rmm 1, rmm 2", func(t *testing.T, js jetstream.JetStream, s jetstream.Stream, name string) error {
			publish(t, js, name, 1, 2)
			if err := s.DeleteMsg(ctxT(t), 1); err != nil {
				return err
			}
			return s.DeleteMsg(ctxT(t), 2)
		}},
	}}
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("R%d", nodes), func(t *testing.T) {
			c := natstest.Start(t, nodes)
			js := jsConnect(t, c.URLs())
			n := 0
			for _, g := range groups {
				var first string
				for _, w := range g {
					n++
					name := fmt.Sprintf("s%d", n)
					stream := createStream(t, js, jetstream.StreamConfig{Name: name, Replicas: nodes})
					if err := w.make(t, js, stream, name); err != nil {
						t.Fatalf("%s: %v", w.name, err)
					}
					info, err := stream.Info(ctxT(t), jetstream.WithDeletedDetails(true))
					if err != nil {
						t.Fatal(err)
					}
					st := info.State
					st.FirstTime, st.LastTime = time.Time{}, time.Time{} // their messages'
					var ids []string
					for i := st.FirstSeq; i <= st.LastSeq; i++ {
						if m, err := stream.GetMsg(ctxT(t), i); err == nil {
							ids = append(ids, m.Header.Get(nats.MsgIdHdr)+":"+string(m.Data))
						}
					}
					got := fmt.Sprintf("%+v %v", st, ids)
					if first == "" {
						first = got
						t.Logf("%s: %s", w.name, got)
					} else if got != first {
						t.Errorf("after %s the stream is\n%s\nafter %s\n%s", w.name, got, g[0].name, first)
					}
				}
			}
		})
	}
}
