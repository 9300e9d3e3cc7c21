package subscribe

// This file owns the Server: its configuration, the HTTP routes
// (/subscribe, /status, /healthz, /readyz, /zstd-dictionary), the answers
// given before an upgrade (503 before steady_state, 400 for an invalid
// parameter), and the set of connected subscribers.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/loglimit"
)

// Defaults of the Config tuning knobs.
const (
	DefaultSlowLag      = 1_000_000
	DefaultSlowRate     = 100
	DefaultSlowWindow   = 2 * time.Minute
	DefaultPingInterval = 30 * time.Second
	DefaultWriteTick    = time.Second
	DefaultFlushBytes   = 64 << 10
	DefaultDictSamples  = 20_000
	DefaultRetryAfter   = 30 * time.Second
	// DefaultStallTimeout: a socket write that has not completed for this
	// long closes the subscriber (stalled), whatever its lag.
	DefaultStallTimeout = 60 * time.Second
	// DefaultHelloTimeout: a requireHello subscriber has this long to send
	// its first options_update.
	DefaultHelloTimeout = 30 * time.Second
	// DefaultBufferBudget bounds the output buffers and filters of all
	// subscribers together (each reserves FlushBytes + 64 KiB, 128 KiB by
	// default, and what its filter holds).
	DefaultBufferBudget = 1 << 30
	// DefaultMaxSubscribers and DefaultMaxSubscribersPerIP cap connected
	// subscribers (503 / 429 beyond).
	DefaultMaxSubscribers      = 10_000
	DefaultMaxSubscribersPerIP = 100
	// DefaultMessageRate and DefaultMessageBurst: client messages (text,
	// binary, ping) a connection may send per second, and at once; beyond,
	// it is closed (too_many_messages).
	DefaultMessageRate  = 1.0
	DefaultMessageBurst = 10
)

// DefaultReplayDuty: while subscribers wait for a replay turn, a reader
// slot is busy at most half the time.
const DefaultReplayDuty = 0.5

// DefaultReplayReaders is how many subscribers replay at once: half the
// CPUs (at least one). With DefaultReplayDuty, replay takes at most a
// quarter of the CPUs (at least half of one), leaving the rest to the
// writer and live delivery.
func DefaultReplayReaders() int { return max(1, runtime.GOMAXPROCS(0)/2) }

// Config configures a Server. Store and Writer may be left nil and given
// later with Attach (the HTTP server starts before the store is open).
type Config struct {
	Store  *archive.Store
	Writer *archive.Writer // the archive (ev/) writer; its live log is the live tail
	// Ready reports whether the lifecycle is in steady_state; until then
	// /subscribe answers 503 and /readyz 503. nil: ready once attached.
	Ready func() bool
	// Lagging, when set, says why the archive is not within its staleness
	// bound of the relay (nil: it is); /readyz answers 503 with it while
	// /subscribe still serves what the archive has.
	Lagging func() error
	// Healthy returns the process's fatal error, nil while it is healthy;
	// /healthz answers 503 with it. nil: always healthy.
	Healthy func() error
	// StatusJSON returns the status report (the keys of `backstream status
	// --json`); /status serves it, with the server's own "subscribe" stats
	// added. nil: a report with only those stats.
	StatusJSON func() any
	// PublicStatus, when set, makes Handler the public listener's: it is
	// what its /status and /subscribe's refusal before the archive serves
	// show of the report (it returns the report without what only the
	// operator may see, and leaves the report itself unchanged: StatusJSON
	// may serve one report to many requests), and its /healthz withholds
	// the fatal error's text (WithheldError). StatusHandler(nil) and
	// HealthHandler(false) serve the whole, for the operator's listener.
	// nil: Handler shows everything.
	PublicStatus func(report any) any
	Metrics      *Metrics
	Logger       *slog.Logger

	// D6: a subscriber more than SlowLag events behind the tip whose
	// position advanced slower than SlowRate events/s over SlowWindow is
	// closed (reason too_slow). Anything less falls back to the archive.
	SlowLag    uint64
	SlowRate   float64
	SlowWindow time.Duration
	// PingInterval between server pings (pongs are not awaited: a busy
	// client is never dropped for a late pong; TCP keepalive finds dead
	// peers, and a blocked write is what the slow rule measures).
	PingInterval time.Duration
	// WriteTick is how often a blocked socket write wakes to re-check the
	// slow rule and shutdown.
	WriteTick time.Duration
	// FlushBytes is the buffered output at which a subscriber writes to its
	// socket while it has more to send.
	FlushBytes int
	// DictSamples is how many of the archive's first events train the zstd
	// dictionary.
	DictSamples int
	// RetryAfter is the Retry-After of a 503.
	RetryAfter time.Duration

	// StallTimeout: a subscriber whose socket write has not completed for
	// this long — it does not read, or reads a trickle — is closed (1008,
	// reason stalled), however little it lags.
	StallTimeout time.Duration
	// HelloTimeout: a requireHello subscriber that sends no options_update
	// within this long is closed (1008, reason hello_timeout).
	HelloTimeout time.Duration
	// BufferBudget is the bytes of output buffers and filters all
	// subscribers may reserve together; each reserves
	// bufferReservation(FlushBytes) at the upgrade and keeps within it, and
	// what its filter holds (filter.held) at the upgrade and at each
	// options_update. Beyond it a new subscriber gets 503 (buffer_budget),
	// and an options_update whose filter does not fit closes its connection
	// (1008, buffer_budget); others are never closed for it.
	BufferBudget int64
	// MaxSubscribers caps connected subscribers (503 beyond);
	// MaxSubscribersPerIP caps them per client IP (429 beyond). The client
	// IP is the connection's remote address; with TrustForwardedFor, the
	// last address of X-Forwarded-For (set it only behind a reverse proxy
	// that appends it).
	MaxSubscribers      int
	MaxSubscribersPerIP int
	TrustForwardedFor   bool
	// ReplayReaders is how many subscribers replay at once; each reads one
	// bounded batch, then yields its turn (0: DefaultReplayReaders).
	// ReplayDuty is the share of time a reader slot may be busy, so of a
	// CPU it may take while others wait for a turn: after its turns a slot
	// rests (0: DefaultReplayDuty; 1: never rests).
	ReplayReaders int
	ReplayDuty    float64
	// MessageRate and MessageBurst bound the client messages of one
	// connection (token bucket); beyond, it is closed (too_many_messages).
	MessageRate  float64
	MessageBurst int
	// ScanReplays turns the replay planner off: every replay from the
	// archive scans ev/, as before the replay index existed.
	ScanReplays bool
}

