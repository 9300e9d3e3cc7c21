package subscribe

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/gorilla/websocket"
	"github.com/ipfs/go-cid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backstream/backstream/archive"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// harness is a real store on disk, a real writer, and the Server behind a
// real HTTP server on 127.0.0.1.
type harness struct {
	t     testing.TB
	store *archive.Store
	w     *archive.Writer
	srv   *Server
	hs    *httptest.Server
	reg   *prometheus.Registry
	m     *Metrics
	ready atomic.Bool
}

type harnessOpts struct {
	liveBytes int64
	cfg       Config
	now       func() time.Time
	notReady  bool
	status    func() any
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	store, err := archive.Open(t.TempDir(), archive.Options{Logger: quiet, CacheSize: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet, LiveLogBytes: o.liveBytes, Now: o.now})
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, store: store, w: w, reg: prometheus.NewRegistry()}
	h.m = NewMetrics(h.reg)
	h.ready.Store(!o.notReady)
	cfg := o.cfg
	cfg.Store, cfg.Writer, cfg.Metrics, cfg.Logger = store, w, h.m, quiet
	cfg.Ready = h.ready.Load
	cfg.StatusJSON = o.status
	if cfg.StatusJSON == nil {
		cfg.StatusJSON = func() any { return map[string]any{"phase": "steady_state"} }
	}
	h.srv, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.hs = httptest.NewServer(h.srv.Handler())
	t.Cleanup(func() {
		h.hs.CloseClientConnections()
		h.srv.Close()
		h.hs.Close()
		w.Close()
		store.Close()
	})
	return h
}

func (h *harness) url(path string) string { return h.hs.URL + path }
func (h *harness) wsURL(query string) string {
	return "ws" + strings.TrimPrefix(h.hs.URL, "http") + "/subscribe" + query
}

// commit makes events durable and returns the seq range.
func (h *harness) commit(evs ...archive.Event) (first, last uint64) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The writer owns a unit's events from Submit on (the live log shares
	// them): give it a copy, so callers may keep and annotate theirs.
	r, err := h.w.Apply(ctx, &archive.Unit{Events: append([]archive.Event(nil), evs...)})
	if err != nil {
		h.t.Fatalf("commit: %v", err)
	}
	if r.Kept != len(evs) {
		h.t.Fatalf("commit: receipt %+v for %d events", r, len(evs))
	}
	return r.FirstSeq, r.LastSeq
}

func (h *harness) dial(query string, hdr http.Header) *websocket.Conn {
	h.t.Helper()
	c, resp, err := (&websocket.Dialer{ReadBufferSize: 64 << 10}).Dial(h.wsURL(query), hdr)
	if err != nil {
		body := ""
		if resp != nil {
			b, _ := io.ReadAll(resp.Body)
			body = fmt.Sprintf(" (%d %s)", resp.StatusCode, b)
		}
		h.t.Fatalf("dial %s: %v%s", query, err, body)
	}
	return c
}

// dialSmall dials with a 4 KiB socket receive buffer and a small gorilla
// buffer, so a client that stops reading backs the server up quickly.
func (h *harness) dialSmall(query string) *websocket.Conn {
	h.t.Helper()
	d := &websocket.Dialer{ReadBufferSize: 1024, NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		nd := net.Dialer{Control: func(network, address string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
			})
			if err != nil {
				return err
			}
			return serr
		}}
		return nd.DialContext(ctx, network, addr)
	}}
	c, _, err := d.Dial(h.wsURL(query), nil)
	if err != nil {
		h.t.Fatalf("dial %s: %v", query, err)
	}
	return c
}

// Test records: DAG-CBOR built by indigo, with their CIDs.
type testRecord struct {
	coll string
	cbor []byte
	cid  []byte
}

func makeRecord(tb testing.TB, coll string, m map[string]any) testRecord {
	b, err := atdata.MarshalCBOR(m)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := cid.NewPrefixV1(cid.DagCBOR, 0x12).Sum(b)
	if err != nil {
		tb.Fatal(err)
	}
	return testRecord{coll: coll, cbor: b, cid: c.Bytes()}
}

var recordCache atomic.Pointer[[]testRecord]

func testRecords(tb testing.TB) []testRecord {
	if p := recordCache.Load(); p != nil {
		return *p
	}
	ref := map[string]any{"uri": "at://did:plc:ewvi7nxzyoun6zhxrhs64oiz/app.bsky.feed.post/3l3qo2vutsw2b",
		"cid": "bafyreig2fjxi3rptqdgylg7e5hmjl6mcke7rn2b6cugzlqq3i4zu6rq52q"}
	recs := []testRecord{
		makeRecord(tb, "app.bsky.feed.post", map[string]any{"$type": "app.bsky.feed.post",
			"text": "Morning walk by the river, the fog was lifting off the water. Coffee next ☕ & <more>", "createdAt": "2024-11-05T10:11:12.345Z", "langs": []any{"en"}}),
		makeRecord(tb, "app.bsky.feed.like", map[string]any{"$type": "app.bsky.feed.like", "subject": ref, "createdAt": "2024-11-05T10:11:12.345Z"}),
		makeRecord(tb, "app.bsky.graph.follow", map[string]any{"$type": "app.bsky.graph.follow", "subject": "did:plc:ewvi7nxzyoun6zhxrhs64oiz", "createdAt": "2024-11-05T10:11:12.345Z"}),
		makeRecord(tb, "app.bsky.feed.repost", map[string]any{"$type": "app.bsky.feed.repost", "subject": ref, "createdAt": "2024-11-05T10:11:12.345Z"}),
		makeRecord(tb, "com.example.thing", map[string]any{"$type": "com.example.thing", "n": int64(42), "list": []any{"x", nil, true}}),
	}
	recordCache.Store(&recs)
	return recs
}

