package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/gorilla/websocket"
	"github.com/ipfs/go-cid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/subscribe"
)

// tailServer is a real store, writer and subscribe.Server behind a real
// HTTP server on 127.0.0.1; restart closes it all and reopens the same
// store on the same address.
type tailServer struct {
	t      *testing.T
	dir    string
	addr   string
	store  *archive.Store
	w      *archive.Writer
	srv    *subscribe.Server
	hs     *httptest.Server
	ready  atomic.Bool
	phase  string
	mu     sync.Mutex
	hdrs   []http.Header // the request headers of every /subscribe, in order
	n      int           // events committed
	closed bool
	perIP  int                  // subscribers per client address (0: the default)
	reg    *prometheus.Registry // the subscribe metrics
}

var tailQuiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newTailServer(t *testing.T) *tailServer {
	t.Helper()
	s := &tailServer{t: t, dir: t.TempDir(), addr: "127.0.0.1:0", phase: "steady_state"}
	s.ready.Store(true)
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *tailServer) start() {
	t := s.t
	t.Helper()
	var err error
	if s.store, err = archive.Open(s.dir, archive.Options{Logger: tailQuiet, CacheSize: 8 << 20}); err != nil {
		t.Fatal(err)
	}
	if s.w, err = archive.NewWriter(s.store, archive.WriterOptions{Logger: tailQuiet}); err != nil {
		t.Fatal(err)
	}
	s.reg = prometheus.NewRegistry()
	s.srv, err = subscribe.New(subscribe.Config{
		Store: s.store, Writer: s.w, Logger: tailQuiet, MaxSubscribersPerIP: s.perIP, Metrics: subscribe.NewMetrics(s.reg),
		Ready:      s.ready.Load,
		StatusJSON: func() any { return map[string]any{"phase": s.getPhase()} },
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	h := s.srv.Handler()
	s.hs = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hdrs = append(s.hdrs, r.Header.Clone())
		s.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	s.hs.Listener.Close()
	s.hs.Listener = ln
	s.hs.Start()
	s.closed = false
}

func (s *tailServer) stop() {
	if s.closed {
		return
	}
	s.closed = true
	s.hs.CloseClientConnections()
	s.srv.Close()
	s.hs.Close()
	s.w.Close()
	s.store.Close()
}

func (s *tailServer) setPhase(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.phase = p
}

func (s *tailServer) getPhase() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phase
}

func (s *tailServer) requests() []http.Header {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]http.Header(nil), s.hdrs...)
}

// commit makes n events durable: creates of posts and likes, alternating.
func (s *tailServer) commit(n int) {
	s.t.Helper()
	evs := make([]archive.Event, n)
	for i := range evs {
		coll := []string{"app.bsky.feed.post", "app.bsky.feed.like"}[i%2]
		rec, err := atdata.MarshalCBOR(map[string]any{"$type": coll, "text": "hello & <bye>", "createdAt": "2024-11-05T10:11:12.345Z"})
		if err != nil {
			s.t.Fatal(err)
		}
		c, err := cid.NewPrefixV1(cid.DagCBOR, 0x12).Sum(rec)
		if err != nil {
			s.t.Fatal(err)
		}
		s.n++ // revs increase, or the writer drops the event as stale
		evs[i] = archive.Event{Kind: archive.KindCreate, DID: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", Collection: coll,
			RKey: fmt.Sprintf("3k%011d", s.n), Rev: fmt.Sprintf("3l%011d", s.n), CID: c.Bytes(), Record: rec,
			Source: archive.SourceLive, UpstreamSeq: int64(s.n)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if r, err := s.w.Apply(ctx, &archive.Unit{Events: evs}); err != nil || r.Kept != n {
		s.t.Fatalf("commit: %+v, %v", r, err)
	}
}

// syncBuffer is an io.Writer safe to read while tail writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// tailCLI runs `backstream tail args...` through run.
func tailCLI(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	registered := false
	for _, c := range commands() {
		registered = registered || c.name == "tail"
	}
	if !registered {
		t.Fatal("tail is not a subcommand: add tailCommand() to commands() in main.go")
	}
	var out, errb syncBuffer
	code := run(ctx, append([]string{"tail"}, args...), nil, &out, &errb)
	return code, out.String(), errb.String()
}

type tailLine struct {
	DID    string `json:"did"`
	Cursor uint64 `json:"cursor"`
	Kind   string `json:"kind"`
	Commit *struct {
		Collection string `json:"collection"`
		Operation  string `json:"operation"`
	} `json:"commit"`
}

// tailLines parses stdout: one JSON event per line.
func tailLines(t *testing.T, out string) []tailLine {
	t.Helper()
	var got []tailLine
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if l == "" {
			continue
		}
		var ev tailLine
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %q is not JSON: %v", l, err)
		}
		got = append(got, ev)
	}
	return got
}

