package firehose

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func storeOptions(fs vfs.FS) archive.Options {
	return archive.Options{
		FS:        fs,
		Logger:    quiet,
		OnFatal:   func(fe *archive.FatalError) { panic(fe) },
		CacheSize: 8 << 20,
	}
}

// openStore opens a store on an in-memory filesystem.
func openStore(t testing.TB) *archive.Store {
	t.Helper()
	return openStoreFS(t, vfs.NewMem())
}

func openStoreFS(t testing.TB, fs vfs.FS) *archive.Store {
	t.Helper()
	s, err := archive.Open("/data", storeOptions(fs))
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		defer func() { recover() }() // a store after an injected WAL failure may panic on close
		s.Close()
	})
	return s
}

func newWriter(t testing.TB, s *archive.Store, capture bool) *archive.Writer {
	t.Helper()
	return newWriterOpts(t, s, archive.WriterOptions{Capture: capture})
}

func newWriterOpts(t testing.TB, s *archive.Store, opts archive.WriterOptions) *archive.Writer {
	t.Helper()
	opts.Logger = quiet
	w, err := archive.NewWriter(s, opts)
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// newConsumer builds a consumer with fast backoff and its own metrics.
func newConsumer(t testing.TB, cfg Config) (*Consumer, *Metrics) {
	t.Helper()
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(prometheus.NewRegistry())
	}
	if cfg.Relay == "" {
		cfg.Relay = "ws://127.0.0.1:1"
	}
	if cfg.BackoffMin == 0 {
		cfg.BackoffMin = 2 * time.Millisecond
	}
	if cfg.BackoffMax == 0 {
		cfg.BackoffMax = 20 * time.Millisecond
	}
	cfg.Logger = quiet
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("new consumer: %v", err)
	}
	return c, cfg.Metrics
}

// running is a Run in a goroutine; stop cancels it and returns its error.
type running struct {
	cancel context.CancelFunc
	done   chan error
}

func startRun(t testing.TB, c *Consumer) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- c.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

func (r *running) stop(t testing.TB) error {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
			return err
		}
		return nil
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
		return nil
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func waitDurable(t testing.TB, c *Consumer, seq int64) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("durable seq %d (at %d)", seq, c.LastDurable()),
		func() bool { return c.LastDurable() >= seq })
}

// readLog returns every row of ev/ (capture=false) or cap/.
func readLog(t testing.TB, s *archive.Store, capture bool) []archive.Event {
	t.Helper()
	var it *archive.EventIter
	var err error
	if capture {
		it, err = s.Captured(0)
	} else {
		it, err = s.Events(0)
	}
	if err != nil {
		t.Fatalf("iter: %v", err)
	}
	defer it.Close()
	var out []archive.Event
	for it.Next() {
		out = append(out, it.Event().Clone())
	}
	if err := it.Err(); err != nil {
		t.Fatalf("iter: %v", err)
	}
	return out
}

func relayCursor(t testing.TB, s *archive.Store) int64 {
	t.Helper()
	v, err := s.RelayCursor()
	if err != nil {
		t.Fatalf("cursor/relay: %v", err)
	}
	return int64(v)
}

func counter(cv *prometheus.CounterVec, label string) int {
	return int(testutil.ToFloat64(cv.WithLabelValues(label)))
}

// ---- frames --------------------------------------------------------------

// buildWorld is a tiny deterministic world for hand-made frames.
func buildWorld(t testing.TB, accounts int) *world.World {
	t.Helper()
	w, err := world.Build(world.Config{Seed: 3, Accounts: accounts, RecordsMean: 4, Hosts: 1})
	if err != nil {
		t.Fatalf("world: %v", err)
	}
	return w
}

// activeDIDs returns the DIDs of the world's active accounts.
func activeDIDs(w *world.World) []string {
	var out []string
	for _, a := range w.Accounts() {
		if a.Active {
			out = append(out, a.DID)
		}
	}
	return out
}

// encode frames a world event with the given seq.
func encode(t testing.TB, ev world.Event, seq int64) []byte {
	t.Helper()
	f := upstream.Frame{Op: upstream.FrameOpMessage, Type: ev.Type()}
	switch {
	case ev.Commit != nil:
		ev.Commit.Seq = seq
		f.Commit = ev.Commit
	case ev.Identity != nil:
		ev.Identity.Seq = seq
		f.Identity = ev.Identity
	case ev.Account != nil:
		ev.Account.Seq = seq
		f.Account = ev.Account
	case ev.Sync != nil:
		ev.Sync.Seq = seq
		f.Sync = ev.Sync
	}
	b, err := upstream.EncodeFrame(&f)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return b
}

