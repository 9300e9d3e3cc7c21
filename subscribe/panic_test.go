package subscribe

import (
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
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