func cursorsOf(lines []tailLine) []uint64 {
	var c []uint64
	for _, l := range lines {
		c = append(c, l.Cursor)
	}
	return c
}

func wantCursors(t *testing.T, lines []tailLine, want ...uint64) {
	t.Helper()
	got := cursorsOf(lines)
	if len(got) != len(want) {
		t.Fatalf("cursors %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("cursors %v, want %v", got, want)
		}
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestTailPrintsEventsThenStopsAtLimit(t *testing.T) {
	s := newTailServer(t)
	s.commit(5)
	code, out, errOut := tailCLI(t, testCtx(t), "--url", "http://"+s.addr, "--cursor", "0", "--limit", "3")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := tailLines(t, out)
	wantCursors(t, lines, 1, 2, 3)
	for _, l := range lines {
		if l.Kind != "commit" || l.Commit == nil || l.Commit.Operation != "create" || l.DID != "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa" {
			t.Fatalf("line %+v is not the committed event", l)
		}
	}
	if strings.Count(out, "\n") != 3 {
		t.Fatalf("want exactly 3 newline-terminated lines:\n%s", out)
	}
	// From a later cursor, filtered by collection: only likes (seqs 2, 4).
	code, out, errOut = tailCLI(t, testCtx(t), "--url", "ws://"+s.addr+"/subscribe", "--cursor", "2",
		"--collection", "app.bsky.feed.like", "--limit", "2")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines = tailLines(t, out)
	wantCursors(t, lines, 2, 4)
	for _, l := range lines {
		if l.Commit.Collection != "app.bsky.feed.like" {
			t.Fatalf("collection filter not applied: %+v", l.Commit)
		}
	}
}

// TestTailLimitClosesCleanly: a tail that stops at --limit while the server
// still streams to it ends the websocket's close handshake before it
// closes the connection, so the server counts and logs a client that
// closed, not a write that failed (before: the server's next write met
// the closed socket, reason write_error, "broken pipe").
func TestTailLimitClosesCleanly(t *testing.T) {
	s := newTailServer(t)
	s.commit(3000)
	const runs = 5
	for range runs {
		code, _, errOut := tailCLI(t, testCtx(t), "--url", "http://"+s.addr, "--cursor", "0", "--limit", "3")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	}
	reason := func(r string) float64 {
		return promtest.Value(t, s.reg, "backstream_subscribe_disconnects_total", map[string]string{"reason": r})
	}
	for deadline := time.Now().Add(10 * time.Second); reason(subscribe.ReasonClientClosed)+reason(subscribe.ReasonWriteError) < runs; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v disconnects counted 10 s after %d tails ended, want %d", reason(subscribe.ReasonClientClosed)+reason(subscribe.ReasonWriteError), runs, runs)
		}
	}
	if closed, failed := reason(subscribe.ReasonClientClosed), reason(subscribe.ReasonWriteError); closed != runs || failed != 0 {
		t.Fatalf("%d tails stopping at --limit while the server streamed: the server counted %v client_closed and %v write_error; want %d and 0", runs, closed, failed, runs)
	}
}

func TestTailCompressedReadsTheSameLines(t *testing.T) {
	s := newTailServer(t)
	s.commit(4)
	_, plain, _ := tailCLI(t, testCtx(t), "--url", s.addr, "--cursor", "0", "--limit", "4")
	code, zout, errOut := tailCLI(t, testCtx(t), "--url", s.addr, "--cursor", "0", "--limit", "4", "--compress")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	wantCursors(t, tailLines(t, zout), 1, 2, 3, 4)
	if zout != plain {
		t.Fatalf("compressed output differs:\n%s\nplain:\n%s", zout, plain)
	}
	reqs := s.requests()
	if len(reqs) != 2 || reqs[0].Get("Socket-Encoding") != "" || reqs[1].Get("Socket-Encoding") != "zstd" {
		t.Fatalf("Socket-Encoding of the two requests: %v", reqs)
	}
}