func (c *Config) defaults() {
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.SlowLag == 0 {
		c.SlowLag = DefaultSlowLag
	}
	if c.SlowRate == 0 {
		c.SlowRate = DefaultSlowRate
	}
	if c.SlowWindow == 0 {
		c.SlowWindow = DefaultSlowWindow
	}
	if c.PingInterval == 0 {
		c.PingInterval = DefaultPingInterval
	}
	if c.WriteTick == 0 {
		c.WriteTick = DefaultWriteTick
	}
	if c.FlushBytes == 0 {
		c.FlushBytes = DefaultFlushBytes
	}
	if c.DictSamples == 0 {
		c.DictSamples = DefaultDictSamples
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.HelloTimeout == 0 {
		c.HelloTimeout = DefaultHelloTimeout
	}
	if c.BufferBudget == 0 {
		c.BufferBudget = DefaultBufferBudget
	}
	if c.MaxSubscribers == 0 {
		c.MaxSubscribers = DefaultMaxSubscribers
	}
	if c.MaxSubscribersPerIP == 0 {
		c.MaxSubscribersPerIP = DefaultMaxSubscribersPerIP
	}
	if c.ReplayReaders == 0 {
		c.ReplayReaders = DefaultReplayReaders()
	}
	if c.ReplayDuty <= 0 || c.ReplayDuty > 1 {
		c.ReplayDuty = DefaultReplayDuty
	}
	if c.MessageRate == 0 {
		c.MessageRate = DefaultMessageRate
	}
	if c.MessageBurst == 0 {
		c.MessageBurst = DefaultMessageBurst
	}
}

// source is what subscribers read: the store and the writer's live log.
type source struct {
	store  *archive.Store
	writer *archive.Writer
	live   *archive.LiveLog
}

// Server serves /subscribe and the status endpoints.
type Server struct {
	cfg    Config
	log    *slog.Logger
	m      *Metrics
	src    atomic.Pointer[source]
	codecs *codecs

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once

	readers  readerSlots     // archive readers at once
	bufBytes int64           // what one subscriber reserves from the buffer budget
	lines    *loglimit.Every // one log line per refusal reason, and per disconnect reason, per lineEvery

	mu     sync.Mutex
	subs   map[*subscriber]struct{}
	adm    admission
	closed bool
	nextID uint64
}

// New builds a Server; nothing runs until its Handler serves requests.
func New(cfg Config) (*Server, error) {
	cfg.defaults()
	s := &Server{cfg: cfg, log: cfg.Logger, m: cfg.Metrics, subs: make(map[*subscriber]struct{}),
		readers: newReaderSlots(cfg.ReplayReaders, cfg.ReplayDuty), bufBytes: bufferReservation(cfg.FlushBytes),
		lines: loglimit.New(lineEvery, nil), adm: admission{perIP: map[string]int{}}}
	c, err := newCodecs(cfg.DictSamples, s.src.Load)
	if err != nil {
		return nil, err
	}
	s.codecs = c
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if cfg.Store != nil && cfg.Writer != nil {
		s.Attach(cfg.Store, cfg.Writer)
	}
	return s, nil
}

// Attach gives the server the store and the archive writer whose live log
// it follows. Subscribers connected earlier keep their source.
func (s *Server) Attach(store *archive.Store, w *archive.Writer) {
	s.src.Store(&source{store: store, writer: w, live: w.Live()})
}

// Close ends every subscriber (close code 1001) and waits for them. The
// Handler refuses new subscribers afterwards.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.closeOnce.Do(s.codecs.close)
	return nil
}

