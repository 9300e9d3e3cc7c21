package subscribe

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
)

// fillFlushed commits n events and flushes them to sstables, so archive
// iterators show up in Pebble's TableIters.
func (h *harness) fillFlushed(n int) {
	h.t.Helper()
	for i := 0; i < n; i += 2000 {
		h.commit(genEvents(h.t, i, min(2000, n-i), 50)...)
	}
	if err := h.store.DB().Flush(); err != nil {
		h.t.Fatal(err)
	}
}

// tableIters is the number of sstable iterators open in the store.
func (h *harness) tableIters() int64 { return h.store.DB().Metrics().TableIters }

// subsSnapshot is the connected subscribers.
func (h *harness) subsSnapshot() []*subscriber {
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	var out []*subscriber
	for s := range h.srv.subs {
		out = append(out, s)
	}
	return out
}

// waitStill waits until no subscriber's position has moved for a while:
// every one is blocked in a write or caught up.
func (h *harness) waitStill(within time.Duration) {
	h.t.Helper()
	var last []uint64
	var since time.Time
	promtest.Eventually(h.t, within, "subscriber positions to stop moving", func() bool {
		var pos []uint64
		for _, s := range h.subsSnapshot() {
			pos = append(pos, s.position.Load())
		}
		if fmt.Sprint(pos) != fmt.Sprint(last) {
			last, since = pos, time.Now()
			return false
		}
		return time.Since(since) > 300*time.Millisecond
	})
}

// TestStalledSubscriberClosed: a client that stops reading is closed once
// a write has been blocked for StallTimeout, however little it lags (the
// archive holds fewer than SlowLag events, so the too_slow rule never
// fires), with 1008 and the reason, counted as stalled. A client that reads
// the same stream is not touched.
func TestStalledSubscriberClosed(t *testing.T) {
	const stall = time.Second
	h := newHarness(t, harnessOpts{cfg: Config{StallTimeout: stall, WriteTick: 50 * time.Millisecond}})
	h.fillFlushed(12000)
	reader := h.dial("?cursor=0", nil)
	defer reader.Close()
	silent := h.dialSmall("?cursor=0")
	defer silent.Close()
	t0 := time.Now()
	readUntil(t, reader, 12000)

	promtest.Eventually(t, 10*time.Second, "a stalled disconnect", func() bool {
		return metricValue(h.m.disconnects.WithLabelValues(ReasonStalled)) == 1
	})
	took := time.Since(t0)
	t.Logf("the silent subscriber was closed %v after it connected (stall timeout %v)", took, stall)
	if got := metricValue(h.m.disconnects.WithLabelValues(ReasonTooSlow)); got != 0 {
		t.Errorf("too_slow disconnects %v, want 0: the lag is far below SlowLag", got)
	}
	// The silent client, reading at last, finds events and then the close.
	var closeErr error
	for closeErr == nil {
		_ = silent.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _, closeErr = silent.ReadMessage()
	}
	var ce *websocket.CloseError
	if !asCloseError(closeErr, &ce) || (ce.Code != closePolicy && ce.Code != websocket.CloseAbnormalClosure) {
		t.Errorf("silent client: %v, want close 1008 or the socket closed", closeErr)
	}
	if h.srv.Stats().Subscribers != 1 {
		t.Errorf("subscribers %d, want the reader alone", h.srv.Stats().Subscribers)
	}
}

// TestReplayIteratorsReleasedWhileBlocked: subscribers replaying the
// archive into clients that do not read hold no Pebble iterator while their
// writes are blocked (an iterator pins sstables and memory); they read again
// from their cursor once the client reads, losing nothing.
func TestReplayIteratorsReleasedWhileBlocked(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 64 << 10}) // the archive, not the live log, serves
	h.fillFlushed(12000)
	var silent []*websocket.Conn
	for i := 0; i < 5; i++ {
		silent = append(silent, h.dialSmall("?cursor=0"))
	}
	h.waitStill(20 * time.Second)
	for _, s := range h.subsSnapshot() {
		if s.position.Load() > 12000 {
			t.Fatalf("a silent subscriber is at %d: it never blocked", s.position.Load())
		}
	}
	if n := h.tableIters(); n != 0 {
		t.Errorf("%d sstable iterators open while every replay is blocked in a write, want 0", n)
	}
	// Reading now, each gets the whole archive, in order.
	for i, c := range silent {
		got, err := readUntilErr(c, 12000)
		if err == nil {
			err = checkContiguous(got, 1, 12000)
		}
		if err != nil {
			t.Errorf("subscriber %d: %v", i, err)
		}
		c.Close()
	}
}

