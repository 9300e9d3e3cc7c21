package subscribe

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/klauspost/compress/zstd"
)

// A panic in one subscriber's code (a bug) ends that connection alone, with
// 1011 and counted: the process, the archive and every other subscriber go
// on. The subscriber runs on goroutines of its own, where nothing else would
// recover it. The panics are provoked by taking away something the serve
// loop (a zstd subscriber's encoder) and the read loop (the channel the
// first options_update closes) use.
func TestSubscriberPanicEndsOnlyItsConnection(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	const n = 50
	h.commit(genEvents(t, 0, n, 5)...)

	t.Run("serve", func(t *testing.T) {
		plain := h.srv.codecs.plain
		h.srv.codecs.plain = nil // no subscriber is connected: nothing reads it
		c := h.dial("?cursor=0&compress=true", nil)
		expectInternalErrorClose(t, c)
		h.waitSubscribers(0)
		h.srv.codecs.plain = plain // every subscriber gone (under the server's lock): nothing reads it
	})
	if got := metricValue(h.m.panics); got != 1 {
		t.Fatalf("backstream_subscribe_panics_total %v after the serve loop's panic, want 1", got)
	}

	t.Run("read", func(t *testing.T) {
		c := h.dial("?cursor=0", nil)
		defer c.Close()
		readJSONStream(t, c, n)
		h.srv.mu.Lock()
		for sub := range h.srv.subs {
			sub.helloCh = nil // read under the same lock, by the read loop's filter reservation
		}
		h.srv.mu.Unlock()
		if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{}}`)); err != nil {
			t.Fatal(err)
		}
		expectInternalErrorClose(t, c)
	})
	if got := metricValue(h.m.panics); got != 2 {
		t.Fatalf("backstream_subscribe_panics_total %v after the read loop's panic, want 2", got)
	}

	// The server goes on serving.
	c := h.dial("?cursor=0", nil)
	defer c.Close()
	if got := readJSONStream(t, c, n); len(got) != n {
		t.Fatalf("after the panics a subscriber read %d events, want %d", len(got), n)
	}
}

// expectInternalErrorClose reads c until it ends and wants a 1011 close.
func expectInternalErrorClose(t *testing.T, c *websocket.Conn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		_, _, err := c.ReadMessage()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if !asCloseError(err, &ce) || ce.Code != closeInternalError || !strings.Contains(ce.Text, "internal error") {
			t.Fatalf("the connection ended with %v, want a close %d (internal error)", err, closeInternalError)
		}
		return
	}
}

// TestSharedFramePanicLeavesNoEmptyFrame: a panic while a live event's
// shared zstd form is made (once, by the first zstd subscriber to send it)
// ends that subscriber with 1011, and no other zstd subscriber is sent the
// form the panic left unmade: each makes it again (and here panics too,
// 1011, counted), while a JSON subscriber gets the event as ever. Once the
// encoder is back, a subscriber reading the event from the live log gets
// its zstd form whole.
func TestSharedFramePanicLeavesNoEmptyFrame(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.commit(genEvents(t, 0, 5, 5)...)
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()

	const nz = 3
	var zs []*websocket.Conn
	for range nz {
		zs = append(zs, h.dial("?compress=true", nil))
	}
	js := h.dial("", nil)
	defer js.Close()
	h.waitSubscribers(nz + 1)

	plain := h.srv.codecs.plain
	h.srv.codecs.plain = nil // read by the live subscribers only once the event below wakes them
	_, seq := h.commit(genEvents(t, 5, 1, 5)...)

	if ev, _, err := readEvent(t, js, 10*time.Second); err != nil || ev.Cursor != seq {
		t.Fatalf("the JSON subscriber: event %d, %v; want %d", ev.Cursor, err, seq)
	}
	for i, c := range zs {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		typ, b, err := c.ReadMessage()
		if err == nil {
			_, derr := dec.DecodeAll(b, nil)
			c.Close()
			t.Errorf("zstd subscriber %d of %d was sent a message (type %d) of %d bytes (decoding it: %v), want its connection closed 1011", i+1, nz, typ, len(b), derr)
			continue
		}
		var ce *websocket.CloseError
		if !asCloseError(err, &ce) || ce.Code != closeInternalError {
			t.Errorf("zstd subscriber %d of %d ended with %v, want a close %d (internal error)", i+1, nz, err, closeInternalError)
		}
	}
	js.Close()
	h.waitSubscribers(0)
	h.srv.codecs.plain = plain // every subscriber gone (under the server's lock): nothing reads it
	if got := metricValue(h.m.panics); got != nz {
		t.Errorf("backstream_subscribe_panics_total %v, want %d (one per zstd subscriber)", got, nz)
	}

	// The event is still in the live log, its shared frame with it.
	c := h.dial("?compress=true&cursor="+strconv.FormatUint(seq, 10), nil)
	defer c.Close()
	f := readBinary(t, c, 1)[0]
	got, err := dec.DecodeAll(f, nil)
	var ev wireEvent
	if err == nil {
		err = json.Unmarshal(got, &ev)
	}
	if err != nil || ev.Cursor != seq {
		t.Fatalf("after the encoder is back, the event's zstd form (%d bytes): cursor %d, %v; want event %d", len(f), ev.Cursor, err, seq)
	}
}
