package main

// In-process tests of the public listener's caps and timeouts, on real
// loopback sockets (clients bind 127.0.0.x source addresses to be several
// client addresses). The process-level attack against a lowered
// RLIMIT_NOFILE is connlimit_process_test.go.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/merge"
	"github.com/gorilla/websocket"
	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"
)

// dialFrom connects to addr from the loopback address src.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// getOn sends one keep-alive GET on c and returns the answer's status.
func getOn(c net.Conn, path string) (int, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: backstream\r\n\r\n", path); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// openGet connects from src, sends a GET and returns the connection and
// the status.
func openGet(t *testing.T, src, addr, path string) (net.Conn, int) {
	t.Helper()
	c, err := dialFrom(src, addr)
	if err != nil {
		t.Fatalf("dial from %s: %v", src, err)
	}
	t.Cleanup(func() { c.Close() })
	code, err := getOn(c, path)
	if err != nil {
		t.Fatalf("GET %s from %s: %v", path, src, err)
	}
	return c, code
}

// closedByServer waits up to d for the server to close c.
func closedByServer(c net.Conn, d time.Duration) error {
	_ = c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	_, err := c.Read(b[:])
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || (err != nil && strings.Contains(err.Error(), "reset")) {
		return nil
	}
	return fmt.Errorf("not closed by the server within %v: %v", d, err)
}

// TestConnLimits: beyond the per-IP cap a connection gets a prompt 429,
// beyond the global cap a 503, both counted, while the connections within
// the caps are served and the admin listener answers; a closed connection
// frees its slot; idle keep-alive connections are closed after
// --http-idle-timeout (well before the read timeout), freeing every slot.
func TestConnLimits(t *testing.T) {
	s := testServer(t, nil, "", 0)
	const idle = time.Second
	hs, err := s.listenHTTP("127.0.0.1:0", httpOptions{adminListen: "127.0.0.1:0", idleTimeout: idle, readTimeout: 30 * time.Second},
		connLimits{Global: 12, PerIP: 5})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.shutdown(time.Second)
	addr := hs.publicAddr.String()
	var held []net.Conn
	for i := 0; i < 5; i++ {
		c, code := openGet(t, "127.0.0.1", addr, "/healthz")
		if code != 200 {
			t.Fatalf("connection %d within the caps: %d", i, code)
		}
		held = append(held, c)
	}
	start := time.Now()
	c, code := openGet(t, "127.0.0.1", addr, "/healthz")
	if code != http.StatusTooManyRequests || closedByServer(c, time.Second) != nil {
		t.Fatalf("6th connection from one address: %d, want 429 and closed", code)
	}
	for i := 0; i < 7; i++ {
		c, code := openGet(t, fmt.Sprintf("127.0.0.%d", 2+i/5), addr, "/healthz")
		if code != 200 {
			t.Fatalf("connection %d from another address: %d", i, code)
		}
		held = append(held, c)
	}
	c, code = openGet(t, "127.0.0.9", addr, "/healthz")
	if code != http.StatusServiceUnavailable || closedByServer(c, time.Second) != nil {
		t.Fatalf("13th connection: %d, want 503 and closed", code)
	}
	if d := time.Since(start); d > idle {
		t.Fatalf("the refusals took %v", d)
	}
	if code, err := getOn(held[0], "/healthz"); err != nil || code != 200 {
		t.Fatalf("a held connection's second request: %d %v", code, err)
	}
	if _, code := openGet(t, "127.0.0.1", hs.adminAddr.String(), "/healthz"); code != 200 {
		t.Fatalf("admin /healthz while the public listener is full: %d", code)
	}
	for reason, want := range map[string]float64{refusedPerIP: 1, refusedGlobal: 1} {
		if v := promtest.Value(t, s.reg, "backstream_http_connections_refused_total", map[string]string{"reason": reason}); v != want {
			t.Fatalf("refused %s: %v, want %v", reason, v, want)
		}
	}
	open := func() float64 { return promtest.Value(t, s.reg, "backstream_http_connections", nil) }
	if v := open(); v != 12 {
		t.Fatalf("open connections %v, want 12", v)
	}
	// A closed connection frees its slot.
	held[len(held)-1].Close()
	held = held[:len(held)-1]
	promtest.Eventually(t, 5*time.Second, "a slot freed", func() bool { return open() == 11 })
	c, code = openGet(t, "127.0.0.9", addr, "/healthz")
	if code != 200 {
		t.Fatalf("after a slot was freed: %d", code)
	}
	held = append(held, c)
	// The idle timeout closes every idle connection.
	for i, c := range held {
		if err := closedByServer(c, idle+3*time.Second); err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
	}
	promtest.Eventually(t, 5*time.Second, "every slot freed", func() bool { return open() == 0 })
}

// TestReadTimeoutSparesWebsockets: a request whose headers trickle in is
// cut at --http-read-timeout, while a websocket subscriber connected on
// the same listener outlives it several times and still gets events.
func TestReadTimeoutSparesWebsockets(t *testing.T) {
	base := t.TempDir()
	store := openTestStore(t, filepath.Join(base, "data"))
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := testServer(t, store, "", 0)
	s.sub.Attach(store, w)
	s.health.SetPhase(archive.PhaseSteadyState)
	const readTimeout = 400 * time.Millisecond
	hs, err := s.listenHTTP("127.0.0.1:0", httpOptions{idleTimeout: time.Minute, readTimeout: readTimeout}, connLimits{Global: 10, PerIP: 10})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.shutdown(time.Second)
	addr := hs.publicAddr.String()

	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/subscribe", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()

	// A slow request: one header byte every 50 ms, for far longer than the
	// read timeout.
	c, err := dialFrom("127.0.0.1", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	cut := make(chan time.Duration, 1)
	go func() {
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: b\r\nX-Slow: "); err != nil {
			cut <- time.Since(start)
			return
		}
		for time.Since(start) < 10*readTimeout {
			if _, err := c.Write([]byte("a")); err != nil {
				cut <- time.Since(start)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		cut <- -1
	}()
	if err := closedByServer(c, 10*readTimeout); err != nil {
		t.Fatalf("trickling request: %v", err)
	}
	if d := time.Since(start); d > 3*readTimeout {
		t.Fatalf("the trickling request was cut after %v, want about %v", d, readTimeout)
	}
	c.Close()
	<-cut

	// Events written now reach the subscriber, whose connection is older
	// than several read timeouts.
	for time.Since(start) < 3*readTimeout {
		time.Sleep(readTimeout / 4)
	}
	record := []byte{0xa0} // {}
	mh, err := multihash.Sum(record, multihash.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	ev := archive.Event{Kind: archive.KindCreate, DID: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", Collection: "app.bsky.feed.post",
		RKey: "r1", Rev: "3m00000000001", CID: cid.NewCidV1(cid.DagCBOR, mh).Bytes(), Record: record, Source: archive.SourceLive}
	if _, err := w.Apply(context.Background(), &archive.Unit{Events: []archive.Event{ev}}); err != nil {
		t.Fatal(err)
	}
	_ = ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, msg, err := ws.ReadMessage()
	if err != nil || !strings.Contains(string(msg), "app.bsky.feed.post") {
		t.Fatalf("the subscriber after %v: %v %s", time.Since(start), err, msg)
	}
}

// TestConnCapFromFDLimit: the default global cap is the descriptor limit
// minus the reserve for the store, every download that may run and the
// refused connections held while answered; a limit too low for the
// reserve gives a quarter of it, flagged.
func TestConnCapFromFDLimit(t *testing.T) {
	reserve := fdReserve(100, 16)
	if want := uint64(archive.FileDescriptors + fixedFDs + refusers + fdsPerDownload*(100+16+merge.DefaultPendingWorkers)); reserve != want {
		t.Fatalf("reserve %d, want %d", reserve, want)
	}
	for _, c := range []struct {
		soft uint64
		want int
		fits bool
	}{
		{1 << 20, 1<<20 - int(reserve), true},
		{reserve + minAutoConns + 1, minAutoConns + 1, true},
		{reserve + minAutoConns, int(reserve+minAutoConns) / 4, false},
		{1024, 256, false},
		{40, 16, false},
	} {
		if got, fits := autoMaxConns(c.soft, reserve); got != c.want || fits != c.fits {
			t.Errorf("limit %d: cap %d (fits %v), want %d (%v)", c.soft, got, fits, c.want, c.fits)
		}
	}
	l, err := raiseFDLimit()
	if err != nil || l.Soft != l.Hard || l.Was > l.Soft {
		t.Fatalf("raiseFDLimit: %+v %v", l, err)
	}
}

// TestCappedConnKeepsSyscallConn: the connection a subscriber's websocket
// runs on, as the capped public listener accepted it, exposes its
// descriptor: subscribe's replay offers the socket what it takes at once
// (a non-blocking write) before it closes its archive iterator and gives
// its reader slot back. Hidden, every replay write closed the iterator.
func TestCappedConnKeepsSyscallConn(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	capped := newLimitListener(ln, connLimits{Global: 10, PerIP: 10}, newConnMetrics(nil, connLimits{}), tailQuiet)
	got := make(chan bool, 1)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := (&websocket.Upgrader{}).Upgrade(w, r, nil)
		if err != nil {
			got <- false
			return
		}
		defer c.Close()
		_, ok := c.NetConn().(syscall.Conn)
		got <- ok
	})}
	go srv.Serve(capped)
	defer srv.Close()
	c, _, err := (&websocket.Dialer{HandshakeTimeout: 5 * time.Second}).Dial("ws://"+ln.Addr().String()+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !<-got {
		t.Fatal("the hijacked connection of the capped public listener is not a syscall.Conn: subscribe's tryWrite can never write behind --listen")
	}
}

// held is what the listener counts: open connections and client addresses
// with a count.
func (l *limitListener) held() (open, addrs int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open, len(l.perIP)
}

// TestConnLimitForgetsAddresses: the per-address counts hold only the
// addresses with a connection open now. Months of clients are millions of
// addresses; each one's count is dropped with its last connection, however
// many times that connection is closed (the server and a hijacker may
// both close it), and a refused connection is never counted.
func TestConnLimitForgetsAddresses(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := connLimits{Global: 1000, PerIP: 1}
	l := newLimitListener(ln, lim, newConnMetrics(nil, lim), slog.New(slog.DiscardHandler))
	defer l.Close()
	accepted := make(chan net.Conn)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	const clients = 300
	for i := range clients {
		src := fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
		c, err := dialFrom(src, ln.Addr().String())
		if err != nil {
			t.Fatalf("dial from %s: %v", src, err)
		}
		sc := <-accepted
		// A second connection from the address is refused: a 429, closed.
		c2, err := dialFrom(src, ln.Addr().String())
		if err != nil {
			t.Fatalf("dial from %s: %v", src, err)
		}
		_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if b, err := io.ReadAll(c2); err != nil || !strings.HasPrefix(string(b), "HTTP/1.1 429") {
			t.Fatalf("a second connection from %s: %q, %v; want a 429 and closed", src, b, err)
		}
		c2.Close()
		sc.Close()
		sc.Close()
		c.Close()
	}
	if open, addrs := l.held(); open != 0 || addrs != 0 {
		t.Fatalf("after %d client addresses came and went: %d connections open, counts for %d addresses; want none",
			clients, open, addrs)
	}
}
