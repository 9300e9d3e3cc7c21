package oracle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/gorilla/websocket"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/oracle/world"
)

// startNet starts a network for one test and closes it at cleanup.
func startNet(t testing.TB, cfg Config) *Network {
	t.Helper()
	n, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Start(seed=%d): %v", cfg.Seed, err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// quietCfg is a small world with no automatic traffic.
func quietCfg(accounts int) Config {
	return Config{Accounts: accounts, RecordsMean: 8, Hosts: 2, Seed: 7, Traffic: TrafficNone}
}

// emitTraffic emits k events from a traffic generator through n.Emit.
func emitTraffic(t testing.TB, n *Network, tr *world.Traffic, k int) []Emitted {
	t.Helper()
	out := make([]Emitted, 0, k)
	for i := 0; i < k; i++ {
		e, err := n.Emit(func(*world.World) (world.Event, error) { return tr.Next() })
		if err != nil {
			t.Fatalf("emit %d: %v", i, err)
		}
		out = append(out, e)
	}
	return out
}

// getJSON GETs url and decodes a JSON body into out (when non-nil).
func getJSON(t testing.TB, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", url, err)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("GET %s: decode %q: %v", url, b, err)
		}
	}
	return resp.StatusCode
}

// noRedirect is an HTTP client that returns redirects instead of following them.
var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       10 * time.Second,
}

// getRepo fetches did's CAR from base (relay or PDS), following redirects.
func getRepo(t testing.TB, base, did string) (int, []byte, http.Header) {
	t.Helper()
	resp, err := http.Get(base + "/xrpc/com.atproto.sync.getRepo?did=" + did)
	if err != nil {
		t.Fatalf("getRepo %s: %v", did, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("getRepo %s: read body: %v", did, err)
	}
	return resp.StatusCode, b, resp.Header
}

// xrpcErrorName decodes an atproto error body.
func xrpcErrorName(t testing.TB, b []byte) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("decode error body %q: %v", b, err)
	}
	return e.Error
}

// activeDIDs are the world's active accounts' DIDs, in DID order.
func activeDIDs(n *Network) []string {
	var out []string
	for _, a := range n.World().Accounts() {
		if a.Active {
			out = append(out, a.DID)
		}
	}
	return out
}

// directory resolves DIDs against the relay's PLC-style endpoint.
func directory(n *Network) *identity.BaseDirectory {
	return &identity.BaseDirectory{PLCURL: n.RelayURL(), SkipHandleVerification: true}
}

// wireFrame is one decoded event-stream message; decoding here is
// independent of the encoder in frames.go.
type wireFrame struct {
	op   int64
	t    string
	body []byte
	raw  []byte
}

// cborArg reads a CBOR head at b[0]; returns major, argument, and length.
func cborArg(b []byte) (byte, uint64, int, error) {
	if len(b) == 0 {
		return 0, 0, 0, io.ErrUnexpectedEOF
	}
	major, info := b[0]>>5, b[0]&0x1f
	switch {
	case info < 24:
		return major, uint64(info), 1, nil
	case info >= 24 && info <= 27:
		w := 1 << (info - 24)
		if len(b) < 1+w {
			return 0, 0, 0, io.ErrUnexpectedEOF
		}
		var v uint64
		for _, c := range b[1 : 1+w] {
			v = v<<8 | uint64(c)
		}
		return major, v, 1 + w, nil
	}
	return 0, 0, 0, fmt.Errorf("unsupported CBOR head 0x%02x", b[0])
}

// parseFrame decodes the header map and returns the body bytes.
func parseFrame(b []byte) (wireFrame, error) {
	f := wireFrame{raw: b}
	major, count, k, err := cborArg(b)
	if err != nil {
		return f, err
	}
	if major != 5 {
		return f, fmt.Errorf("header is major type %d, not a map", major)
	}
	pos := k
	var keys []string
	for i := uint64(0); i < count; i++ {
		m, l, k, err := cborArg(b[pos:])
		if err != nil || m != 3 || uint64(len(b)-pos-k) < l {
			return f, fmt.Errorf("bad header key")
		}
		key := string(b[pos+k : pos+k+int(l)])
		keys = append(keys, key)
		pos += k + int(l)
		m, v, k, err := cborArg(b[pos:])
		if err != nil {
			return f, err
		}
		switch {
		case key == "op" && m == 0:
			f.op = int64(v)
		case key == "op" && m == 1:
			f.op = -1 - int64(v)
		case key == "t" && m == 3:
			if uint64(len(b)-pos-k) < v {
				return f, io.ErrUnexpectedEOF
			}
			f.t = string(b[pos+k : pos+k+int(v)])
			pos += int(v)
		default:
			return f, fmt.Errorf("unexpected header key %q major %d", key, m)
		}
		pos += k
	}
	// DAG-CBOR canonical order: shorter keys first.
	for i := 1; i < len(keys); i++ {
		if len(keys[i-1]) > len(keys[i]) || (len(keys[i-1]) == len(keys[i]) && keys[i-1] >= keys[i]) {
			return f, fmt.Errorf("header keys not in DAG-CBOR order: %v", keys)
		}
	}
	f.body = b[pos:]
	return f, nil
}