func TestTailBadParameterIsUsageError(t *testing.T) {
	s := newTailServer(t)
	code, out, errOut := tailCLI(t, testCtx(t), "--url", "http://"+s.addr, "--collection", "app.bsky.feed.post,not a nsid!")
	if code != 2 {
		t.Fatalf("exit %d, want 2: %s", code, errOut)
	}
	if out != "" {
		t.Fatalf("stdout: %q", out)
	}
	for _, want := range []string{`"error":"InvalidParameter"`, `"param":"wantedCollections"`, `wantedCollections: \"not a nsid!\" is not a valid NSID`, "(400)"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("stderr lacks %s:\n%s", want, errOut)
		}
	}
}

func TestTailNotReadyExitsOneNamingThePhase(t *testing.T) {
	s := newTailServer(t)
	s.ready.Store(false)
	s.setPhase("bootstrapping")
	code, out, errOut := tailCLI(t, testCtx(t), "--url", s.addr, "--cursor", "0")
	if code != 1 {
		t.Fatalf("exit %d, want 1: %s", code, errOut)
	}
	if out != "" || !strings.Contains(errOut, `not ready (phase \"bootstrapping\")`) {
		t.Fatalf("stdout %q, stderr:\n%s", out, errOut)
	}
}

func TestTailStopsOnInterrupt(t *testing.T) {
	s := newTailServer(t)
	s.commit(2)
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan struct{})
	var code int
	var out, errOut string
	go func() {
		defer close(done)
		code, out, errOut = tailCLI(t, ctx, "--url", s.addr) // live: nothing to print
	}()
	for len(s.requests()) == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("tail did not stop on interrupt")
	}
	if code != 0 || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
}

// startTail runs tailLoop with cfg (quick backoffs and a 5 s idle unless
// set) in the background, printing to out and logging at debug level to
// logs; the returned function waits up to 5 s for it to end without error.
func startTail(t *testing.T, cfg tailConfig, out, logs *syncBuffer) (finished func()) {
	t.Helper()
	if cfg.backoffMin == 0 {
		cfg.backoffMin, cfg.backoffMax = 5*time.Millisecond, 40*time.Millisecond
	}
	if cfg.idle == 0 {
		cfg.idle = 5 * time.Second
	}
	ctx, errc := testCtx(t), make(chan error, 1)
	go func() {
		errc <- tailLoop(ctx, cfg, out, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}()
	return func() {
		t.Helper()
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("tail did not finish; stdout:\n%s\nlog:\n%s", out.String(), logs.String())
		}
	}
}

// TestTailResumesAcrossRestart: the server goes away mid-stream and comes
// back (refusing connections, then 503 while it starts, then ready); tail
// prints every event exactly once, in order.
func TestTailResumesAcrossRestart(t *testing.T) {
	s := newTailServer(t)
	s.commit(3)
	u, err := tailURL(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	var out, logs syncBuffer
	finished := startTail(t, tailConfig{url: u, cursor: "0", limit: 6}, &out, &logs)
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") == 3 })

	s.stop()
	time.Sleep(30 * time.Millisecond) // refused dials
	s.ready.Store(false)
	s.start()
	waitFor(t, func() bool { return len(s.requests()) >= 3 }) // the first, and two after the restart: one 503 answered
	s.commit(3)
	s.ready.Store(true)
	finished()
	wantCursors(t, tailLines(t, out.String()), 1, 2, 3, 4, 5, 6)
	if !strings.Contains(logs.String(), "reconnecting") || !strings.Contains(logs.String(), "not ready") {
		t.Fatalf("log:\n%s", logs.String())
	}
}

// TestTailLiveLosesNothingBeforeItsFirstPrint: tail started live is
// dropped before it printed anything; the events archived between the drop
// and its reconnect are printed, from where its first connection started
// (the server says where: Backstream-Cursor), not skipped by a second
// live start.
func TestTailLiveLosesNothingBeforeItsFirstPrint(t *testing.T) {
	s := newTailServer(t)
	s.commit(3)
	u, err := tailURL(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	var out, logs syncBuffer
	finished := startTail(t, tailConfig{url: u, limit: 4}, &out, &logs)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "tail: connected") })

	s.stop()
	s.ready.Store(false)
	s.start()
	s.commit(3) // 4, 5, 6: archived while tail is away
	s.ready.Store(true)
	s.commit(1) // 7
	finished()
	wantCursors(t, tailLines(t, out.String()), 4, 5, 6, 7)
	if !strings.Contains(logs.String(), "reconnecting\" err=") || !strings.Contains(logs.String(), " cursor=4 ") {
		t.Fatalf("want the reconnects to ask from seq 4, where the first connection started; log:\n%s", logs.String())
	}
}