// Handler serves GET /subscribe, /status, /healthz, /readyz and
// /zstd-dictionary.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /subscribe", s.handleSubscribe)
	mux.Handle("GET /status", s.StatusHandler(s.cfg.PublicStatus))
	mux.Handle("GET /healthz", s.HealthHandler(s.cfg.PublicStatus != nil))
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !s.ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready\n"))
			return
		}
		if s.cfg.Lagging != nil {
			if err := s.cfg.Lagging(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = fmt.Fprintf(w, "lagging: %v\n", err)
				return
			}
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	mux.HandleFunc("GET /zstd-dictionary", s.handleDictionary)
	return mux
}

// WithheldError is what the public listener says in place of an error's
// text, which may name local files: that there is one, and where it is
// shown.
const WithheldError = "an error whose text only the admin listener shows (its /status and /healthz)"

// HealthHandler serves /healthz: 200 ok while Healthy reports no error,
// 503 naming it after, or, withhold, saying there is one (WithheldError)
// without its text. Handler serves it withholding when PublicStatus is
// set.
func (s *Server) HealthHandler(withhold bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.cfg.Healthy != nil {
			if err := s.cfg.Healthy(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				if withhold {
					_, _ = fmt.Fprintf(w, "unhealthy: %s\n", WithheldError)
					return
				}
				_, _ = fmt.Fprintf(w, "unhealthy: %v\n", err)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
}

// ready: attached, and the lifecycle says steady_state.
func (s *Server) ready() bool {
	if s.src.Load() == nil {
		return false
	}
	return s.cfg.Ready == nil || s.cfg.Ready()
}

// Stats is the server's part of the status report.
type Stats struct {
	Subscribers int `json:"subscribers"`
	// TipSeq is the highest durable seq; TipTimeUS its archive time when the
	// live log holds it (0 otherwise); TipAgeSeconds how long ago that was.
	TipSeq        uint64  `json:"tip_seq"`
	TipTimeUS     int64   `json:"tip_time_us,omitempty"`
	TipAgeSeconds float64 `json:"tip_age_seconds,omitempty"`
	// LiveFloor is the lowest seq the live log holds: subscribers below it
	// read the archive.
	LiveFloor uint64 `json:"live_floor"`
	// Replaying counts subscribers replaying: below LiveFloor, reading the
	// archive, or catching up through live-log entries older than a second.
	Replaying int `json:"replaying"`
}

// Stats reports subscribers and the live tail.
func (s *Server) Stats() Stats {
	var st Stats
	src := s.src.Load()
	if src != nil {
		st.TipSeq = src.live.Tip()
		var ents []*archive.LiveEntry
		ents, st.LiveFloor = src.live.ReadEntries(st.TipSeq, ents, 1)
		if len(ents) == 1 {
			st.TipTimeUS = ents[0].Event.TimeUS
			// time_us may run ahead of the clock (after it stepped back).
			st.TipAgeSeconds = max(0, time.Since(time.UnixMicro(st.TipTimeUS)).Seconds())
		}
	}
	s.mu.Lock()
	st.Subscribers = len(s.subs)
	for sub := range s.subs {
		if sub.position.Load() < st.LiveFloor || sub.replaying.Load() {
			st.Replaying++
		}
	}
	s.mu.Unlock()
	return st
}

// statusMap is the status report as a JSON object, as view makes it (nil:
// as StatusJSON returns it), with "subscribe" added.
func (s *Server) statusMap(view func(report any) any) map[string]any {
	m := map[string]any{}
	if s.cfg.StatusJSON != nil {
		v := s.cfg.StatusJSON()
		if view != nil {
			v = view(v)
		}
		b, err := json.Marshal(v)
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil || m == nil {
			m = map[string]any{"status": v}
		}
	}
	if _, ok := m["subscribe"]; !ok {
		var sm map[string]any
		b, _ := json.Marshal(s.Stats())
		_ = json.Unmarshal(b, &sm)
		m["subscribe"] = sm
	}
	return m
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// StatusHandler serves /status: the report StatusJSON returns, as view
// makes it (nil: whole), with the server's "subscribe" stats added. It
// always answers 200: JSON, or an HTML page for browsers. Handler serves
// it with PublicStatus.
func (s *Server) StatusHandler(view func(report any) any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m := s.statusMap(view)
		if wantsHTML(r) {
			writeStatusHTML(w, m)
			return
		}
		writeJSON(w, http.StatusOK, m)
	})
}

func (s *Server) handleDictionary(w http.ResponseWriter, r *http.Request) {
	d, err := s.codecs.dictionary(r.Context())
	if errors.Is(err, errNoDictionary) {
		writeJSON(w, http.StatusNotFound, map[string]any{"error": "NoDictionary", "message": err.Error()})
		return
	}
	if err != nil {
		s.log.Error("subscribe: the zstd dictionary", "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "InternalError", "message": "reading or storing the dictionary failed"})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("X-Zstd-Dictionary-Id", strconv.FormatUint(uint64(d.id), 10))
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=backstream-%d.zstd-dict", d.id))
	_, _ = w.Write(d.raw)
}

var upgrader = websocket.Upgrader{
	CheckOrigin:     func(*http.Request) bool { return true },
	ReadBufferSize:  4096,
	WriteBufferSize: 256, // gorilla writes only control frames here
	// permessage-deflate when the client offers it, as Jetstream does:
	// gorilla negotiates it and inflates client messages; the subscriber
	// deflates its own frames (deflate.go).
	EnableCompression: true,
}

// StartCursorHeader names the upgrade response's header that holds the
// seq cursor the connection's stream starts at (an extension; v1 clients
// ignore it). A client dropped before its first event reconnects with
// cursor=<it> and loses nothing of what was archived meanwhile; a live
// start is the tip's next seq at the upgrade.
const StartCursorHeader = "Backstream-Cursor"

// maxClientMessage bounds one client message (an options_update with
// 10,000 DIDs is about 400 KB).
const maxClientMessage = 2 << 20

// handleSubscribe answers GET /subscribe: every refusal (not ready, a bad
// parameter, no upgrade, over a cap) before the upgrade, with a status
// and a JSON error; an admitted subscriber is served until it ends.
func (s *Server) handleSubscribe(w http.ResponseWriter, r *http.Request) {
	src := s.src.Load()
	if !s.ready() || src == nil {
		s.refuseNotReady(w)
		return
	}
	req, ok := s.parseSubscribe(w, r)
	if !ok {
		return
	}
	start, err := startSeq(src, req)
	if err != nil {
		s.log.Error("subscribe: find cursor time", "cursor", req.cursorValue, "err", err)
		writeJSON(w, http.StatusInternalServerError, map[string]any{"error": "InternalError", "message": "reading the archive failed"})
		return
	}
	var dz *zdict
	if req.dictID != 0 {
		var err error
		if dz, err = s.codecs.dictionary(r.Context()); err != nil || dz.id != req.dictID {
			writeJSON(w, http.StatusBadRequest, map[string]any{"error": "InvalidParameter", "param": paramDictionary, "message": "zstdDictionary: the dictionary changed"})
			return
		}
	}
	ip := clientIP(r, s.cfg.TrustForwardedFor)
	id, ok := s.admit(w, ip, req.filter.held)
	if !ok {
		return
	}
	hj := &hijacker{ResponseWriter: w}
	ws, err := upgrader.Upgrade(hj, r, http.Header{StartCursorHeader: {strconv.FormatUint(start, 10)}})
	if err != nil {
		// gorilla has answered the client.
		s.m.refuse(refusedUpgrade)
		s.release(ip, req.filter.held)
		s.wg.Done()
		return
	}
	// net/http holds the request (its query and headers, up to the
	// listener's 1 MiB) until the handler returns: the subscriber is served
	// on its own goroutine, and the request let go.
	go s.serveSubscriber(newSubscriber(s, src, ws, hj.conn, req, dz, start, id, r), ip)
}

// refuseNotReady answers a subscriber before the archive serves: 503, the
// status and a Retry-After.
func (s *Server) refuseNotReady(w http.ResponseWriter) {
	s.m.refuse(refusedNotReady)
	m := s.statusMap(s.cfg.PublicStatus)
	phase, _ := m["phase"].(string)
	m["error"] = "NotReady"
	m["message"] = "backstream is not serving subscribers yet (phase " + strconv.Quote(phase) + "); retry later"
	w.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.RetryAfter/time.Second)))
	writeJSON(w, http.StatusServiceUnavailable, m)
}

