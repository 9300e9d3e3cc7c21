package natssink

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// nth acts on the n-th message whose subject has prefix, once.
func nth(prefix string, n int64, act natstest.Action) natstest.Decide {
	var seen atomic.Int64
	return func(subject string) natstest.Action {
		if strings.HasPrefix(subject, prefix) && seen.Add(1) == n {
			return act
		}
		return natstest.Forward
	}
}

// TestSinkWindowFaults: the path between the sink and NATS loses one
// publish, repeats one, or loses one acknowledgement, in the middle of a
// full window (the sink publishes 2,000 events of history with a window
// of 512). The stream must hold every event exactly once, in order:
//
//   - a lost publish: the next one, whose Nats-Expected-Last-Sequence is
//     the lost one's stream sequence, is refused, the session fails and
//     resumes after the stream's last message;
//   - a repeated publish: the copy is refused (its expected last sequence
//     and its id are both stale); the refusal fails the session, which
//     resumes after the stream's last message (a refusal is never ignored,
//     even for a publish already acknowledged);
//   - a lost acknowledgement: the next publish's acknowledgement covers it
//     (the chain of expected last sequences): no restart, no timeout.
func TestSinkWindowFaults(t *testing.T) {
	for _, tc := range []struct {
		name       string
		pub, reply natstest.Decide
		restarts   bool
	}{
		{"lost publish", nth(DefaultStream+".", 300, natstest.Drop), nil, true},
		{"repeated publish", nth(DefaultStream+".", 300, natstest.Twice), nil, true},
		{"lost acknowledgement", nil, nth("_INBOX.", 300, natstest.Drop), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := natstest.Start(t, 1)
			proxy := natstest.StartProxy(t, c.Addr(0), tc.pub, tc.reply)
			wd := newWorld(t)
			for range 50 {
				if err := wd.commit(ctxT(t), 40); err != nil {
					t.Fatal(err)
				}
			}
			rs := wd.startSink(t, Config{URLs: proxy.URL, Window: 512, AckTimeout: 5 * time.Second,
				Options: []nats.Option{nats.IgnoreDiscoveredServers()}})
			rs.waitCaughtUp(t, wd, 60*time.Second)
			natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
			st := rs.s.Status()
			if restarted := st.Errors > 0; restarted != tc.restarts {
				t.Errorf("session failures %d (last %q), want a restart: %v", st.Errors, st.LastError, tc.restarts)
			}
			t.Logf("errors %d, last %q", st.Errors, st.LastError)
		})
	}
}

// TestParseAck: the replies a JetStream publish gets, read without
// encoding/json on the common path.
func TestParseAck(t *testing.T) {
	status := nats.Header{"Status": []string{"503"}}
	for _, c := range []struct {
		msg     nats.Msg
		seq     uint64
		dup     bool
		wantErr string
	}{
		{msg: nats.Msg{Data: []byte(`{"stream":"backstream","seq":42}`)}, seq: 42},
		{msg: nats.Msg{Data: []byte(`{"stream":"backstream","domain":"d","seq":7,"duplicate":true}`)}, seq: 7, dup: true},
		{msg: nats.Msg{Data: []byte(`{"stream":"backstream","seq":7,"duplicate": true}`)}, seq: 7, dup: true}, // as nats-server writes it
		{msg: nats.Msg{Data: []byte(`{"stream":"backstream","seq":7,"duplicate":false}`)}, seq: 7},
		{msg: nats.Msg{Data: []byte(`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 9"},"stream":"backstream","seq":0}`)}, wantErr: "wrong last sequence: 9 (code 400, err_code 10071)"},
		{msg: nats.Msg{Header: status}, wantErr: "status 503"},
		{msg: nats.Msg{Data: []byte(`{"stream":"backstream","seq":0}`)}, wantErr: "unreadable"},
		{msg: nats.Msg{Data: []byte(`{"stream":"backstream"}`)}, wantErr: "unreadable"},
		{msg: nats.Msg{}, wantErr: "empty"},
	} {
		r := parseAck(&c.msg)
		switch {
		case c.wantErr != "" && (r.err == nil || !strings.Contains(r.err.Error(), c.wantErr)):
			t.Errorf("%q: err %v, want %q", c.msg.Data, r.err, c.wantErr)
		case c.wantErr == "" && (r.err != nil || r.seq != c.seq || r.dup != c.dup):
			t.Errorf("%q: %+v, want seq %d dup %v", c.msg.Data, r, c.seq, c.dup)
		}
	}
}

// TestSinkStreamFull: the stream refuses new messages (max msgs with
// discard new, as an operator's limit or a full disk would): the sink
// stops at the limit without a gap, shows the state full, the refusal as
// its last error and its lag, probes with one publish per retry, and goes
// on where it stopped once the limit is raised.
func TestSinkStreamFull(t *testing.T) {
	c := natstest.Start(t, 1)
	js := jsConnect(t, c.URLs())
	cfg := jetstream.StreamConfig{Name: DefaultStream, Subjects: []string{DefaultStream + ".>"}, Storage: jetstream.FileStorage,
		Duplicates: DefaultDuplicateWindow, MaxMsgs: 500, Discard: jetstream.DiscardNew}
	if _, err := js.CreateStream(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	wd := newWorld(t)
	for range 10 {
		if err := wd.commit(ctxT(t), 100); err != nil {
			t.Fatal(err)
		}
	}
	var pubs atomic.Int64
	proxy := natstest.StartProxy(t, c.Addr(0), func(subject string) natstest.Action {
		if strings.HasPrefix(subject, DefaultStream+".") {
			pubs.Add(1)
		}
		return natstest.Forward
	}, nil)
	const window = 64
	var logs logBuffer
	rs := wd.startSink(t, Config{URLs: proxy.URL, Window: window, Options: []nats.Option{nats.IgnoreDiscoveredServers()},
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	promtest.Eventually(t, 30*time.Second, "the sink shows the stream full, after 3 refused sessions", func() bool {
		st := rs.s.Status()
		return st.State == StateFull && st.Position == 500 && st.LagEvents == 500 && st.Errors >= 3 &&
			strings.Contains(st.LastError, "maximum messages exceeded")
	})
	// Each retry probes with one publish, not a window of them: the 500
	// stored, at most a window refused in the first session, one a retry.
	if n, sessions := pubs.Load(), int64(rs.s.Status().Errors); n > 500+window+sessions {
		t.Errorf("%d publishes for 500 stored and %d refused sessions: more than one a retry", n, sessions)
	}
	if got := promtest.Value(t, rs.reg, "backstream_nats_state", map[string]string{"state": StateFull}); got != 1 {
		t.Errorf("state full = %v", got)
	}
	if got := promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errFull}); got < 1 {
		t.Errorf("full errors = %v", got)
	}
	// One line for the outage, not one per refused session.
	if n := logs.count("NATS sink session failed"); n != 1 {
		t.Errorf("%d lines \"NATS sink session failed\" over %d refused sessions, want 1:\n%s", n, rs.s.Status().Errors, logs.b.String())
	}
	if d := strings.Join(rs.s.Status().ConfigDiffs, "; "); !strings.Contains(d, "refuse events once reached") {
		t.Errorf("config differences %q do not say the limits refuse events", d)
	}
	cfg.MaxMsgs = -1
	if _, err := js.UpdateStream(ctxT(t), cfg); err != nil {
		t.Fatal(err)
	}
	rs.waitCaughtUp(t, wd, 30*time.Second)
	if st := rs.s.Status(); st.State != StatePublishing {
		t.Errorf("state %s after the limit was raised", st.State)
	}
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}