// TestTailLiveResumesAJetstreamFromItsConnection: from a server that does
// not say where a live stream started (a Jetstream), tail dropped before its
// first print asks again from the time it connected, by its own clock.
func TestTailLiveResumesAJetstreamFromItsConnection(t *testing.T) {
	var mu sync.Mutex
	var cursors []string
	up := websocket.Upgrader{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		cursors = append(cursors, r.URL.Query().Get("cursor"))
		mu.Unlock()
		if c, err := up.Upgrade(w, r, nil); err == nil {
			c.Close() // dropped before any event
		}
	}))
	defer hs.Close()
	u, err := tailURL(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	asked := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), cursors...)
	}
	before := time.Now().UnixMicro()
	ctx, cancel := context.WithCancel(testCtx(t))
	done := make(chan error, 1)
	go func() {
		done <- tailLoop(ctx, tailConfig{url: u, backoffMin: time.Millisecond, backoffMax: time.Millisecond, idle: 5 * time.Second}, io.Discard, tailQuiet)
	}()
	waitFor(t, func() bool { return len(asked()) >= 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c := asked()
	at, err := strconv.ParseInt(c[1], 10, 64)
	if c[0] != "" || err != nil || at < before || at > time.Now().UnixMicro() {
		t.Fatalf("cursors asked %q: want live, then the time of the first connection (after %d)", c, before)
	}
}

// TestTailBackoff: reconnect waits double from backoffMin to backoffMax,
// each within ±25 % of its nominal delay and never above the cap, and start
// over after a connection that printed something.
func TestTailBackoff(t *testing.T) {
	s := newTailServer(t)
	s.commit(3)
	u, err := tailURL(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	ctx, cancel := context.WithCancel(testCtx(t))
	var waits []time.Duration
	restart, restarted := make(chan struct{}), make(chan struct{})
	cfg := tailConfig{url: u, cursor: "0", backoffMin: 8 * time.Millisecond, backoffMax: 32 * time.Millisecond, idle: 5 * time.Second,
		sleep: func(ctx context.Context, d time.Duration) error {
			waits = append(waits, d)
			switch len(waits) {
			case 4: // the server comes back with two more events
				restart <- struct{}{}
				<-restarted
			case 5:
				cancel()
			}
			return ctx.Err()
		}}
	errc := make(chan error, 1)
	go func() { errc <- tailLoop(ctx, cfg, &out, tailQuiet) }()
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") == 3 })
	s.stop() // the drop, then refused dials until the fourth wait
	<-restart
	s.start()
	s.commit(2)
	close(restarted)
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") == 5 })
	s.stop() // a drop after printing: the schedule starts over
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	nominal := []time.Duration{8, 16, 32, 32, 8}
	if len(waits) != len(nominal) {
		t.Fatalf("waits %v, want %d", waits, len(nominal))
	}
	for i, n := range nominal {
		n *= time.Millisecond
		if lo, hi := n*3/4, min(n*5/4, cfg.backoffMax); waits[i] < lo || waits[i] > hi {
			t.Errorf("wait %d = %v, want within [%v, %v] (all: %v)", i, waits[i], lo, hi, waits)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func TestTailURL(t *testing.T) {
	for in, want := range map[string]string{
		"ws://127.0.0.1:6008/subscribe": "ws://127.0.0.1:6008/subscribe",
		"http://127.0.0.1:6008":         "ws://127.0.0.1:6008/subscribe",
		"https://example.com/":          "wss://example.com/subscribe",
		"127.0.0.1:6008":                "ws://127.0.0.1:6008/subscribe",
		"wss://h:1/proxy/subscribe":     "wss://h:1/proxy/subscribe",
	} {
		u, err := tailURL(in)
		if err != nil || u.String() != want {
			t.Errorf("tailURL(%q) = %v, %v; want %s", in, u, err, want)
		}
	}
	for _, bad := range []string{"ftp://h:1", "http://", "ws://%zz"} {
		if u, err := tailURL(bad); err == nil {
			t.Errorf("tailURL(%q) = %v, want an error", bad, u)
		}
	}
	u, _ := tailURL("ws://h:1/subscribe?cursor=9&requireHello=false")
	cfg := tailConfig{url: u, collections: []string{"a.b.c", "x.*"}, dids: []string{"did:plc:x"}}
	if got, want := cfg.subscribeURL("12"), "ws://h:1/subscribe?cursor=12&requireHello=false&wantedCollections=a.b.c&wantedCollections=x.%2A&wantedDids=did%3Aplc%3Ax"; got != want {
		t.Errorf("subscribeURL = %s\nwant %s", got, want)
	}
	if got := cfg.subscribeURL(""); strings.Contains(got, "cursor") {
		t.Errorf("live URL has a cursor: %s", got)
	}
}

// TestTailListFlags: repeatable and comma-separated; the command line
// replaces the environment's list.
func TestTailListFlags(t *testing.T) {
	cmd := tailCommand()
	parse := func(env []string, args ...string) []string {
		t.Helper()
		fs, err := parseFlags(cmd, []*command{cmd}, args, env, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return listValues(fs, "collection")
	}
	check := func(got []string, want string) {
		t.Helper()
		if strings.Join(got, " ") != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	check(parse(nil), "")
	check(parse(nil, "--collection", "a.b.c", "--collection", "d.e.f, g.*"), "a.b.c d.e.f g.*")
	check(parse([]string{"BACKSTREAM_COLLECTION=x.y.z,w.*"}), "x.y.z w.*")
	check(parse([]string{"BACKSTREAM_COLLECTION=x.y.z"}, "--collection", "a.b.c"), "a.b.c")
}

// TestTailRefusesHugeMessage: tail reads one message of at most
// tailMaxDecodedMessage bytes, compressed or not, and ends (not retries)
// on a larger one: the server at --url does not decide tail's memory.
func TestTailRefusesHugeMessage(t *testing.T) {
	var conns atomic.Int32
	up := websocket.Upgrader{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if conns.Add(1) > 1 {
			http.Error(w, "gone", http.StatusNotFound) // ends tail (fatal 4xx)
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		msg := `{"cursor":1,"pad":"` + strings.Repeat("x", tailMaxDecodedMessage) + `"}`
		_ = c.WriteMessage(websocket.TextMessage, []byte(msg))
		_ = c.WriteMessage(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
	}))
	defer hs.Close()
	u, err := tailURL(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	cfg := tailConfig{url: u, cursor: "0", backoffMin: 1, backoffMax: 1, idle: tailIdleTimeout,
		sleep: func(ctx context.Context, _ time.Duration) error { return ctx.Err() }}
	err = tailLoop(testCtx(t), cfg, &out, tailQuiet)
	if n := len(out.String()); n > tailMaxDecodedMessage {
		t.Fatalf("tail read and printed a %d-byte message (its bound for a message is %d bytes); tailLoop returned %v", n, tailMaxDecodedMessage, err)
	}
}

// TestTailResumesAJetstreamByTime: a Jetstream's events carry no "cursor",
// only time_us, and its cursor is a time_us, inclusive. The server drops
// the first connection in the middle of a frame after three events; tail
// resumes from the last printed time_us and prints every event once, in
// order: not the events since --cursor again, and not the one event the
// inclusive cursor sends again, even when another event shares its time.
func TestTailResumesAJetstreamByTime(t *testing.T) {
	const t0 = 1_700_000_000_000_000
	times := []uint64{t0 + 1, t0 + 2, t0 + 3, t0 + 3, t0 + 4, t0 + 5} // two events at t0+3
	event := func(i int) string {
		return fmt.Sprintf(`{"did":"did:plc:%024d","time_us":%d,"kind":"commit","commit":{"rev":"r%d"}}`, i, times[i], i)
	}
	var conns atomic.Int32
	var cursors []string
	var mu sync.Mutex
	up := websocket.Upgrader{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		cursors = append(cursors, r.URL.Query().Get("cursor"))
		mu.Unlock()
		from, err := strconv.ParseUint(r.URL.Query().Get("cursor"), 10, 64)
		if err != nil {
			http.Error(w, "want a time cursor", http.StatusBadRequest)
			return
		}
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		first := conns.Add(1) == 1
		sent := 0
		for i, tu := range times {
			if tu < from {
				continue
			}
			if first && sent == 3 {
				// The start of a text frame of 256 bytes, then the end.
				_, _ = c.UnderlyingConn().Write([]byte{0x81, 0x7e, 0x01, 0x00, '{', '"'})
				return
			}
			if c.WriteMessage(websocket.TextMessage, []byte(event(i))) != nil {
				return
			}
			sent++
		}
		_, _, _ = c.ReadMessage() // until tail goes
	}))
	defer hs.Close()
	u, err := tailURL(hs.URL)
	if err != nil {
		t.Fatal(err)
	}
	var out syncBuffer
	cfg := tailConfig{url: u, cursor: strconv.FormatUint(t0, 10), limit: len(times), backoffMin: time.Millisecond, backoffMax: time.Millisecond, idle: 5 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tailLoop(ctx, cfg, &out, tailQuiet); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatalf("tail did not print %d events within 5 s; printed:\n%s", len(times), out.String())
	}
	var want strings.Builder
	for i := range times {
		want.WriteString(event(i) + "\n")
	}
	if out.String() != want.String() {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("printed:\n%s\nwant every event once, in order:\n%s\n(cursors asked: %q)", out.String(), want.String(), cursors)
	}
}

// TestTailRetriesThePerAddressCap: once connected, a 429 (the per-address
// subscriber cap, which the server sends with Retry-After: its slots free
// up as other subscribers leave) is retried like the global cap's 503,
// not taken as the end. The server restarts; another subscriber from the
// same address takes the one slot before tail comes back; tail is
// refused, waits, and prints the rest once the slot is free.
func TestTailRetriesThePerAddressCap(t *testing.T) {
	s := &tailServer{t: t, dir: t.TempDir(), addr: "127.0.0.1:0", phase: "steady_state", perIP: 1}
	s.ready.Store(true)
	s.start()
	t.Cleanup(s.stop)
	s.commit(3)
	u, err := tailURL(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	var other *websocket.Conn
	otherIn, tailBack := make(chan struct{}), make(chan struct{})
	waits := 0
	var out, logs syncBuffer
	cfg := tailConfig{url: u, cursor: "0", limit: 6, backoffMin: time.Millisecond, backoffMax: 5 * time.Millisecond, idle: 5 * time.Second,
		sleep: func(ctx context.Context, d time.Duration) error {
			waits++
			switch waits {
			case 1: // after the drop: the other subscriber takes the slot first
				select {
				case <-otherIn:
				case <-ctx.Done():
				}
			case 2: // after the refusal: the other one leaves
				close(tailBack)
			}
			return backoff.Sleep(ctx, d)
		}}
	errc := make(chan error, 1)
	go func() { errc <- tailLoop(ctx, cfg, &out, slog.New(slog.NewTextHandler(&logs, nil))) }()
	waitFor(t, func() bool { return strings.Count(out.String(), "\n") == 3 })
	s.stop()
	s.start()
	other, _, err = websocket.DefaultDialer.DialContext(ctx, "ws://"+s.addr+"/subscribe", nil)
	if err != nil {
		t.Fatal(err)
	}
	close(otherIn)
	select {
	case <-tailBack:
	case err := <-errc:
		t.Fatalf("tail ended on the per-address cap (%v); stdout:\n%s\nlog:\n%s", err, out.String(), logs.String())
	case <-ctx.Done():
		t.Fatalf("tail did not come back; log:\n%s", logs.String())
	}
	other.Close()
	s.commit(3)
	if err := <-errc; err != nil {
		t.Fatalf("tail: %v; log:\n%s", err, logs.String())
	}
	wantCursors(t, tailLines(t, out.String()), 1, 2, 3, 4, 5, 6)
	if !strings.Contains(logs.String(), "429") {
		t.Fatalf("no refusal in the log (the test did not hit the cap):\n%s", logs.String())
	}
}

// TestTailAtTheAdminListener: tail pointed at serve's admin listener (the
// operator's other address, which has no /subscribe) exits 1 at once and
// says which address it wants, as checkpoint does when given the public
// one.
func TestTailAtTheAdminListener(t *testing.T) {
	seeded, _ := openSeeded(t)
	hs := endpointServer(t, seeded, t.TempDir())
	code, out, errOut := tailCLI(t, testCtx(t), "--url", hs.URL, "--limit", "1")
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q, stderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"404", "no /subscribe", "--listen", "not its --admin-listen"} {
		if !strings.Contains(errOut, want) {
			t.Fatalf("stderr lacks %q:\n%s", want, errOut)
		}
	}
}
