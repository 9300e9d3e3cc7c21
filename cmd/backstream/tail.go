package main

// This file owns `backstream tail`: a small /subscribe client that prints
// each event as one JSON line on stdout. It resumes after a dropped
// connection from the last printed cursor + 1, so it survives a server
// restart without repeating or skipping an event. From a server whose
// events carry no "cursor" (a Jetstream) it resumes from the last printed
// time_us, which such a server reads as an inclusive time, and does not
// print again the lines it sends again at that time. Started live and
// dropped before its first print, it resumes from where its connection
// started (the seq the server names in its upgrade answer; from a
// Jetstream, the time of the connection), so the events archived while it
// was away are printed, not skipped by a second live start.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/klauspost/compress/zstd"

	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/subscribe"
)

// Defaults of the tail client.
const (
	defaultTailURL        = "ws://127.0.0.1:6008/subscribe"
	tailBackoffMin        = 200 * time.Millisecond
	tailBackoffMax        = 5 * time.Second
	tailIdleTimeout       = 2 * time.Minute // no message nor ping for this long: the connection is dead
	tailHandshakeTimeout  = 10 * time.Second
	tailMaxErrorBody      = 64 << 10
	tailMaxDecodedMessage = 64 << 20
)

func tailCommand() *command {
	return &command{
		name:    "tail",
		summary: "follow a backstream's /subscribe and print each event as one JSON line",
		flags: func(fs *flagSet) {
			fs.String("url", defaultTailURL, "backstream to follow: ws(s)://host:port/subscribe, or http(s)://host:port (/subscribe added)")
			fs.Var(new(listFlag), "collection", "wanted collection, an NSID or prefix.* (repeatable or comma-separated; default: all)")
			fs.Var(new(listFlag), "did", "wanted DID (repeatable or comma-separated; default: all)")
			fs.String("cursor", "", "where to start: an archive seq (0 = the start) or unix microseconds (empty = live)")
			fs.Bool("compress", false, "ask for zstd-compressed messages (Socket-Encoding: zstd) and decompress them")
			fs.Int("limit", 0, "exit after printing this many events (0 = never)")
		},
		run: runTail,
	}
}

// listFlag is a repeatable string flag; each value may also be a
// comma-separated list. The environment sets it once before the command
// line; values given on the command line then replace it (see listValues).
type listFlag struct {
	sets [][]string // the values of each Set call, in order
}

func (l *listFlag) String() string {
	if l == nil {
		return ""
	}
	return strings.Join(l.all(), ",")
}

func (l *listFlag) Set(v string) error {
	var vals []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			vals = append(vals, s)
		}
	}
	l.sets = append(l.sets, vals)
	return nil
}

func (l *listFlag) Get() any { return l.all() }

func (l *listFlag) all() []string {
	var out []string
	for _, s := range l.sets {
		out = append(out, s...)
	}
	return out
}

// listValues is the value of a listFlag: the command line's values when it
// gave any, else the environment's.
func listValues(fs *flagSet, name string) []string {
	l := fs.Lookup(name).Value.(*listFlag)
	if _, env := fs.fromEnv[name]; env && len(l.sets) > 1 {
		return (&listFlag{sets: l.sets[1:]}).all()
	}
	return l.all()
}

// tailConfig is a parsed `backstream tail`.
type tailConfig struct {
	url         *url.URL // ws or wss, without the parameters tail sets
	collections []string
	dids        []string
	cursor      string // "" = live
	compress    bool
	limit       int // 0 = forever

	backoffMin, backoffMax time.Duration
	idle                   time.Duration
	// sleep is the clock of the reconnect waits; nil is backoff.Sleep.
	sleep func(ctx context.Context, d time.Duration) error
}

func runTail(ctx context.Context, env *cmdEnv) error {
	fs := env.fs
	u, err := tailURL(fs.str("url"))
	if err != nil {
		return fmt.Errorf("%w: --url %q: %v", errUsage, fs.str("url"), err)
	}
	limit := fs.get("limit").(int)
	if limit < 0 {
		return fmt.Errorf("%w: --limit %d: must not be negative", errUsage, limit)
	}
	cfg := tailConfig{
		url:         u,
		collections: listValues(fs, "collection"),
		dids:        listValues(fs, "did"),
		cursor:      strings.TrimSpace(fs.str("cursor")),
		compress:    fs.get("compress").(bool),
		limit:       limit,
		backoffMin:  tailBackoffMin,
		backoffMax:  tailBackoffMax,
		idle:        tailIdleTimeout,
	}
	return tailLoop(ctx, cfg, env.stdout, env.log)
}

// tailURL normalises --url: http(s) becomes ws(s), a bare host:port gets
// ws://, and an empty path becomes /subscribe.
func tailURL(raw string) (*url.URL, error) {
	raw = strings.TrimSpace(raw)
	if !strings.Contains(raw, "://") {
		raw = "ws://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return nil, fmt.Errorf("scheme %q: want ws, wss, http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("no host")
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/subscribe"
	}
	u.Fragment = ""
	return u, nil
}