func didOf(i int) string { return fmt.Sprintf("did:plc:%024d", i) }

// genEvent is event i of a mixed stream over nDIDs accounts: mostly
// creates, some updates and deletes, and identity and account rows.
func genEvent(tb testing.TB, i, nDIDs int) archive.Event {
	recs := testRecords(tb)
	did := didOf(i % nDIDs)
	rev := fmt.Sprintf("3l%011d", i+1)
	rec := recs[i%len(recs)]
	ev := archive.Event{DID: did, Source: archive.SourceLive, UpstreamSeq: int64(i + 1)}
	switch i % 23 {
	case 5:
		ev.Kind, ev.Handle = archive.KindIdentity, fmt.Sprintf("user%d.test", i%nDIDs)
	case 11:
		ev.Kind, ev.Active, ev.Status = archive.KindAccount, i%2 == 0, ""
	case 17:
		// Not a sync row: those reach only includeSync subscribers (see
		// TestFilterMatrix), and these streams are read whole by default
		// subscribers.
		ev.Kind, ev.Active, ev.Status = archive.KindAccount, false, "deactivated"
	case 3, 13:
		ev.Kind, ev.Collection, ev.RKey, ev.Rev = archive.KindDelete, rec.coll, fmt.Sprintf("3k%011d", i), rev
	default:
		ev.Kind, ev.Collection, ev.RKey, ev.Rev = archive.KindCreate, rec.coll, fmt.Sprintf("3k%011d", i), rev
		if i%7 == 0 {
			ev.Kind = archive.KindUpdate
		}
		ev.Record, ev.CID = rec.cbor, rec.cid
	}
	return ev
}

func genEvents(tb testing.TB, from, n, nDIDs int) []archive.Event {
	evs := make([]archive.Event, n)
	for i := range evs {
		evs[i] = genEvent(tb, from+i, nDIDs)
	}
	return evs
}

// wireEvent is what tests read back.
type wireEvent struct {
	DID    string `json:"did"`
	TimeUS int64  `json:"time_us"`
	Cursor uint64 `json:"cursor"`
	Kind   string `json:"kind"`
	Commit *struct {
		Collection string `json:"collection"`
		Operation  string `json:"operation"`
	} `json:"commit"`
}

func readEvent(tb testing.TB, c *websocket.Conn, timeout time.Duration) (wireEvent, []byte, error) {
	ev, b, err := readWire(c, timeout)
	var bad badMessage
	if errors.As(err, &bad) {
		tb.Fatal(bad)
	}
	return ev, b, err
}

// badMessage is a message that is not a JSON event in a text frame.
type badMessage struct{ msg string }

func (e badMessage) Error() string { return e.msg }

// readWire is readEvent for goroutines other than the test's: a message
// that is not a JSON event is a badMessage error.
func readWire(c *websocket.Conn, timeout time.Duration) (wireEvent, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	typ, b, err := c.ReadMessage()
	if err != nil {
		return wireEvent{}, nil, err
	}
	if typ != websocket.TextMessage {
		return wireEvent{}, nil, badMessage{fmt.Sprintf("message type %d, want text", typ)}
	}
	var ev wireEvent
	if err := json.Unmarshal(b, &ev); err != nil {
		return wireEvent{}, nil, badMessage{fmt.Sprintf("bad JSON %q: %v", b, err)}
	}
	return ev, b, nil
}

// readUntil reads events until one with cursor ≥ last arrives and returns
// the cursors seen; it fails on a read error.
func readUntil(tb testing.TB, c *websocket.Conn, last uint64) []uint64 {
	tb.Helper()
	got, err := readUntilErr(c, last)
	if err != nil {
		tb.Fatal(err)
	}
	return got
}

// readUntilErr is readUntil for goroutines other than the test's.
func readUntilErr(c *websocket.Conn, last uint64) ([]uint64, error) {
	var got []uint64
	for {
		ev, _, err := readWire(c, 20*time.Second)
		if err != nil {
			return got, fmt.Errorf("read after %d events (last %v): %w", len(got), tail(got), err)
		}
		got = append(got, ev.Cursor)
		if ev.Cursor >= last {
			return got, nil
		}
	}
}

func tail(s []uint64) []uint64 {
	if len(s) > 5 {
		return s[len(s)-5:]
	}
	return s
}

// checkContiguous: cursors are exactly from, from+1, ..., to.
func checkContiguous(got []uint64, from, to uint64) error {
	if uint64(len(got)) != to-from+1 {
		return fmt.Errorf("got %d events, want %d (%d..%d); first %v last %v", len(got), to-from+1, from, to, head(got), tail(got))
	}
	for i, c := range got {
		if c != from+uint64(i) {
			return fmt.Errorf("position %d: cursor %d, want %d (around: %v)", i, c, from+uint64(i), got[max(0, i-3):min(len(got), i+3)])
		}
	}
	return nil
}

func head(s []uint64) []uint64 {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}

func asCloseError(err error, ce **websocket.CloseError) bool {
	return errors.As(err, ce)
}

func metricValue(c prometheus.Collector) float64 { return testutil.ToFloat64(c) }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// waitSubscribers waits, at most 10 s, until the server holds n subscribers
// (read under its lock, which a subscriber's end takes last).
func (h *harness) waitSubscribers(n int) {
	h.t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		h.srv.mu.Lock()
		got := len(h.srv.subs)
		h.srv.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("the server holds %d subscribers 10 s on, want %d", got, n)
		}
	}
}