func errorFrame(t testing.TB, name, msg string) []byte {
	t.Helper()
	b, err := upstream.EncodeFrame(&upstream.Frame{Op: upstream.FrameOpError, Error: &upstream.ErrorFrame{Error: name, Message: msg}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func infoFrame(t testing.TB, name string) []byte {
	t.Helper()
	b, err := upstream.EncodeFrame(&upstream.Frame{Op: upstream.FrameOpMessage, Type: upstream.TypeInfo,
		Info: &comatproto.SyncSubscribeRepos_Info{Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// unknownFrame is a well-formed frame of type "#labels" with an empty body.
var unknownFrame = []byte{0xa2, 0x61, 't', 0x67, '#', 'l', 'a', 'b', 'e', 'l', 's', 0x62, 'o', 'p', 0x01, 0xa0}

// must(t)(w.Mutation(...)) fails the test on a mutation error.
func must(t testing.TB) func(world.Event, error) world.Event {
	return func(ev world.Event, err error) world.Event {
		t.Helper()
		if err != nil {
			t.Fatalf("world mutation: %v", err)
		}
		return ev
	}
}

// ---- scripted relay -------------------------------------------------------

// msg is one scripted websocket message: a frame (binary) or text.
type msg struct {
	seq  int64 // 0: sent regardless of the cursor
	data []byte
	text bool
}

// scriptRelay is a tiny subscribeRepos server for hand-made frames. Each
// connection asks script for what to do given its index and cursor.
type scriptRelay struct {
	srv *httptest.Server

	mu      sync.Mutex
	cursors []*int64 // cursor of every connection, in order
	pings   []int    // pings answered on every connection, in order
}

// session is what one connection does: answer the upgrade with status (if
// non-zero, no upgrade), send msgs, then close (abruptly unless closeFrame),
// or hold the connection open until the client leaves (hold).
type session struct {
	status     int
	msgs       []msg
	closeFrame bool
	hold       bool
	noPong     bool // hold without reading: pings are never answered
}

func newScriptRelay(t testing.TB, script func(i int, cursor *int64) session) *scriptRelay {
	t.Helper()
	r := &scriptRelay{}
	up := websocket.Upgrader{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var cursor *int64
		if v := req.URL.Query().Get("cursor"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				http.Error(w, "bad cursor", http.StatusBadRequest)
				return
			}
			cursor = &n
		}
		r.mu.Lock()
		i := len(r.cursors)
		r.cursors = append(r.cursors, cursor)
		r.pings = append(r.pings, 0)
		r.mu.Unlock()
		s := script(i, cursor)
		if s.status != 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(s.status)
			_, _ = w.Write([]byte(`{"error":"Scripted","message":"scripted failure"}`))
			return
		}
		conn, err := up.Upgrade(w, req, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		readDone := make(chan struct{})
		if !s.noPong {
			conn.SetPingHandler(func(data string) error {
				r.mu.Lock()
				r.pings[i]++
				r.mu.Unlock()
				err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
				if errors.Is(err, websocket.ErrCloseSent) {
					return nil
				}
				return err
			})
			go func() { // reads control frames (answers pings) until the client leaves
				defer close(readDone)
				for {
					if _, _, err := conn.NextReader(); err != nil {
						return
					}
				}
			}()
		} else {
			close(readDone)
		}
		for _, m := range s.msgs {
			if m.seq != 0 && cursor != nil && m.seq <= *cursor {
				continue
			}
			mt := websocket.BinaryMessage
			if m.text {
				mt = websocket.TextMessage
			}
			if err := conn.WriteMessage(mt, m.data); err != nil {
				return
			}
		}
		switch {
		case s.hold && s.noPong:
			buf := make([]byte, 1024) // swallow pings unanswered until the client leaves
			for {
				if _, err := conn.NetConn().Read(buf); err != nil {
					break
				}
			}
		case s.hold:
			<-readDone
		case s.closeFrame:
			_ = conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "scripted"), time.Now().Add(time.Second))
		default:
			_ = conn.NetConn().Close()
		}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *scriptRelay) url() string { return r.srv.URL }

func (r *scriptRelay) connCursors() []*int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*int64(nil), r.cursors...)
}

// pingsOn is the number of pings answered on connection i (0-based).
func (r *scriptRelay) pingsOn(i int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.pings) {
		return 0
	}
	return r.pings[i]
}

// pingsAnswered is the number of pings answered on every connection.
func (r *scriptRelay) pingsAnswered() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, p := range r.pings {
		n += p
	}
	return n
}

func (r *scriptRelay) connections() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cursors)
}

var errTimeout = errors.New("timeout")

// runErr waits for a Run to return on its own.
func (r *running) wait(d time.Duration) error {
	select {
	case err := <-r.done:
		close(r.done)
		return err
	case <-time.After(d):
		return errTimeout
	}
}

func gaugeValue(g prometheus.Gauge) float64 { return testutil.ToFloat64(g) }
