package subscribe

import (
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
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
