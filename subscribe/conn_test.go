package subscribe

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
)

// TestControlFrames: an idle subscriber's ping is answered (gorilla queues
// the pong, the subscriber flushes it); server pings reach the client; a
// client close is echoed and counted as client_closed.
func TestControlFrames(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: Config{PingInterval: 100 * time.Millisecond}})
	c := h.dial("", nil)
	pong := make(chan string, 1)
	ping := make(chan struct{}, 1)
	c.SetPongHandler(func(s string) error {
		select {
		case pong <- s:
		default:
		}
		return nil
	})
	c.SetPingHandler(func(s string) error {
		select {
		case ping <- struct{}{}:
		default:
		}
		return c.WriteControl(websocket.PongMessage, []byte(s), time.Now().Add(time.Second))
	})
	go func() {
		for {
			if _, _, err := c.ReadMessage(); err != nil {
				return
			}
		}
	}()
	if err := c.WriteControl(websocket.PingMessage, []byte("hello"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case s := <-pong:
		if s != "hello" {
			t.Fatalf("pong %q", s)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("no pong")
	}
	select {
	case <-ping:
	case <-time.After(3 * time.Second):
		t.Fatal("no server ping")
	}
	if err := c.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for metricValue(h.m.disconnects.WithLabelValues(ReasonClientClosed)) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := metricValue(h.m.disconnects.WithLabelValues(ReasonClientClosed)); got != 1 {
		t.Fatalf("client_closed %v", got)
	}
	c.Close()
}

// TestLargeFrame: an event over 64 KiB uses the 8-byte length form and
// arrives intact, between small ones.
func TestLargeFrame(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	big := makeRecord(t, "com.example.big", map[string]any{"$type": "com.example.big", "text": strings.Repeat("abcdefgh", 12000)})
	evs := genEvents(t, 0, 3, 2)
	evs = append(evs[:1], append([]archive.Event{{Kind: archive.KindCreate, DID: didOf(9), Collection: big.coll, RKey: "self",
		Rev: "3l00000000099", Record: big.cbor, CID: big.cid, Source: archive.SourceLive}}, evs[1:]...)...)
	first, last := h.commit(evs...)
	c := h.dial("?cursor=0", nil)
	defer c.Close()
	for seq := first; seq <= last; seq++ {
		ev, b, err := readEvent(t, c, 5*time.Second)
		if err != nil || ev.Cursor != seq {
			t.Fatalf("seq %d: %v %v", seq, ev.Cursor, err)
		}
		if seq == first+1 && (len(b) < 96000 || !strings.Contains(string(b), `"collection":"com.example.big"`)) {
			t.Fatalf("big event: %d bytes", len(b))
		}
	}
}

// TestPongBetweenLargeFrames: a pong gorilla queued while the subscriber
// was blocked in a write goes out between frames, never inside one. An
// event over the inline limit is written from where it was rendered,
// behind a header in the output buffer; the queued control frames must go
// before that header. Every event arrives whole and in order, and the pong
// arrives.
func TestPongBetweenLargeFrames(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	big := makeRecord(t, "app.bsky.feed.post", map[string]any{"$type": "app.bsky.feed.post",
		"text": strings.Repeat("x", 40_000), "createdAt": "2024-11-05T10:11:12.345Z"})
	var evs []archive.Event
	for i := range 400 { // every one a large frame
		evs = append(evs, archive.Event{DID: didOf(i % 5), Source: archive.SourceLive, UpstreamSeq: int64(i + 1),
			Kind: archive.KindCreate, Collection: big.coll, RKey: fmt.Sprintf("3k%011d", i), Rev: fmt.Sprintf("3l%011d", i+1),
			Record: big.cbor, CID: big.cid})
	}
	first, last := h.commit(evs...)

	c := h.dialSmall("?cursor=0") // does not read yet: the subscriber blocks in a write
	h.waitStill(10 * time.Second)
	subs := h.subsSnapshot()
	if len(subs) != 1 {
		t.Fatalf("%d subscribers, want 1", len(subs))
	}
	if err := c.WriteControl(websocket.PingMessage, []byte("are-you-there"), time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	sock := subs[0].sock
	promtest.Eventually(t, 10*time.Second, "the server to queue its pong", func() bool {
		sock.mu.Lock()
		defer sock.mu.Unlock()
		return len(sock.pending) > 0
	})
	pong := make(chan string, 1)
	c.SetPongHandler(func(s string) error { pong <- s; return nil })
	for seq := first; seq <= last; seq++ {
		ev, _, err := readWire(c, 10*time.Second)
		if err != nil || ev.Cursor != seq {
			msg := fmt.Sprint(err)
			t.Fatalf("event %d of %d..%d: cursor %d, err %s…", seq, first, last, ev.Cursor, msg[:min(len(msg), 80)])
		}
	}
	select {
	case s := <-pong:
		if s != "are-you-there" {
			t.Fatalf("pong %q, want the ping's payload", s)
		}
	default:
		t.Fatal("no pong arrived before the last event")
	}
}
