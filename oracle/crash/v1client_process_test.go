package crash_test

// TestV1ClientProcess: the real binary in steady state, read by v1-style
// Jetstream clients (gorilla websocket readers speaking Jetstream's query
// parameters and messages, as the npm and Go clients do):
//
//   - parameters read as v1 reads them: maxMessageSizeBytes=-1 and
//     compress=1 are accepted (no limit, no zstd), not refused; an
//     options_update with a negative size keeps the connection;
//   - permessage-deflate offered is accepted, and the inflated stream is
//     byte-for-byte the plain one;
//   - time_us strictly increases along the stream, also across a restart,
//     and a client resuming by the time_us of the last event it saw gets
//     exactly that event again (v1's inclusive rule), then the rest;
//   - a cursor-0 replay of an archive that fits in the live log counts as
//     replay in backstream_subscribe_events_sent_total, adds nothing to
//     backstream_live_delivery_seconds, and /status says replaying while a
//     client is stuck in it; events followed at the tip are live.

import (
	"context"
	"encoding/json"
	"fmt"
	gonet "net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// v1Event is what a v1 client reads of an event.
type v1Event struct {
	DID    string `json:"did"`
	TimeUS int64  `json:"time_us"`
	Kind   string `json:"kind"`
	Cursor uint64 `json:"cursor"`
	raw    []byte
}

// wireCounter counts the bytes a client reads off its socket.
type wireCounter struct {
	gonet.Conn
	n *atomic.Int64
}

func (c wireCounter) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// v1Dial connects like a v1 client; deflate offers permessage-deflate.
// wire, when not nil, counts the bytes read off the socket.
func v1Dial(t *testing.T, listen, query string, deflate bool, wire ...*atomic.Int64) (*websocket.Conn, *http.Response) {
	t.Helper()
	d := websocket.Dialer{EnableCompression: deflate, HandshakeTimeout: 10 * time.Second}
	if len(wire) > 0 {
		d.NetDialContext = func(ctx context.Context, network, addr string) (gonet.Conn, error) {
			c, err := (&gonet.Dialer{}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return wireCounter{c, wire[0]}, nil
		}
	}
	c, resp, err := d.Dial("ws://"+listen+"/subscribe"+query, nil)
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		t.Fatalf("v1 client %s: %v (HTTP %d)", query, err, code)
	}
	return c, resp
}

// v1Read reads n text events.
func v1Read(t *testing.T, c *websocket.Conn, n int) []v1Event {
	t.Helper()
	var out []v1Event
	for len(out) < n {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		typ, b, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(out), n, err)
		}
		var ev v1Event
		if typ != websocket.TextMessage || json.Unmarshal(b, &ev) != nil || ev.DID == "" || ev.TimeUS == 0 {
			t.Fatalf("message %d (type %d) is not a v1 event: %.200s", len(out), typ, b)
		}
		ev.raw = b
		out = append(out, ev)
	}
	return out
}

// strictlyIncreasing checks cursors and time_us both strictly increase.
func strictlyIncreasing(t *testing.T, what string, evs []v1Event) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		if evs[i].Cursor <= evs[i-1].Cursor || evs[i].TimeUS <= evs[i-1].TimeUS {
			t.Fatalf("%s: event %d (cursor %d, time_us %d) after (cursor %d, time_us %d)",
				what, i, evs[i].Cursor, evs[i].TimeUS, evs[i-1].Cursor, evs[i-1].TimeUS)
		}
	}
}

// subscribeStatus is /status's subscribe section.
type subscribeStatus struct {
	Subscribers   int     `json:"subscribers"`
	Replaying     int     `json:"replaying"`
	TipSeq        uint64  `json:"tip_seq"`
	TipAgeSeconds float64 `json:"tip_age_seconds"`
}