// subscribeURL is the /subscribe URL starting at cursor ("" = live). Other
// parameters already in --url are kept; tail's own replace theirs.
func (c *tailConfig) subscribeURL(cursor string) string {
	u := *c.url
	q := u.Query()
	q.Del("wantedCollections")
	q.Del("wantedDids")
	q.Del("cursor")
	for _, v := range c.collections {
		q.Add("wantedCollections", v)
	}
	for _, v := range c.dids {
		q.Add("wantedDids", v)
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// tailFatal marks what reconnecting would not change: a 4xx answer to the
// upgrade, a message tail cannot decode, stdout gone. Its text is the
// wrapped error's.
type tailFatal struct{ error }

func (e tailFatal) Unwrap() error { return e.error }

func isTailFatal(err error) bool {
	var f tailFatal
	return errors.As(err, &f)
}

// errTailLimit: --limit events were printed.
var errTailLimit = errors.New("limit reached")

// tailLoop connects, prints, and reconnects after a drop until ctx is done
// or the limit is reached. The first connection must be upgraded: a
// refusal or a dial error ends tail (400: errUsage). Once connected, drops,
// dial errors, 429s (the per-address cap), 503s and other 5xx (a
// restarting server, a proxy in front of it) are retried with a capped
// backoff (internal/backoff: doubling from backoffMin to backoffMax,
// jittered, reset after a connection that printed something); other 4xx
// and undecodable messages end tail.
func tailLoop(ctx context.Context, cfg tailConfig, out io.Writer, log *slog.Logger) error {
	t := &tailer{cfg: cfg, out: out, log: log, cursor: cfg.cursor}
	if cfg.compress {
		dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(tailMaxDecodedMessage))
		if err != nil {
			return fmt.Errorf("tail: zstd decoder: %w", err)
		}
		defer dec.Close()
		t.dec = dec
	}
	bo := backoff.Loop{Policy: backoff.Policy{Base: cfg.backoffMin, Max: cfg.backoffMax}}
	sleep := cfg.sleep
	if sleep == nil {
		sleep = backoff.Sleep
	}
	connected := false
	for {
		printedBefore := t.printed
		err := t.once(ctx)
		switch {
		case ctx.Err() != nil || errors.Is(err, errTailLimit):
			return nil
		case errors.Is(err, errUsage), isTailFatal(err), !connected && !t.upgraded:
			return err
		}
		connected = true
		if t.printed > printedBefore {
			bo.Reset()
		}
		wait := bo.Next()
		log.Warn("tail: connection lost; reconnecting", "err", err, "cursor", t.cursor, "in", wait)
		if sleep(ctx, wait) != nil {
			return nil
		}
	}
}

// tailer is the state that survives reconnections.
type tailer struct {
	cfg    tailConfig
	out    io.Writer
	log    *slog.Logger
	dec    *zstd.Decoder // nil unless --compress
	cursor string        // where the next connection starts ("" = live)
	// Resuming by time (events without "cursor"): the last printed
	// time_us and the lines printed at it, which the next connection,
	// asking from that time inclusive, sends again.
	lastTime   uint64
	atLastTime map[string]struct{}
	printed    int
	upgraded   bool // the last once got past the upgrade
	buf        []byte
}

// once runs one connection: dial, then print until it ends.
func (t *tailer) once(ctx context.Context) error {
	t.upgraded = false
	target := t.cfg.subscribeURL(t.cursor)
	hdr := http.Header{}
	if t.cfg.compress {
		hdr.Set("Socket-Encoding", "zstd")
	}
	d := websocket.Dialer{
		Proxy:            http.ProxyFromEnvironment,
		HandshakeTimeout: tailHandshakeTimeout,
		ReadBufferSize:   64 << 10,
	}
	conn, resp, err := d.DialContext(ctx, target, hdr)
	if err != nil {
		if resp != nil {
			return refusal(resp, redact(target))
		}
		return fmt.Errorf("tail: dial %s: %w", redact(target), err)
	}
	defer conn.Close()
	t.upgraded = true
	if t.cursor == "" {
		t.cursor = liveStart(resp)
	}
	conn.SetReadLimit(tailMaxDecodedMessage)
	t.log.Debug("tail: connected", "url", redact(target))
	resumedByTime := len(t.atLastTime) > 0 // until a line past lastTime

	// Cancellation closes the socket, which ends ReadMessage.
	stop := context.AfterFunc(ctx, func() { closeNormally(conn) })
	defer stop()
	conn.SetPingHandler(func(data string) error {
		_ = conn.SetReadDeadline(time.Now().Add(t.cfg.idle))
		err := conn.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(time.Second))
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	for {
		_ = conn.SetReadDeadline(time.Now().Add(t.cfg.idle))
		typ, msg, err := conn.ReadMessage()
		if errors.Is(err, websocket.ErrReadLimit) {
			return tailFatal{fmt.Errorf("tail: a message over %d bytes: %w", tailMaxDecodedMessage, err)}
		}
		if err != nil {
			return fmt.Errorf("tail: read: %w", err)
		}
		if typ == websocket.BinaryMessage {
			if t.dec == nil {
				return tailFatal{errors.New("tail: a binary message without --compress")}
			}
			if msg, err = t.dec.DecodeAll(msg, t.buf[:0]); err != nil {
				return tailFatal{fmt.Errorf("tail: zstd: %w", err)}
			}
			t.buf = msg
		}
		msg = bytes.TrimRight(msg, "\r\n")
		var ev struct {
			Cursor *uint64 `json:"cursor"`
			TimeUS *uint64 `json:"time_us"`
		}
		_ = json.Unmarshal(msg, &ev) // not an event: printed, cursor unchanged
		byTime := ev.Cursor == nil && ev.TimeUS != nil
		if resumedByTime && byTime && *ev.TimeUS == t.lastTime {
			if _, again := t.atLastTime[string(msg)]; again {
				continue // printed before the drop
			}
		} else {
			resumedByTime = false
		}
		line := append(msg, '\n')
		if _, err := t.out.Write(line); err != nil {
			return tailFatal{fmt.Errorf("tail: write: %w", err)}
		}
		if typ == websocket.BinaryMessage {
			t.buf = line[:0]
		}
		switch {
		case ev.Cursor != nil:
			t.cursor = strconv.FormatUint(*ev.Cursor+1, 10)
		case byTime:
			if *ev.TimeUS != t.lastTime || t.atLastTime == nil {
				t.lastTime, t.atLastTime = *ev.TimeUS, map[string]struct{}{}
			}
			t.atLastTime[string(msg)] = struct{}{}
			t.cursor = strconv.FormatUint(*ev.TimeUS, 10)
		}
		t.printed++
		if t.cfg.limit > 0 && t.printed >= t.cfg.limit {
			closeNormally(conn)
			return errTailLimit
		}
	}
}

// liveStart is where a live tail resumes after a drop before its first
// print: the seq cursor its connection started at, which backstream says
// in resp (subscribe.StartCursorHeader); from a server that does not (a
// Jetstream), the time of the connection by this machine's clock, which
// such a server reads as an inclusive time (a clock ahead of the server's
// skips what the server received in between).
func liveStart(resp *http.Response) string {
	if c := resp.Header.Get(subscribe.StartCursorHeader); c != "" {
		if _, err := strconv.ParseUint(c, 10, 64); err == nil {
			return c
		}
	}
	return strconv.FormatInt(time.Now().UnixMicro(), 10)
}

// closeNormally says goodbye (1000) and closes the socket.
func closeNormally(conn *websocket.Conn) {
	deadline := time.Now().Add(time.Second)
	if conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), deadline) == nil {
		// The close handshake: read, discarding the events still on their
		// way, until the server's close answers ours (or a second passes),
		// so the server sees a client that closed, not a write that failed
		// on a socket closed under it.
		_ = conn.SetReadDeadline(deadline)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				break
			}
		}
	}
	_ = conn.Close()
}