// readingReplays counts, in a dump of every goroutine, the subscribers
// doing replay's work — reading the archive, rendering an old live-log
// entry, or writing what the socket takes at once, all of which only a
// reader slot's holder may do — or resting a slot. Being anywhere else in
// a replay (waiting for a turn, blocked in a write, on the way out after
// one) is not work.
func readingReplays(buf []byte) int {
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		trying := strings.Contains(g, "sockConn).tryWrite(")
		working := strings.Contains(g, "subscriber).readBatch(") || strings.Contains(g, "subscriber).sendLive(") || trying
		blocked := strings.Contains(g, "subscriber).write(") && !trying
		if strings.Contains(g, "readerSlots.release(") || (working && !blocked) {
			n++
		}
	}
	return n
}

// TestReplayReadersCapped: twelve subscribers replay at once — from the
// archive, or from old entries of the live log — but no more than
// ReplayReaders (here one) read at any moment (sampled from goroutine
// dumps), so replay's CPU is bounded whatever the number of replaying
// clients; and every one of them gets the whole archive.
func TestReplayReadersCapped(t *testing.T) {
	const readers, subs, n = 1, 12, 12000
	// The sampler must run beside the replays to see one at work: with a
	// single P it runs only when they all wait, and sees none (go test
	// -cpu 1 failed 6 runs in 20 so).
	if runtime.GOMAXPROCS(0) < 2 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	}
	for _, tc := range []struct {
		name      string
		liveBytes int64
	}{{"archive", 64 << 10}, {"live-log", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			// Events an hour old: catching up, whichever log serves them.
			old := func() time.Time { return time.Now().Add(-time.Hour) }
			h := newHarness(t, harnessOpts{liveBytes: tc.liveBytes, now: old, cfg: Config{ReplayReaders: readers}})
			h.fillFlushed(n)
			// A round of replays is sampled; a round in which no sample
			// happened to catch a replay at work proves nothing either way
			// and is run again (at most 5 rounds; the bound is checked over
			// every sample of every round).
			var m [2]int
			for round := 0; round < 5 && m[0] == 0; round++ {
				r := replayRound(t, h, subs, n)
				m = [2]int{max(m[0], r[0]), m[1] + r[1]}
			}
			t.Logf("at most %d subscribers replaying at once over %d samples (%d replaying, ReplayReaders %d)", m[0], m[1], subs, readers)
			if m[0] > readers || m[0] == 0 {
				t.Errorf("%d subscribers replaying at once, want 1..%d", m[0], readers)
			}
		})
	}
}