func subStatus(t *testing.T, p *crash.Proc) subscribeStatus {
	t.Helper()
	resp, err := http.Get("http://" + p.Listen + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st struct {
		Subscribe subscribeStatus `json:"subscribe"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st.Subscribe
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

const (
	sentReplay = `backstream_subscribe_events_sent_total{path="replay"}`
	sentLive   = `backstream_subscribe_events_sent_total{path="live"}`
	latencyN   = `backstream_live_delivery_seconds_count`
)

func TestV1ClientProcess(t *testing.T) {
	crash.Binary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 100, RecordsMean: 200, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	// The relay is silent until the test drives traffic: a short capture wait.
	h := crash.New(t, net, crash.Options{Args: append(append([]string(nil), serveArgs...), "--capture-wait", "500ms")})
	p := h.Start()
	tip := h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute).Archive.TipSeq
	if tip < 1000 {
		t.Fatalf("archive tip %d: the world is too small for this test", tip)
	}
	// Every archived event is over a second old: a replay of it is a replay.
	waitFor(t, 30*time.Second, "the tip to be a second old", func() bool { return subStatus(t, p).TipAgeSeconds > 1.2 })
	m0 := metrics(t, p)

	// A plain client, and a v1 client with a negative size, compress=1 and
	// deflate offered: both accepted, the same bytes.
	plain, _ := v1Dial(t, p.Listen, "?cursor=0", false)
	want := v1Read(t, plain, int(tip))
	plain.Close()
	var wire atomic.Int64
	v1, resp := v1Dial(t, p.Listen, "?cursor=0&maxMessageSizeBytes=-1&compress=1", true, &wire)
	if ext := resp.Header.Get("Sec-WebSocket-Extensions"); !strings.Contains(ext, "permessage-deflate") {
		t.Fatalf("deflate offered, handshake extensions %q", ext)
	}
	got := v1Read(t, v1, int(tip))
	v1.Close()
	for i := range want {
		if string(got[i].raw) != string(want[i].raw) {
			t.Fatalf("event %d through deflate:\n got %.300s\nwant %.300s", i, got[i].raw, want[i].raw)
		}
	}
	jsonBytes := 0
	for _, ev := range want {
		jsonBytes += len(ev.raw)
	}
	t.Logf("deflate: %d bytes of JSON took %d bytes on the wire (%.0f%%)", jsonBytes, wire.Load(), 100*float64(wire.Load())/float64(jsonBytes))
	if wire.Load() > int64(jsonBytes)*85/100 {
		t.Fatalf("deflate negotiated, yet %d bytes of JSON took %d on the wire", jsonBytes, wire.Load())
	}
	strictlyIncreasing(t, "full replay", want)
	if want[0].Cursor != 1 || want[len(want)-1].Cursor != tip {
		t.Fatalf("replay cursors %d..%d, want 1..%d", want[0].Cursor, want[len(want)-1].Cursor, tip)
	}
	// The server counts a flush once its write returns, which may be just
	// after the client has read it.
	waitFor(t, 10*time.Second, "the replays counted", func() bool {
		m := metrics(t, p)
		return m[sentReplay]+m[sentLive]-m0[sentReplay]-m0[sentLive] >= float64(2*tip)
	})
	m1 := metrics(t, p)
	if r, l, n := m1[sentReplay]-m0[sentReplay], m1[sentLive]-m0[sentLive], m1[latencyN]-m0[latencyN]; r != float64(2*tip) || l != 0 || n != 0 {
		t.Fatalf("two cursor-0 replays of %d events: replay %v, live %v, latency samples %v; want %d, 0, 0", tip, r, l, n, 2*tip)
	}
	t.Logf("cursor-0 replay of %d events from the live log: %d counted as replay, none live, no latency sample", tip, 2*tip)

	// A cursor-0 client that does not read: /status counts it replaying.
	silent, err := dialSilent("ws://" + p.Listen + "/subscribe?cursor=0")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "/status to count the stuck replay", func() bool { return subStatus(t, p).Replaying == 1 })
	silent.Close()
	waitFor(t, 30*time.Second, "the stuck subscriber to go", func() bool { return subStatus(t, p).Subscribers == 0 })

	// Resume by time_us: exactly the event last seen, then the rest.
	for _, k := range []int{0, len(want) / 2, len(want) - 2} {
		c, _ := v1Dial(t, p.Listen, fmt.Sprintf("?cursor=%d", want[k].TimeUS), false)
		again := v1Read(t, c, len(want)-k)
		c.Close()
		for i, ev := range again {
			if ev.Cursor != want[k+i].Cursor {
				t.Fatalf("resumed at the time_us of cursor %d: event %d has cursor %d, want %d", want[k].Cursor, i, ev.Cursor, want[k+i].Cursor)
			}
		}
	}

	// Live: a requireHello follower whose hello carries a negative size
	// (no limit, kept connected) gets fresh events, counted live.
	follow, _ := v1Dial(t, p.Listen, "?requireHello=true", true)
	defer follow.Close()
	if err := follow.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{"maxMessageSizeBytes":-5}}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the follower", func() bool { return subStatus(t, p).Subscribers == 1 })
	m2 := metrics(t, p)
	traffic := crash.StartTraffic(net, world.TrafficBasic, 17, 100)
	live := v1Read(t, follow, 60)
	if err := traffic.Stop(); err != nil {
		t.Fatal(err)
	}
	strictlyIncreasing(t, "live", append(want[len(want)-1:], live...))
	waitFor(t, 10*time.Second, "live deliveries counted", func() bool { return metrics(t, p)[sentLive]-m2[sentLive] >= 60 })
	m3 := metrics(t, p)
	if r, l, n := m3[sentReplay]-m2[sentReplay], m3[sentLive]-m2[sentLive], m3[latencyN]-m2[latencyN]; r != 0 || n != l {
		t.Fatalf("live phase: replay %v (want 0), live %v, latency samples %v (want one per live delivery)", r, l, n)
	}

	// Restart: time_us keeps increasing from the tip's, and a time cursor
	// taken before the restart still names exactly its event.
	follow.Close()
	preTip := subStatus(t, p).TipSeq
	if err := p.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	p = h.Start()
	h.WaitPhase(p, crash.PhaseSteady, 2*time.Minute)
	before := live[len(live)-1]
	resume, _ := v1Dial(t, p.Listen, fmt.Sprintf("?cursor=%d", before.TimeUS), true)
	defer resume.Close()
	if ev := v1Read(t, resume, 1)[0]; ev.Cursor != before.Cursor || string(ev.raw) != string(before.raw) {
		t.Fatalf("after the restart, resuming at time_us %d gave cursor %d, want %d", before.TimeUS, ev.Cursor, before.Cursor)
	}
	traffic = crash.StartTraffic(net, world.TrafficBasic, 18, 100)
	var after []v1Event
	for len(after) == 0 || after[len(after)-1].Cursor < preTip+30 {
		after = append(after, v1Read(t, resume, 1)...)
	}
	if err := traffic.Stop(); err != nil {
		t.Fatal(err)
	}
	strictlyIncreasing(t, "across the restart", append([]v1Event{before}, after...))
	if err := p.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("time_us strictly increasing over %d replayed, %d live and %d events read after the restart (archived ones up to %d, then new ones); resumes by time_us exact", len(want), len(live), len(after), preTip)
}
