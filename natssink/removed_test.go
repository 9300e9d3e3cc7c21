package natssink

// The operator removes the only message of the stream (nats stream rmm):
// the stream is then empty as a purge leaves it, but one message removed
// is not a purge.

import (
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

const (
	logPurged  = "the NATS stream was purged while the sink published into it"
	logRemoved = "a single message was removed from the front of the NATS stream"
)

// onlyMessageRemoved starts a sink on a stream that takes the archive
// from --nats-from 20 (so it holds one message, archive seq 20, of an
// archive of 20), removes that message as `nats stream rmm` does, and
// waits until the sink's purge watch has judged it.
func onlyMessageRemoved(t *testing.T, urls string, cfg Config) (*world, *runningSink, *logBuffer) {
	t.Helper()
	wd := newWorld(t)
	if err := wd.commit(ctxT(t), 20); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	cfg.URLs, cfg.From, cfg.DuplicateWindow = urls, 20, 500*time.Millisecond
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	rs := wd.startSink(t, cfg)
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	return wd, rs, &logs
}

// removeOnly removes the stream's only message, at stream sequence 1, and
// waits for the watch's verdict in the log.
func removeOnly(t *testing.T, c *natstest.Cluster, logs *logBuffer) {
	t.Helper()
	stream, err := jsConnect(t, c.URLs()).Stream(ctxT(t), DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.DeleteMsg(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 30*time.Second, "the sink's purge watch judges the removal", func() bool {
		return logs.count(logPurged)+logs.count(logRemoved) > 0
	})
	if n := logs.count(logPurged); n > 0 {
		t.Fatalf("the operator removed the stream's only message, and the sink took it for a purge (%d warnings %q): it fills the stream again from --nats-from",
			n, logPurged)
	}
}

// TestSinkOnlyMessageRemoved: the sink publishes on behind the removed
// message, and does not fill the stream again from --nats-from.
func TestSinkOnlyMessageRemoved(t *testing.T) {
	c := natstest.Start(t, 1)
	wd, rs, logs := onlyMessageRemoved(t, c.URLs(), Config{})
	removeOnly(t, c, logs)
	if err := wd.commit(ctxT(t), 2); err != nil {
		t.Fatal(err)
	}
	rs.waitCaughtUp(t, wd, 30*time.Second)
	if ids := strings.Join(streamIDs(t, c.URLs()), " "); ids != "21 22" {
		t.Errorf("the stream holds ids [%s], want [21 22]", ids)
	}
	if n := promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errResume}); n != 0 {
		t.Errorf("%v resume errors, want 0", n)
	}
}

// TestSinkOnlyMessageRemovedThenSessionFails: a session that begins after
// the removal, the stream still empty, resumes after the position too
// (here NATS loses the next publish, so the session that saw the removal
// fails and later ones find the stream empty).
func TestSinkOnlyMessageRemovedThenSessionFails(t *testing.T) {
	c := natstest.Start(t, 1)
	var drop atomic.Bool
	proxy := natstest.StartProxy(t, c.Addr(0), func(subject string) natstest.Action {
		if drop.Load() && strings.HasPrefix(subject, DefaultStream+".") {
			return natstest.Drop
		}
		return natstest.Forward
	}, nil)
	wd, rs, logs := onlyMessageRemoved(t, proxy.URL, Config{AckTimeout: 300 * time.Millisecond,
		Options: []nats.Option{nats.IgnoreDiscoveredServers()}})
	removeOnly(t, c, logs)
	drop.Store(true)
	if err := wd.commit(ctxT(t), 1); err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 30*time.Second, "two sessions fail to publish", func() bool {
		return promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errPublish}) >= 2
	})
	drop.Store(false)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	if ids := strings.Join(streamIDs(t, c.URLs()), " "); ids != "21" {
		t.Errorf("the stream holds ids [%s], want [21]: a later session filled the stream again from --nats-from", ids)
	}
}