// seq decodes the body's seq (for message frames with a seq).
func (f wireFrame) seq() (int64, error) {
	m, err := atdata.UnmarshalCBOR(f.body)
	if err != nil {
		return 0, err
	}
	s, ok := m["seq"].(int64)
	if !ok {
		return 0, fmt.Errorf("%s body has no int seq", f.t)
	}
	return s, nil
}

// errorName decodes an error frame's {error, message}.
func (f wireFrame) errorName() (string, error) {
	m, err := atdata.UnmarshalCBOR(f.body)
	if err != nil {
		return "", err
	}
	s, _ := m["error"].(string)
	return s, nil
}

func (f wireFrame) sync() (*comatproto.SyncSubscribeRepos_Sync, error) {
	var c comatproto.SyncSubscribeRepos_Sync
	return &c, c.UnmarshalCBOR(bytes.NewReader(f.body))
}

func atdataMap(b []byte) (map[string]any, error) { return atdata.UnmarshalCBOR(b) }

func (f wireFrame) commit() (*comatproto.SyncSubscribeRepos_Commit, error) {
	var c comatproto.SyncSubscribeRepos_Commit
	return &c, c.UnmarshalCBOR(bytes.NewReader(f.body))
}

// fhClient is a subscribeRepos client for tests.
type fhClient struct {
	t    testing.TB
	conn *websocket.Conn
}

// dialFirehose connects with cursor ("" = none) and, unless it expects a
// refusal, waits until the server has positioned the subscription.
func dialFirehose(t testing.TB, n *Network, cursor string) *fhClient {
	t.Helper()
	before := n.stats.connections.Load() + n.stats.futureCursor.Load()
	c := dialRaw(t, n, cursor, nil)
	deadline := time.Now().Add(5 * time.Second)
	for n.stats.connections.Load()+n.stats.futureCursor.Load() == before {
		if time.Now().After(deadline) {
			t.Fatalf("subscription (cursor %q) never positioned", cursor)
		}
		time.Sleep(time.Millisecond)
	}
	return c
}

func dialRaw(t testing.TB, n *Network, cursor string, netDial func(network, addr string) (net.Conn, error)) *fhClient {
	t.Helper()
	u := strings.Replace(n.RelayURL(), "http://", "ws://", 1) + "/xrpc/com.atproto.sync.subscribeRepos"
	if cursor != "" {
		u += "?cursor=" + cursor
	}
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, NetDial: netDial}
	conn, _, err := d.Dial(u, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", u, err)
	}
	conn.SetReadLimit(10 << 20)
	c := &fhClient{t: t, conn: conn}
	t.Cleanup(func() { conn.Close() })
	return c
}

// next reads one message with a timeout.
func (c *fhClient) next(timeout time.Duration) (wireFrame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(timeout))
	typ, b, err := c.conn.ReadMessage()
	if err != nil {
		return wireFrame{}, err
	}
	if typ != websocket.BinaryMessage {
		return wireFrame{}, fmt.Errorf("message type %d, want binary", typ)
	}
	return parseFrame(b)
}

// seqs reads k message frames and returns their seqs.
func (c *fhClient) seqs(k int) []int64 {
	c.t.Helper()
	out := make([]int64, 0, k)
	for len(out) < k {
		f, err := c.next(5 * time.Second)
		if err != nil {
			c.t.Fatalf("after seqs %v: %v", out, err)
		}
		if f.op != 1 || f.t == typeInfo {
			c.t.Fatalf("after seqs %v: unexpected frame op=%d t=%q", out, f.op, f.t)
		}
		s, err := f.seq()
		if err != nil {
			c.t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// expectQuiet asserts no message arrives within d.
func (c *fhClient) expectQuiet(d time.Duration) {
	c.t.Helper()
	f, err := c.next(d)
	if err == nil {
		s, _ := f.seq()
		c.t.Fatalf("unexpected frame t=%q seq=%d", f.t, s)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		c.t.Fatalf("want read timeout, got %v", err)
	}
}

func seqRange(from, to int64) []int64 {
	var out []int64
	for s := from; s <= to; s++ {
		out = append(out, s)
	}
	return out
}

func itoa(i int64) string { return strconv.FormatInt(i, 10) }

// mustDID parses a DID.
func mustDID(t testing.TB, s string) syntax.DID {
	t.Helper()
	d, err := syntax.ParseDID(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

type (
	cidT         = cid.Cid
	worldAccount = world.Account
)