// parseSubscribe parses r's query and headers into a subscriber's request, or
// answers the refusal (a bad parameter, not a websocket upgrade) and
// reports false.
func (s *Server) parseSubscribe(w http.ResponseWriter, r *http.Request) (*request, bool) {
	q, perr := parseQuery(r.URL.RawQuery)
	var req *request
	if perr == nil {
		req, perr = parseRequest(q, r.Header, func() (uint32, error) { return s.codecs.currentID(r.Context()) })
	}
	if perr != nil {
		s.m.refuse(refusedBadParam)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "InvalidParameter", "param": perr.Param, "message": perr.Message})
		return nil, false
	}
	if len(req.unknown) > 0 {
		s.m.unknownParam(len(req.unknown))
		s.log.Debug("subscribe: ignoring unknown parameters", "count", len(req.unknown),
			"params", loglimit.Clip(strings.Join(req.unknown, ","), maxLogDetail))
	}
	if !websocket.IsWebSocketUpgrade(r) {
		s.m.refuse(refusedUpgrade)
		writeJSON(w, http.StatusBadRequest, map[string]any{"error": "NotWebsocket", "message": "GET /subscribe is a websocket endpoint"})
		return nil, false
	}
	return req, true
}

// startSeq is where req's subscriber starts, resolved before the upgrade:
// the tip's next seq for live and beyond the tip, else the cursor's seq or
// the first event at or after its time.
func startSeq(src *source, req *request) (uint64, error) {
	switch req.cursor {
	case cursorSeq:
		start := max(uint64(req.cursorValue), 1)
		if tip := src.live.Tip(); start > tip+1 {
			start = tip + 1 // beyond the tip: live
		}
		return start, nil
	case cursorTime:
		return src.store.SeqAtTime(req.cursorValue)
	}
	return src.live.Tip() + 1, nil
}