// replayRound has subs subscribers replay the n events of h from cursor 0,
// each getting all of them, while goroutine dumps are sampled: the most
// subscribers seen reading at once, and the samples taken.
func replayRound(t *testing.T, h *harness, subs int, n uint64) [2]int {
	t.Helper()
	stop := make(chan struct{})
	maxReading := make(chan [2]int, 1)
	go func() {
		buf := make([]byte, 4<<20)
		var m, samples int
		for {
			select {
			case <-stop:
				maxReading <- [2]int{m, samples}
				return
			case <-time.After(time.Millisecond):
			}
			m = max(m, readingReplays(buf))
			samples++
		}
	}()
	var wg sync.WaitGroup
	errs := make([]error, subs)
	for i := 0; i < subs; i++ {
		c := h.dial("?cursor=0", nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			got, err := readUntilErr(c, n)
			if err == nil {
				err = checkContiguous(got, 1, n)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	close(stop)
	for i, err := range errs {
		if err != nil {
			t.Errorf("subscriber %d: %v", i, err)
		}
	}
	return <-maxReading
}

// TestHelloTimeout: a requireHello client that never says hello is closed
// after HelloTimeout with 1008 and the reason, counted; one that does is
// served.
func TestHelloTimeout(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: Config{HelloTimeout: 300 * time.Millisecond}})
	mute := h.dial("?requireHello=true", nil)
	defer mute.Close()
	polite := h.dial("?requireHello=true", nil)
	defer polite.Close()
	if err := polite.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{}}`)); err != nil {
		t.Fatal(err)
	}
	_, _, err := readEvent(t, mute, 5*time.Second)
	var ce *websocket.CloseError
	if !asCloseError(err, &ce) || ce.Code != closePolicy || !strings.Contains(ce.Text, "options_update") {
		t.Fatalf("mute client: %v, want close 1008 naming the missing options_update", err)
	}
	promtest.Eventually(t, 5*time.Second, "a hello_timeout disconnect", func() bool {
		return metricValue(h.m.disconnects.WithLabelValues(ReasonHelloTimeout)) == 1
	})
	first, _ := h.commit(genEvents(t, 0, 3, 3)...)
	if ev, _, err := readEvent(t, polite, 5*time.Second); err != nil || ev.Cursor != first {
		t.Errorf("polite client: %v %v, want event %d", ev.Cursor, err, first)
	}
}

// TestOutputBufferBounded: a live subscriber's output buffer never grows
// past its reserved capacity, whatever a live batch holds: 512 events of
// ~6 KB each in one commit (3 MB in one live-log read) and events of 100 KB
// and 300 KB, which are written from the live log's frame. The client gets
// every event intact.
func TestOutputBufferBounded(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	c := h.dial("", nil)
	defer c.Close()
	subs := h.subsSnapshot()
	if len(subs) != 1 {
		t.Fatalf("%d subscribers", len(subs))
	}
	sub := subs[0]
	want := outputCapacity(h.srv.cfg.FlushBytes) // not cap(sub.out): its goroutine writes sub.out
	big := func(i, size int) archive.Event {
		rec := makeRecord(t, "app.bsky.feed.post", map[string]any{"$type": "app.bsky.feed.post", "text": strings.Repeat("x", size), "createdAt": "2024-11-05T10:11:12.345Z"})
		return archive.Event{DID: didOf(i % 7), Source: archive.SourceLive, UpstreamSeq: int64(i + 1), Kind: archive.KindCreate,
			Collection: rec.coll, RKey: fmt.Sprintf("3k%011d", i), Rev: fmt.Sprintf("3l%011d", i+1), Record: rec.cbor, CID: rec.cid}
	}
	var evs []archive.Event
	for i := 0; i < 512; i++ {
		evs = append(evs, big(i, 6000))
	}
	evs[100], evs[300] = big(100, 100_000), big(300, 300_000)
	first, last := h.commit(evs...)
	n := 0
	for seq := first; seq <= last; seq++ {
		ev, b, err := readEvent(t, c, 10*time.Second)
		if err != nil || ev.Cursor != seq {
			t.Fatalf("event %d: cursor %d, %v", seq, ev.Cursor, err)
		}
		n += len(b)
	}
	c.Close()
	promtest.Eventually(t, 5*time.Second, "the subscriber to end", func() bool { return len(h.subsSnapshot()) == 0 })
	h.srv.wg.Wait() // its goroutine has returned: its buffer is ours to read
	if got := cap(sub.out); got != want {
		t.Errorf("output buffer capacity %d after %d bytes of live events, want it kept at %d", got, n, want)
	}
}

// TestSubscriberCaps: beyond MaxSubscribers a handshake gets 503, beyond
// MaxSubscribersPerIP 429, beyond the BufferBudget 503 — each with a JSON
// error and Retry-After, counted by reason — and a place freed is taken
// again. X-Forwarded-For counts only when TrustForwardedFor says so.
func TestSubscriberCaps(t *testing.T) {
	try := func(t *testing.T, h *harness, hdr http.Header) (int, map[string]any, http.Header) {
		t.Helper()
		c, resp, err := websocket.DefaultDialer.Dial(h.wsURL(""), hdr)
		if err == nil {
			t.Cleanup(func() { c.Close() })
			return http.StatusSwitchingProtocols, nil, resp.Header
		}
		if resp == nil {
			t.Fatalf("dial: %v", err)
		}
		var body map[string]any
		b, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(b, &body)
		return resp.StatusCode, body, resp.Header
	}
	expect := func(t *testing.T, h *harness, hdr http.Header, code int, errName, reason string) {
		t.Helper()
		before := metricValue(h.m.refused.WithLabelValues(reason))
		got, body, rh := try(t, h, hdr)
		if got != code || body["error"] != errName || rh.Get("Retry-After") == "" {
			t.Fatalf("got %d %v (Retry-After %q), want %d %s", got, body, rh.Get("Retry-After"), code, errName)
		}
		if after := metricValue(h.m.refused.WithLabelValues(reason)); after != before+1 {
			t.Errorf("refused{%s} %v → %v, want +1", reason, before, after)
		}
	}
	xff := func(ip string) http.Header { return http.Header{"X-Forwarded-For": {"203.0.113.9, " + ip}} }

	t.Run("global", func(t *testing.T) {
		h := newHarness(t, harnessOpts{cfg: Config{MaxSubscribers: 2}})
		for i := 0; i < 2; i++ {
			h.dial("", nil)
		}
		expect(t, h, nil, http.StatusServiceUnavailable, "TooManySubscribers", refusedMaxSubscribers)
	})
	t.Run("per-ip", func(t *testing.T) {
		h := newHarness(t, harnessOpts{cfg: Config{MaxSubscribersPerIP: 2}})
		a := h.dial("", nil)
		h.dial("", xff("198.51.100.1")) // not trusted: still 127.0.0.1
		expect(t, h, xff("198.51.100.2"), http.StatusTooManyRequests, "TooManySubscribersFromIP", refusedMaxPerIP)
		a.Close()
		promtest.Eventually(t, 5*time.Second, "a freed place to be taken", func() bool {
			code, _, _ := try(t, h, nil)
			return code == http.StatusSwitchingProtocols
		})
	})
	t.Run("per-ip-forwarded", func(t *testing.T) {
		h := newHarness(t, harnessOpts{cfg: Config{MaxSubscribersPerIP: 1, TrustForwardedFor: true}})
		h.dial("", xff("198.51.100.1"))
		h.dial("", xff("198.51.100.2"))
		h.dial("", nil)
		expect(t, h, xff("198.51.100.1"), http.StatusTooManyRequests, "TooManySubscribersFromIP", refusedMaxPerIP)
	})
	t.Run("buffer-budget", func(t *testing.T) {
		h := newHarness(t, harnessOpts{cfg: Config{BufferBudget: 3 * bufferReservation(DefaultFlushBytes)}})
		for i := 0; i < 3; i++ {
			h.dial("", nil)
		}
		if got := metricValue(h.m.reserved); got != float64(3*bufferReservation(DefaultFlushBytes)) {
			t.Errorf("reserved bytes %v", got)
		}
		expect(t, h, nil, http.StatusServiceUnavailable, "BufferBudgetExhausted", refusedBufferBudget)
	})
}

// TestClientMessageRate: a client flooding options_update messages (or
// pings) is closed with 1008 once past its burst, counted as
// too_many_messages; one within the budget keeps its connection.
func TestClientMessageRate(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: Config{MessageRate: 2, MessageBurst: 5}})
	update := []byte(`{"type":"options_update","payload":{"wantedCollections":["app.bsky.feed.post"]}}`)
	for _, flood := range []func(c *websocket.Conn) error{
		func(c *websocket.Conn) error { return c.WriteMessage(websocket.TextMessage, update) },
		func(c *websocket.Conn) error {
			return c.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
		},
	} {
		c := h.dial("", nil)
		for i := 0; i < 50; i++ {
			if flood(c) != nil {
				break // closed under us
			}
		}
		var err error
		for err == nil {
			_, _, err = readEvent(t, c, 5*time.Second)
		}
		var ce *websocket.CloseError
		if !asCloseError(err, &ce) || ce.Code != closePolicy {
			t.Errorf("flooding client: %v, want close 1008", err)
		}
		c.Close()
	}
	promtest.Eventually(t, 5*time.Second, "two too_many_messages disconnects", func() bool {
		return metricValue(h.m.disconnects.WithLabelValues(ReasonTooManyMsgs)) == 2
	})
	calm := h.dial("", nil)
	defer calm.Close()
	for i := 0; i < 3; i++ {
		if err := calm.WriteMessage(websocket.TextMessage, update); err != nil {
			t.Fatal(err)
		}
	}
	first, _ := h.commit(genEvents(t, 0, 1, 1)...) // event 0 is a post
	if ev, _, err := readEvent(t, calm, 5*time.Second); err != nil || ev.Cursor != first {
		t.Errorf("calm client: %v %v, want event %d", ev.Cursor, err, first)
	}
}

// lockedBuffer is a log sink for tests.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestBadUpdateLogIsShort: an options_update of 1.9 MB with an invalid DID
// closes the connection with the reason, and the log line that records it
// stays a few hundred bytes.
func TestBadUpdateLogIsShort(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	var logs lockedBuffer
	h.srv.log = slog.New(slog.NewJSONHandler(&logs, nil))
	c := h.dial("", nil)
	defer c.Close()
	bad := fmt.Sprintf(`{"type":"options_update","payload":{"wantedDids":["did:%s"]}}`, strings.Repeat("é", 950_000))
	if err := c.WriteMessage(websocket.TextMessage, []byte(bad)); err != nil {
		t.Fatal(err)
	}
	_, _, err := readEvent(t, c, 5*time.Second)
	var ce *websocket.CloseError
	if !asCloseError(err, &ce) || ce.Code != closePolicy {
		t.Fatalf("bad update: %v, want close 1008", err)
	}
	promtest.Eventually(t, 5*time.Second, "the disconnect log line", func() bool {
		return strings.Contains(logs.String(), ReasonBadOptions)
	})
	for _, line := range strings.Split(logs.String(), "\n") {
		if len(line) > 1024 {
			t.Errorf("a log line of %d bytes: %.200s…", len(line), line)
		}
	}
}

func TestClientIP(t *testing.T) {
	for _, tc := range []struct {
		remote string
		xff    []string
		trust  bool
		want   string
	}{
		{"127.0.0.1:5000", nil, false, "127.0.0.1"},
		{"127.0.0.1:5000", []string{"198.51.100.1"}, false, "127.0.0.1"},
		{"127.0.0.1:5000", []string{"198.51.100.1"}, true, "198.51.100.1"},
		{"127.0.0.1:5000", []string{"1.1.1.1, 198.51.100.1"}, true, "198.51.100.1"},
		{"127.0.0.1:5000", []string{"1.1.1.1", "198.51.100.2"}, true, "198.51.100.2"},
		{"127.0.0.1:5000", []string{"garbage"}, true, "127.0.0.1"},
		{"[::1]:5000", nil, false, "::/64"},
		{"[2001:db8::1]:5000", nil, false, "2001:db8::/64"},
		{"[2001:db8::2]:5000", nil, false, "2001:db8::/64"}, // one /64, one client
		{"127.0.0.1:5000", []string{"2001:db8:0:1::9"}, true, "2001:db8:0:1::/64"},
	} {
		r := &http.Request{RemoteAddr: tc.remote, Header: http.Header{}}
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := clientIP(r, tc.trust); got != tc.want {
			t.Errorf("clientIP(%q, %q, trust=%v) = %q, want %q", tc.remote, tc.xff, tc.trust, got, tc.want)
		}
	}
}

// TestClientMessageTooBig: one client message holds at most 2 MiB as the
// server reads it. Beyond, the connection is closed with 1009 and counted
// as too_big, whether the message came plain or deflated (a few KB on the
// wire that inflate to 3 MiB), text or binary. A message of exactly 2 MiB
// is read and applied.
func TestClientMessageTooBig(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	update := func(size int) []byte { // an options_update for didOf(1), padded with spaces to size bytes
		head := `{"type":"options_update","payload":{"wantedDids":["` + didOf(1) + `"]}`
		return []byte(head + strings.Repeat(" ", size-len(head)-1) + "}")
	}
	over := update(3 << 20)
	var wire atomic.Int64
	for _, tc := range []struct {
		name string
		dial func() *websocket.Conn
		typ  int
	}{
		{"plain", func() *websocket.Conn { return h.dial("", nil) }, websocket.TextMessage},
		{"deflated", func() *websocket.Conn {
			c, _ := h.dialDeflate("", nil, &wire)
			c.EnableWriteCompression(true)
			return c
		}, websocket.TextMessage},
		{"deflated binary", func() *websocket.Conn {
			c, _ := h.dialDeflate("", nil, &wire)
			c.EnableWriteCompression(true)
			return c
		}, websocket.BinaryMessage},
	} {
		c := tc.dial()
		// The server stops reading at the cap and closes: the rest of a
		// plain message may meet a reset, after its close frame arrived.
		if err := c.WriteMessage(tc.typ, over); err != nil && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("%s: %v", tc.name, err)
		}
		var err error
		for err == nil {
			_, _, err = readEvent(t, c, 10*time.Second)
		}
		var ce *websocket.CloseError
		if !asCloseError(err, &ce) || ce.Code != closeTooBig {
			t.Errorf("%s: a %d-byte message: %v, want close 1009", tc.name, len(over), err)
		}
		c.Close()
	}
	promtest.Eventually(t, 5*time.Second, "three too_big disconnects", func() bool {
		return metricValue(h.m.disconnects.WithLabelValues(ReasonTooBig)) == 3
	})

	c, _ := h.dialDeflate("", nil, &wire)
	defer c.Close()
	c.EnableWriteCompression(true)
	if err := c.WriteMessage(websocket.TextMessage, update(maxClientMessage)); err != nil {
		t.Fatal(err)
	}
	// The server reads a client's frames in order: its pong says it has
	// read the update.
	pong := make(chan struct{})
	c.SetPongHandler(func(string) error { close(pong); return nil })
	if err := c.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	evs := make(chan wireEvent, 1)
	errs := make(chan error, 1)
	go func() {
		ev, _, err := readEvent(t, c, 10*time.Second)
		evs <- ev
		errs <- err
	}()
	promtest.Eventually(t, 10*time.Second, "the pong", func() bool {
		select {
		case <-pong:
			return true
		default:
			return false
		}
	})
	h.commit(genEvents(t, 0, 3, 3)...) // one event each of didOf(0), didOf(1), didOf(2)
	if ev, err := <-evs, <-errs; err != nil || ev.DID != didOf(1) {
		t.Fatalf("after a %d-byte update: %s %v, want an event of %s", maxClientMessage, ev.DID, err, didOf(1))
	}
}

// admissionHeld is what the admission holds: subscribers counted, client
// addresses with a count, bytes reserved.
func (h *harness) admissionHeld() (total, addrs int, reserved int64) {
	h.srv.mu.Lock()
	defer h.srv.mu.Unlock()
	return h.srv.adm.total, len(h.srv.adm.perIP), h.srv.adm.reserved
}

// TestPerIPCountsForgotten: the per-address counts hold only the addresses
// with a subscriber connected now. Months of clients coming and going are
// millions of addresses; each one's count is dropped when its last
// subscriber leaves — a closed subscriber, one refused at its address's cap
// (never counted) and one whose upgrade failed after it was admitted alike
// — and with it the bytes it reserved, its filter's included.
func TestPerIPCountsForgotten(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: Config{MaxSubscribersPerIP: 1, TrustForwardedFor: true}})
	const clients = 300
	xff := func(i int) http.Header {
		return http.Header{"X-Forwarded-For": {fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250)}}
	}
	for i := range clients {
		hdr := xff(i)
		q := "?wantedDids=" + didOf(i) // a filter, reserved with the buffers
		switch i % 3 {
		case 0: // connects, then a second one from its address is refused
			c := h.dial(q, hdr)
			if _, resp, err := websocket.DefaultDialer.Dial(h.wsURL(q), hdr); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
				t.Fatalf("a second subscriber from %s: %v, want 429", hdr.Get("X-Forwarded-For"), err)
			}
			c.Close()
		case 1: // connects and leaves
			h.dial(q, hdr).Close()
		case 2: // admitted, then the upgrade fails (no Sec-WebSocket-Key)
			req, err := http.NewRequest(http.MethodGet, h.url("/subscribe"+q), nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = hdr.Clone()
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("an upgrade without its key: %d, want 400", resp.StatusCode)
			}
		}
	}
	promtest.Eventually(t, 10*time.Second, "every subscriber to leave", func() bool {
		total, _, _ := h.admissionHeld()
		return total == 0
	})
	if total, addrs, reserved := h.admissionHeld(); addrs != 0 || reserved != 0 {
		t.Fatalf("after %d client addresses came and went (%d subscribers now): the admission holds counts for %d addresses and %d bytes reserved; want none",
			clients, total, addrs, reserved)
	}
}
