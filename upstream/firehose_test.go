package upstream

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func i64p(v int64) *int64 { return &v }

func TestSubscribeURL(t *testing.T) {
	cases := []struct {
		relay  string
		cursor *int64
		want   string
	}{
		{"https://bsky.network", nil, "wss://bsky.network/xrpc/com.atproto.sync.subscribeRepos"},
		{"https://bsky.network/", i64p(0), "wss://bsky.network/xrpc/com.atproto.sync.subscribeRepos?cursor=0"},
		{"http://127.0.0.1:2470", i64p(12345678901), "ws://127.0.0.1:2470/xrpc/com.atproto.sync.subscribeRepos?cursor=12345678901"},
		{"bsky.network", i64p(5), "wss://bsky.network/xrpc/com.atproto.sync.subscribeRepos?cursor=5"},
		{"wss://relay.example.com/base/", nil, "wss://relay.example.com/base/xrpc/com.atproto.sync.subscribeRepos"},
		{"ws://localhost:99?x=1", i64p(7), "ws://localhost:99/xrpc/com.atproto.sync.subscribeRepos?cursor=7"},
	}
	for _, tc := range cases {
		if got := SubscribeURL(tc.relay, tc.cursor); got != tc.want {
			t.Errorf("SubscribeURL(%q) = %q, want %q", tc.relay, got, tc.want)
		}
	}
}

// wsRelay upgrades subscribeRepos and hands the connection to fn.
func wsRelay(t *testing.T, fn func(r *http.Request, c *websocket.Conn)) *server {
	up := websocket.Upgrader{}
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/xrpc/com.atproto.sync.subscribeRepos" {
			http.NotFound(w, r)
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		fn(r, c)
	})
}

func TestDialFirehoseReadsFrames(t *testing.T) {
	frames := sampleFrames(t)
	order := []string{"commit", "identity", "account", "sync", "info", "error"}
	gotCursor := make(chan string, 1)
	relay := wsRelay(t, func(r *http.Request, c *websocket.Conn) {
		gotCursor <- r.URL.Query().Get("cursor")
		for _, name := range order {
			if err := c.WriteMessage(websocket.BinaryMessage, mustEncode(t, frames[name])); err != nil {
				return
			}
		}
		c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"))
		time.Sleep(100 * time.Millisecond)
	})
	conn, err := DialFirehose(context.Background(), relay.URL, i64p(41), 0)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if c := <-gotCursor; c != "41" {
		t.Fatalf("cursor sent %q", c)
	}
	for _, name := range order {
		mt, data, err := conn.ReadMessage()
		if err != nil || mt != websocket.BinaryMessage {
			t.Fatalf("%s: read %v (type %d)", name, err, mt)
		}
		fr, err := DecodeFrame(data)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if !bytes.Equal(mustEncode(t, &fr), mustEncode(t, frames[name])) {
			t.Fatalf("%s: frame changed in transit", name)
		}
	}
	if _, _, err := conn.ReadMessage(); !websocket.IsCloseError(err, websocket.CloseNormalClosure) {
		t.Fatalf("want normal close, got %v", err)
	}
}

func TestDialFirehoseReadLimit(t *testing.T) {
	relay := wsRelay(t, func(r *http.Request, c *websocket.Conn) {
		c.WriteMessage(websocket.BinaryMessage, bytes.Repeat([]byte{0xf6}, 2000))
		time.Sleep(200 * time.Millisecond)
	})
	conn, err := DialFirehose(context.Background(), relay.URL, nil, 1000)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if _, _, err := conn.ReadMessage(); !errors.Is(err, websocket.ErrReadLimit) {
		t.Fatalf("want read limit, got %v", err)
	}
}

func TestDialFirehoseErrors(t *testing.T) {
	t.Run("429", func(t *testing.T) {
		relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "9")
			xrpcError(w, 429, "RateLimitExceeded", "too many connections")
		})
		_, err := DialFirehose(context.Background(), relay.URL, nil, 0)
		var ue *Error
		if !errors.As(err, &ue) || Classify(err) != ClassRateLimited || RetryAfter(err) != 9*time.Second || ue.Name != "RateLimitExceeded" || ue.Op != "subscribeRepos" {
			t.Fatalf("got %v (%+v)", err, ue)
		}
	})
	t.Run("400", func(t *testing.T) {
		relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			xrpcError(w, 400, "InvalidRequest", "bad cursor")
		})
		_, err := DialFirehose(context.Background(), relay.URL, i64p(-5), 0)
		if Classify(err) != ClassPermanent {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("502", func(t *testing.T) {
		relay := newServer(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) })
		if _, err := DialFirehose(context.Background(), relay.URL, nil, 0); Classify(err) != ClassTransient {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("refused", func(t *testing.T) {
		l, _ := net.Listen("tcp", "127.0.0.1:0")
		addr := l.Addr().String()
		l.Close()
		if _, err := DialFirehose(context.Background(), "http://"+addr, nil, 0); Classify(err) != ClassTransient {
			t.Fatalf("got %v (%v)", err, Classify(err))
		}
	})
	t.Run("canceled", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		_, err := DialFirehose(ctx, relay.URL, nil, 0)
		if Classify(err) != ClassCanceled || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v (%v)", err, Classify(err))
		}
	})
	t.Run("bad-url", func(t *testing.T) {
		_, err := DialFirehose(context.Background(), "ftp://x", nil, 0)
		if Classify(err) != ClassPermanent || !strings.Contains(err.Error(), "invalid relay URL") {
			t.Fatalf("got %v", err)
		}
	})
}