// TestPurgeJudge: the purge watch's verdicts over a sequence of samples
// of the stream's state (messages, first, last sequence), each with the
// session's last stored stream sequence read before it.
func TestPurgeJudge(t *testing.T) {
	st := func(msgs, first, last uint64) jetstream.StreamState {
		return jetstream.StreamState{Msgs: msgs, FirstSeq: first, LastSeq: last}
	}
	type step struct {
		cur     jetstream.StreamState
		stored  uint64
		want    string // "purged", "removed" or ""
		because string
	}
	for _, tc := range []struct {
		name    string
		resumed jetstream.StreamState
		base    uint64
		steps   []step
	}{
		{"purged", st(20, 1, 20), 20, []step{
			{st(20, 1, 20), 20, "", "nothing changed"},
			{st(0, 21, 20), 20, "purged", "twenty messages went at once"},
		}},
		{"only message removed", st(1, 1, 1), 1, []step{
			{st(0, 2, 1), 1, "removed", "one message went"},
			{st(0, 2, 1), 1, "", "the same removal, judged once"},
			{st(2, 2, 3), 3, "", "the sink published on behind it"},
		}},
		{"removed while the sink publishes behind it", st(1, 1, 1), 1, []step{
			{st(10, 2, 11), 11, "removed", "one went, ten were stored"},
		}},
		{"trimmed, keeping messages stored before the last sample though not yet acknowledged", st(40, 1, 40), 40, []step{
			// At the first sample the stream held 1 to 100, the sink had
			// acknowledgements up to 60 only; then purge --keep 30.
			{st(100, 1, 100), 60, "", "nothing went"},
			{st(30, 71, 100), 100, "", "71 was in the stream at the sample before: no purge since then leaves it"},
		}},
		{"purged, the sink publishing behind it, past the last sample's last", st(40, 1, 40), 40, []step{
			{st(100, 1, 100), 60, "", "nothing went"},
			{st(5, 101, 105), 105, "purged", "nothing the stream held at the sample before is left"},
		}},
		{"purged before the first sample that compares", st(0, 0, 0), 0, []step{
			// The stream was empty at resume; the sink stored 20, and the
			// purge took them before the first sample, which knows nothing
			// stored yet (the first acknowledgement's stored is 1).
			{st(0, 21, 20), 1, "", "nothing known stored before this sample"},
			{st(0, 21, 20), 20, "purged", "twenty went since resume, though none since the sample before"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := purgeJudge{seen: tc.base, prev: tc.resumed}
			for i, s := range tc.steps {
				e, removed := j.sample(s.cur, s.stored)
				got := ""
				switch {
				case e != nil:
					got = "purged"
				case removed:
					got = "removed"
				}
				if got != s.want {
					t.Fatalf("sample %d %+v (stored %d): %q, want %q: %s", i, s.cur, s.stored, got, s.want, s.because)
				}
			}
		})
	}
}

// TestSinkOnlyMessageRemovedThenRestart: backstream stopped, or killed,
// while the stream is still empty after the running sink saw the removal
// of its only message: the next start resumes after the removed message,
// it does not fill the stream again from --nats-from. Killed, the durable
// position may lag the stream by the last second of publishes (here it is
// set back to 15 after the stop).
func TestSinkOnlyMessageRemovedThenRestart(t *testing.T) {
	for _, kill := range []bool{false, true} {
		t.Run(map[bool]string{false: "stopped", true: "killed"}[kill], func(t *testing.T) {
			c := natstest.Start(t, 1)
			wd, rs, logs := onlyMessageRemoved(t, c.URLs(), Config{})
			removeOnly(t, c, logs)
			rs.stop()
			if kill {
				v, _ := archive.EncodeSeqCursor(15)
				if _, err := wd.w.Apply(ctxT(t), &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorSinkNATS, Value: v}}}); err != nil {
					t.Fatal(err)
				}
			}
			if err := wd.commit(ctxT(t), 1); err != nil {
				t.Fatal(err)
			}
			rs = wd.startSink(t, Config{URLs: c.URLs(), From: 20, DuplicateWindow: 500 * time.Millisecond})
			rs.logStatusOnFailure(t)
			rs.waitCaughtUp(t, wd, 30*time.Second)
			if ids := strings.Join(streamIDs(t, c.URLs()), " "); ids != "21" {
				t.Errorf("the stream holds ids [%s], want [21]: the restarted sink filled the stream again from --nats-from", ids)
			}
		})
	}
}

// TestSinkRemovalOfAnotherStream: the removal the sink kept is of one
// stream; the operator deletes it and creates it again, and the new one
// is found empty at the same last sequence (here one message, purged):
// that is not the stream the removal emptied, and it is filled from
// --nats-from.
func TestSinkRemovalOfAnotherStream(t *testing.T) {
	c := natstest.Start(t, 1)
	wd, rs, logs := onlyMessageRemoved(t, c.URLs(), Config{})
	removeOnly(t, c, logs)
	rs.stop()
	js := jsConnect(t, c.URLs())
	ctx := ctxT(t)
	if err := js.DeleteStream(ctx, DefaultStream); err != nil {
		t.Fatal(err)
	}
	stream := createStream(t, js, jetstream.StreamConfig{Duplicates: 500 * time.Millisecond})
	if _, err := js.Publish(ctx, DefaultStream+".identity", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if err := wd.commit(ctx, 1); err != nil {
		t.Fatal(err)
	}
	rs = wd.startSink(t, Config{URLs: c.URLs(), From: 20})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	if ids := strings.Join(streamIDs(t, c.URLs()), " "); ids != "20 21" {
		t.Errorf("the stream holds ids [%s], want [20 21]: the new stream was taken for the one the removal emptied", ids)
	}
}

// TestSinkMalformedRemovalStops: the removal the sink keeps is our own
// persistence: a malformed value stops the sink with an error naming the
// key, it is not read as "none" (which would refill an emptied stream).
func TestSinkMalformedRemovalStops(t *testing.T) {
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	if _, err := wd.w.Apply(ctxT(t), &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorSinkNATSRemoved, Value: []byte{1, 2, 3}}}}); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	err := rs.stop()
	if err == nil || !strings.Contains(err.Error(), string(archive.KeyCursorSinkNATSRemoved)) || !errors.Is(err, archive.ErrMalformed) {
		t.Fatalf("Run returned %v, want the malformed %s", err, archive.KeyCursorSinkNATSRemoved)
	}
}