// refusal turns an HTTP answer to the upgrade into an error: 400 is a
// usage error showing the server's JSON; 503 names the server's phase;
// 429 (a per-address cap, whose slots free up as others leave) and 5xx
// may be retried once connected; other 4xx are fatal.
func refusal(resp *http.Response, target string) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, tailMaxErrorBody))
	_ = resp.Body.Close()
	body = bytes.TrimSpace(body)
	var one bytes.Buffer
	if json.Compact(&one, body) == nil {
		body = one.Bytes() // the server's JSON on one line
	}
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return fmt.Errorf("%w: %s refused the request (400): %s", errUsage, target, body)
	case http.StatusServiceUnavailable:
		var st struct {
			Phase   string `json:"phase"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(body, &st)
		if st.Phase != "" {
			return fmt.Errorf("tail: %s is not ready (phase %q); retry later", target, st.Phase)
		}
		if st.Message == "" {
			st.Message = string(body)
		}
		return fmt.Errorf("tail: %s is unavailable (503): %s", target, st.Message)
	}
	if len(body) > 512 {
		body = append(body[:512:512], "…"...)
	}
	err := fmt.Errorf("tail: %s answered %s: %s", target, resp.Status, body)
	if resp.StatusCode == http.StatusNotFound {
		// serve's admin listener answers /status and the probes, not
		// /subscribe: the likeliest wrong address.
		err = fmt.Errorf("%w (no /subscribe there: give backstream serve's public --listen address, not its --admin-listen)", err)
	}
	if resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests {
		err = tailFatal{err}
	}
	return err
}

// redact drops the query (it may hold 10,000 DIDs) from a URL for messages.
func redact(target string) string {
	if i := strings.IndexByte(target, '?'); i >= 0 {
		return target[:i]
	}
	return target
}