// admit takes a subscriber's place under the caps for a client at ip whose
// filter holds filterBytes: its id, and one count in s.wg and ip's the
// caller gives back (s.wg.Done, s.release). Refused (stopping, or over a
// cap), it answers and reports false.
func (s *Server) admit(w http.ResponseWriter, ip string, filterBytes int64) (uint64, bool) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"error": "ShuttingDown", "message": "the server is stopping"})
		return 0, false
	}
	if ref := s.admitLocked(ip, filterBytes); ref != nil {
		s.mu.Unlock()
		s.refuseLimit(w, ref, ip)
		return 0, false
	}
	s.wg.Add(1)
	s.nextID++
	id := s.nextID
	s.mu.Unlock()
	return id, true
}

// serveSubscriber runs an upgraded subscriber from ip until it ends,
// counted in s.subs and the metrics meanwhile, then gives back its place
// (s.release, s.wg.Done).
func (s *Server) serveSubscriber(sub *subscriber, ip string) {
	defer s.wg.Done()
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	s.m.connected(1)
	reason := sub.run(s.ctx)
	s.m.connected(-1)
	s.m.disconnected(reason)
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
	s.release(ip, sub.filtHeld) // its last filter's (its reader has returned)
}

// refuseLimit answers a request refused by a subscriber limit: the status,
// Retry-After and a JSON error, counted, and logged once a minute per
// reason.
func (s *Server) refuseLimit(w http.ResponseWriter, ref *refusal, ip string) {
	s.m.refuse(ref.reason)
	s.lines.Log(s.log, slog.LevelWarn, "refused/"+ref.reason, "subscribe: refusing subscribers at a limit",
		"reason", ref.reason, "last_client", ip, "detail", ref.message)
	w.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.RetryAfter/time.Second)))
	writeJSON(w, ref.code, map[string]any{"error": ref.errName, "message": ref.message})
}

// errorsIsTimeout reports a deadline expiry.
func errorsIsTimeout(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne) && ne.Timeout()
}
