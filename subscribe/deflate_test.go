package subscribe

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/klauspost/compress/zstd"
)

// countingConn counts the bytes a client reads off the socket.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// dialDeflate dials with permessage-deflate offered (as browsers and the
// npm clients' websocket libraries do) and counts the bytes read.
func (h *harness) dialDeflate(query string, hdr http.Header, n *atomic.Int64) (*websocket.Conn, *http.Response) {
	h.t.Helper()
	d := &websocket.Dialer{EnableCompression: true, NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, n}, nil
	}}
	c, resp, err := d.Dial(h.wsURL(query), hdr)
	if err != nil {
		h.t.Fatalf("dial %s: %v", query, err)
	}
	return c, resp
}

// TestDeflate: a client that offers permessage-deflate gets it, as from
// Jetstream: the handshake accepts it (no context takeover either way), and
// the replayed and live streams decode to exactly the JSON a plain client
// gets while taking far fewer bytes on the wire. The client's own messages
// may be deflated too (an options_update is applied). A zstd subscriber
// that also offered deflate gets its zstd frames as they are, not deflated
// again. A live event is deflated once, in its live-log slot, for every
// deflate subscriber.
func TestDeflate(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	const n = 300
	_, last := h.commit(genEvents(t, 0, n, 5)...)
	plain := h.dial("?cursor=0", nil)
	want := readJSONStream(t, plain, n)

	var wire atomic.Int64
	c, resp := h.dialDeflate("?cursor=0", nil, &wire)
	defer c.Close()
	if ext := resp.Header.Get("Sec-WebSocket-Extensions"); !strings.Contains(ext, "permessage-deflate") || !strings.Contains(ext, "server_no_context_takeover") {
		t.Fatalf("handshake extensions %q: deflate not accepted", ext)
	}
	got := readJSONStream(t, c, n)
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Fatalf("replayed event %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
	replayWire := wire.Load()
	var jsonBytes int64
	for _, b := range want {
		jsonBytes += int64(len(b))
	}
	t.Logf("replay: %d events, %d JSON bytes, %d bytes on the wire deflated (%.0f%%)", n, jsonBytes, replayWire, 100*float64(replayWire)/float64(jsonBytes))
	if replayWire > jsonBytes*85/100 {
		t.Fatalf("replay took %d bytes on the wire for %d bytes of JSON: not deflated", replayWire, jsonBytes)
	}

	// Live, with a second deflate subscriber: the same bytes, deflated once.
	var wire2 atomic.Int64
	c2, _ := h.dialDeflate("", nil, &wire2)
	defer c2.Close()
	// A client's deflated options_update is inflated and applied: c3 asks
	// for one account only. The pong to a ping sent after it says the
	// server has read it (it reads a client's frames in order).
	var wire3 atomic.Int64
	c3, _ := h.dialDeflate("", nil, &wire3)
	defer c3.Close()
	c3.EnableWriteCompression(true)
	c3.SetCompressionLevel(9) // compressible: gorilla sends it deflated
	if err := c3.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{"wantedDids":["`+didOf(1)+`"]}}`)); err != nil {
		t.Fatal(err)
	}
	ponged := make(chan struct{})
	c3.SetPongHandler(func(string) error { close(ponged); return nil })
	got3 := make(chan []byte, n)
	go func() { // reading runs the pong handler
		for {
			_, b, err := c3.ReadMessage()
			if err != nil {
				close(got3)
				return
			}
			got3 <- b
		}
	}()
	if err := c3.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ponged:
	case <-time.After(10 * time.Second):
		t.Fatal("no pong after the deflated options_update")
	}
	w0 := wire.Load()
	evs := genEvents(t, n, n, 5)
	lf, ll := h.commit(evs...)
	if lf != last+1 {
		t.Fatalf("live seqs from %d, want %d", lf, last+1)
	}
	wantLive := readJSONStream(t, plain, n)
	for i, gotLive := range [][][]byte{readJSONStream(t, c, n), readJSONStream(t, c2, n)} {
		for j := range wantLive {
			if !bytes.Equal(gotLive[j], wantLive[j]) {
				t.Fatalf("subscriber %d, live event %d:\n got %s\nwant %s", i, j, gotLive[j], wantLive[j])
			}
		}
	}
	var want3 []string
	for i, ev := range evs {
		if ev.DID == didOf(1) {
			want3 = append(want3, string(wantLive[i]))
		}
	}
	for i := range want3 {
		select {
		case b := <-got3:
			if string(b) != want3[i] {
				t.Fatalf("after a deflated options_update for %s, event %d:\n got %s\nwant %s", didOf(1), i, b, want3[i])
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("after a deflated options_update: %d of %d events", i, len(want3))
		}
	}
	if liveWire := wire.Load() - w0; liveWire > jsonBytes*85/100 {
		t.Fatalf("live took %d bytes on the wire: not deflated", liveWire)
	}
	for seq := lf; seq <= ll; seq++ {
		ents, _ := h.w.Live().ReadEntries(seq, nil, 1)
		if len(ents) == 0 {
			break // aged out of the live log
		}
		m := ents[0].Memo()
		if m == nil || m.(*frame).f.b == nil {
			t.Fatalf("live event %d has no shared deflated frame", seq)
		}
	}

	// zstd wins over deflate: binary zstd frames, not deflated again.
	var wireZ atomic.Int64
	z, _ := h.dialDeflate("?cursor=0&compress=true", nil, &wireZ)
	defer z.Close()
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var zBytes int64
	for i, f := range readBinary(t, z, n) {
		zBytes += int64(len(f))
		b, err := dec.DecodeAll(f, nil)
		if err != nil || !bytes.Equal(b, want[i]) {
			t.Fatalf("zstd frame %d: %v", i, err)
		}
	}
	if w := wireZ.Load(); w < zBytes {
		t.Fatalf("zstd stream: %d bytes on the wire for %d bytes of zstd frames: deflated again", w, zBytes)
	}
}
