package natssink

// This file owns the Sink: its configuration, its run loop (sessions with
// backoff between them) and its status.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/backoff"
)

// Defaults.
const (
	DefaultStream          = "backstream"
	DefaultWindow          = 16384            // unacknowledged publishes in flight (about 8 MiB of posts)
	DefaultDuplicateWindow = 2 * time.Minute  // the stream's de-duplication window (a second guard; see doc.go)
	DefaultAckTimeout      = 10 * time.Second // a publish not acknowledged by then fails the session
	DefaultPositionEvery   = time.Second      // how often the position is written (when it moved)
)

// MaxReplicas is the most replicas a JetStream stream may have.
const MaxReplicas = 5

// DefaultBackoff spaces sessions after a failure.
var DefaultBackoff = backoff.Policy{Base: 250 * time.Millisecond, Max: 10 * time.Second}

// DefaultTooLargeBackoff spaces the rechecks of an event larger than the
// servers' max_payload: only an operator raising it can end that state.
var DefaultTooLargeBackoff = backoff.Policy{Base: 5 * time.Second, Max: time.Minute}

// Config configures a Sink.
type Config struct {
	// URLs are the NATS servers, comma-separated. Required.
	URLs string
	// Stream is the stream's name and its subjects' prefix (DefaultStream).
	Stream string
	// Replicas of a stream the sink creates; 0: 3 when the cluster shows
	// at least 3 servers, else 1.
	Replicas int
	// Creds is a NATS credentials file ("" none).
	Creds string
	// From is the archive seq an empty stream starts from (0: the start).
	From uint64
	// Window bounds the unacknowledged publishes (DefaultWindow).
	Window int
	// DuplicateWindow of a created stream (DefaultDuplicateWindow).
	DuplicateWindow time.Duration
	// AckTimeout (DefaultAckTimeout) and PositionEvery (DefaultPositionEvery).
	AckTimeout    time.Duration
	PositionEvery time.Duration
	// Backoff between failed sessions (DefaultBackoff).
	Backoff backoff.Policy
	// TooLargeBackoff between the rechecks of an event larger than the
	// servers' max_payload (DefaultTooLargeBackoff).
	TooLargeBackoff backoff.Policy

	Store   *archive.Store  // required
	Writer  *archive.Writer // required: its live log, and the position's unit
	Metrics *Metrics
	Logger  *slog.Logger
	Now     func() time.Time
	// Options are extra connection options (tests: shorter reconnects).
	Options []nats.Option
}

// Status is the sink's section of /status.
type Status struct {
	Stream      string   `json:"stream"`
	State       string   `json:"state"`
	Position    uint64   `json:"position"`
	LagEvents   uint64   `json:"lag_events"`
	LagSeconds  float64  `json:"lag_seconds"`
	Errors      uint64   `json:"errors"`
	LastError   string   `json:"last_error,omitempty"`
	ConfigDiffs []string `json:"config_differences,omitempty"`
	// TooLarge is the event the sink is stopped at, in state too_large.
	TooLarge *TooLarge `json:"too_large,omitempty"`
}

// TooLarge is an event whose message is larger than the NATS servers'
// max_payload, or than the stream's max_msg_size: the sink publishes
// nothing after it until the operator raises that limit (the servers'
// config, then a reload; or the stream's config), and never skips it. One
// of MaxPayload and MaxMsgSize is set: the limit it is over.
type TooLarge struct {
	Seq        uint64 `json:"seq"`
	Bytes      int    `json:"bytes"`
	MaxPayload int64  `json:"max_payload,omitempty"`
	MaxMsgSize int64  `json:"max_msg_size,omitempty"`
}

// Sink publishes the archive into a JetStream stream. Build it with New,
// run it with Run.
type Sink struct {
	cfg Config
	log *slog.Logger

	acked atomic.Uint64             // the position: highest seq acknowledged, none missing below
	conn  atomic.Pointer[nats.Conn] // the connection Run dialled last
	// purged: a session found the stream purged behind it; until the
	// stream is found empty, sessions refuse to publish behind the purge.
	purged atomic.Bool
	// removal: the last time a session saw the operator remove the
	// stream's only message, emptying it (nil: none). A later session, or
	// the next run, that finds the same stream still empty there resumes
	// after the removed message, not from From. Read from the store as
	// Run starts, written there when seen (cursor/sink/nats_removed).
	removal atomic.Pointer[archive.SinkRemoval]
	mu      sync.Mutex
	status  Status
	// serverErr is the last error the servers reported on the connection
	// (a permissions violation comes only so) since a publish was last
	// acknowledged.
	serverErr error
}

// CheckURLs reports the first entry of urls (comma-separated, as
// Config.URLs) that is not a server URL nats.go can dial: a scheme of
// nats, tls, ws or wss (websocket and plain ones not mixed), and a host.
// nats.go itself would take a bare word as a host name and retry it
// forever.
func CheckURLs(urls string) error {
	n, ws := 0, false
	for _, e := range strings.Split(urls, ",") {
		if e = strings.TrimSpace(e); e == "" {
			continue
		}
		u, err := url.Parse(e)
		if err != nil || u.Hostname() == "" {
			return fmt.Errorf("server %q: want nats://host[:port] (or tls://, ws://, wss://)", e)
		}
		isWS := u.Scheme == "ws" || u.Scheme == "wss"
		if !isWS && u.Scheme != "nats" && u.Scheme != "tls" {
			return fmt.Errorf("server %q: scheme %q: want nats, tls, ws or wss", e, u.Scheme)
		}
		if n > 0 && isWS != ws {
			return fmt.Errorf("server %q: websocket and non-websocket servers cannot be mixed", e)
		}
		n, ws = n+1, isWS
	}
	if n == 0 {
		return errors.New("no server URL")
	}
	return nil
}

// New checks cfg and fills its defaults. It does not connect.
func New(cfg Config) (*Sink, error) {
	if cfg.URLs == "" || cfg.Store == nil || cfg.Writer == nil {
		return nil, errors.New("natssink: URLs, Store and Writer are required")
	}
	if err := CheckURLs(cfg.URLs); err != nil {
		return nil, fmt.Errorf("natssink: %w", err)
	}
	if cfg.Stream == "" {
		cfg.Stream = DefaultStream
	}
	if strings.ContainsAny(cfg.Stream, ".*> \t") {
		return nil, fmt.Errorf("natssink: stream name %q: no dots, wildcards or spaces", cfg.Stream)
	}
	if cfg.Replicas < 0 || cfg.Replicas > MaxReplicas {
		return nil, fmt.Errorf("natssink: replicas %d: 0 (auto) to %d", cfg.Replicas, MaxReplicas)
	}
	if cfg.Creds != "" {
		if _, err := os.Stat(cfg.Creds); err != nil {
			return nil, fmt.Errorf("natssink: credentials file: %w", err)
		}
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.DuplicateWindow <= 0 {
		cfg.DuplicateWindow = DefaultDuplicateWindow
	}
	if cfg.AckTimeout <= 0 {
		cfg.AckTimeout = DefaultAckTimeout
	}
	if cfg.PositionEvery <= 0 {
		cfg.PositionEvery = DefaultPositionEvery
	}
	if cfg.Backoff.Base <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.TooLargeBackoff.Base <= 0 {
		cfg.TooLargeBackoff = DefaultTooLargeBackoff
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sink{cfg: cfg, log: cfg.Logger}
	s.status = Status{Stream: cfg.Stream, State: StateConnecting}
	return s, nil
}

// Status is a snapshot of the sink for /status.
func (s *Sink) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.status
	st.ConfigDiffs = append([]string(nil), st.ConfigDiffs...)
	if st.TooLarge != nil {
		tl := *st.TooLarge
		st.TooLarge = &tl
	}
	st.Position = s.acked.Load()
	return st
}

// state is the sink's state now.
func (s *Sink) state() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status.State
}

func (s *Sink) setState(state string) {
	s.mu.Lock()
	s.status.State = state
	s.mu.Unlock()
	s.cfg.Metrics.setState(state)
}

// sessionState sets the state of a session under way, except that a full
// stream stays full, and a sink stopped at a too large event stays so,
// until a publish is acknowledged; and a stream without a leader stays so
// while the next session connects (it has one once the session finds
// nothing to publish: the stream's leader answered for its last message).
func (s *Sink) sessionState(state string) {
	s.mu.Lock()
	cur := s.status.State
	s.mu.Unlock()
	switch {
	case cur == StateFull || cur == StateTooLarge:
	case cur == StateNoLeader && state == StateConnecting:
	default:
		s.setState(state)
	}
}

// publishing is the state once a session's first publish is acknowledged.
func (s *Sink) publishing() {
	s.mu.Lock()
	went := s.status.TooLarge
	s.status.TooLarge = nil
	s.serverErr = nil
	s.mu.Unlock()
	if went != nil {
		s.cfg.Metrics.stoppedAt(0)
		s.log.Info("the NATS sink goes on: the event it stopped at was published", "seq", went.Seq, "bytes", went.Bytes)
	}
	s.setState(StatePublishing)
}

// stoppedAt shows the too large event the sink stops at, logging it once.
func (s *Sink) stoppedAt(e *tooLargeError) {
	s.mu.Lock()
	prev := s.status.TooLarge
	s.status.TooLarge = &TooLarge{Seq: e.seq, Bytes: e.bytes, MaxPayload: e.maxPayload, MaxMsgSize: e.maxMsgSize}
	s.mu.Unlock()
	s.cfg.Metrics.stoppedAt(e.seq)
	s.setState(StateTooLarge)
	switch {
	case prev != nil && prev.Seq == e.seq:
	case e.maxPayload == 0:
		s.log.Error("NATS sink stopped: an event is larger than the stream's max_msg_size; it is never skipped: raise max_msg_size (nats stream edit) and the sink goes on",
			"seq", e.seq, "bytes", e.bytes, "max_msg_size", e.maxMsgSize, "position", s.acked.Load())
	default:
		s.log.Error("NATS sink stopped: an event is larger than the servers' max_payload; it is never skipped: raise max_payload (nats-server config, then reload) and the sink goes on",
			"seq", e.seq, "bytes", e.bytes, "max_payload", e.maxPayload, "position", s.acked.Load())
	}
}

// setPosition sets the position outside an acknowledgement (from the
// stored cursor, or where a resume starts): Status and the gauge alike.
func (s *Sink) setPosition(pos uint64) {
	s.acked.Store(pos)
	s.cfg.Metrics.setPosition(pos)
}

// foundPurged records that a session found the stream purged behind
// it, logging it once.
func (s *Sink) foundPurged(e *purgedError) {
	s.fail(errResume, e)
	s.log.Warn("the NATS stream was purged while the sink published into it: the purged events are published again from --nats-from once the stream is empty; purge it again if it is not, or restart backstream if the purge was partial (--keep, --seq) and what it kept is to stay",
		"stream", s.cfg.Stream, "err", e, "from", s.cfg.From)
	s.purged.Store(true)
}

// removed records that a session saw the operator remove a single
// message from the front of the stream, every message it had stored with
// it (the stream's only one), logging it once: not a purge, the sink
// publishes on behind it. When it left the stream empty, and the removed
// message is the session's last acknowledged (seq its archive seq), the
// removal is kept, in memory and durably, so a stream found still empty
// there later is resumed after it.
func (s *Sink) removed(ctx context.Context, info *jetstream.StreamInfo, stored, seq uint64) {
	st := info.State
	s.log.Info("a single message was removed from the front of the NATS stream, leaving none the sink had stored: not a purge, the sink publishes on behind it",
		"stream", s.cfg.Stream, "first_sequence", st.FirstSeq, "last_sequence", st.LastSeq, "messages", st.Msgs)
	if st.Msgs != 0 || stored != st.LastSeq || seq == 0 {
		return
	}
	r := archive.SinkRemoval{Created: info.Created, LastSeq: st.LastSeq, Seq: seq}
	s.removal.Store(&r)
	v, err := archive.EncodeSinkRemoval(r)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalSaveTimeout)
		defer cancel()
		_, err = s.cfg.Writer.Apply(ctx, &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorSinkNATSRemoved, Value: v}}})
	}
	if err != nil {
		s.fail(errPosition, fmt.Errorf("the removal of the stream's only message: %w", err))
	}
}

// serverError keeps an error the servers reported on the connection
// (nats.go's asynchronous error handler; its default prints to stderr),
// logging the first since a publish was last acknowledged.
func (s *Sink) serverError(_ *nats.Conn, _ *nats.Subscription, err error) {
	s.mu.Lock()
	first := s.serverErr == nil
	s.serverErr = err
	s.mu.Unlock()
	if first {
		s.log.Warn("the NATS servers report an error on the sink's connection", "err", err)
	}
}

// fail counts err under kind and keeps it as the last error, a NATS
// failure with the servers' reason that err may not carry.
func (s *Sink) fail(kind string, err error) {
	s.cfg.Metrics.failed(kind)
	if kind != errRender && kind != errPosition {
		err = s.withReason(err)
	}
	s.mu.Lock()
	s.status.Errors++
	s.status.LastError = kind + ": " + err.Error()
	s.mu.Unlock()
}

// withReason adds to err the connection's own last error while it is
// down (an authorization violation), or, without one (no server answers:
// nats.go keeps dialling and keeps no error of it), that it is down, and
// the last error the servers reported since a publish was acknowledged (a
// permissions violation).
func (s *Sink) withReason(err error) error {
	if nc := s.conn.Load(); nc != nil && !nc.IsConnected() {
		switch last := nc.LastError(); {
		case last == nil:
			err = fmt.Errorf("%w (not connected to the NATS servers %s: none answers; nats.go keeps dialling them)", err, s.cfg.URLs)
		case !errors.Is(err, last):
			err = fmt.Errorf("%w (connection: %v)", err, last)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Not when err says it already (nats.go spells an authorization
	// violation in two cases).
	if s.serverErr != nil && !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(s.serverErr.Error())) {
		err = fmt.Errorf("%w (the servers said: %v)", err, s.serverErr)
	}
	return err
}

// Run publishes until ctx ends. It returns nil then, or the error of a
// persistence failure of our own (a store read, the writer); NATS failures
// are retried, never returned.
func (s *Sink) Run(ctx context.Context) error {
	opts := append([]nats.Option{
		nats.Name("backstream"),
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(time.Second),
		// A write the path does not take (a partition that drops
		// packets, a server frozen) blocks a publish, with the store
		// iterator held, and the sink's stop: at most the ack timeout,
		// as a publish not answered (nats.go's default is a minute).
		nats.FlusherTimeout(s.cfg.AckTimeout),
		nats.ErrorHandler(s.serverError),
	}, s.cfg.Options...)
	if s.cfg.Creds != "" {
		opts = append(opts, nats.UserCredentials(s.cfg.Creds))
	}
	switch pos, err := s.cfg.Store.SinkCursor(); {
	case err == nil:
		s.setPosition(pos) // shown until the stream says where it is
	case !errors.Is(err, archive.ErrNotFound):
		return fmt.Errorf("natssink: %w", err)
	}
	switch r, err := s.cfg.Store.SinkRemoval(); {
	case err == nil:
		s.removal.Store(&r)
	case !errors.Is(err, archive.ErrNotFound):
		return fmt.Errorf("natssink: %w", err)
	}
	nc, js, err := s.connect(opts)
	if err != nil {
		return err
	}
	defer func() { nc.Close() }() // the last connection dialled
	mon := s.startMonitor(ctx)
	defer mon()
	s.log.Info("publishing the archive to NATS", "servers", s.cfg.URLs, "stream", s.cfg.Stream)
	loop := backoff.Loop{Policy: s.cfg.Backoff}
	slow := backoff.Loop{Policy: s.cfg.TooLargeBackoff}
	logged, redialed := false, false // one line each per outage
	for {
		if nc.IsClosed() {
			// nats.go closes a connection for good on some server
			// errors (the same authorization error twice in a row):
			// dial again, so the sink goes on once the servers or the
			// credentials are put right.
			if !redialed {
				s.log.Warn("the NATS connection was closed; connecting again", "err", nc.LastError())
				redialed = true
			}
			if nc, js, err = s.connect(opts); err != nil {
				return err
			}
		}
		p := &publisher{sink: s, nc: nc, js: js}
		err := p.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		var fatal *fatalError
		if errors.As(err, &fatal) {
			return fatal.err
		}
		if p.done > 0 {
			loop.Reset()
			slow.Reset()
			logged, redialed = false, false
		}
		var big *tooLargeError
		if errors.As(err, &big) {
			s.stoppedAt(big)
			if backoff.Sleep(ctx, slow.Next()) != nil {
				return nil
			}
			// The client knows max_payload from the server's greeting
			// only: reconnect, so the next session sees a raised one.
			// (A stream's max_msg_size is read at every session.)
			if big.maxPayload > 0 {
				_ = nc.ForceReconnect()
			}
			continue
		}
		if !logged {
			s.log.Warn("NATS sink session failed; the archive buffers, retrying", "err", err, "position", s.acked.Load())
			logged = true
		}
		state := StateRetrying
		var full *fullError
		var noLeader *noLeaderError
		switch {
		case errors.As(err, &full):
			state = StateFull
		case errors.As(err, &noLeader):
			state = StateNoLeader
		}
		s.setState(state)
		if backoff.Sleep(ctx, loop.Next()) != nil {
			return nil
		}
	}
}

// connect dials the servers. With RetryOnFailedConnect it fails only on
// options nats.go refuses; the servers being down or refusing the
// credentials leaves the connection reconnecting.
func (s *Sink) connect(opts []nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(s.cfg.URLs, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("natssink: connect %s: %w", s.cfg.URLs, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("natssink: jetstream: %w", err)
	}
	s.conn.Store(nc)
	return nc, js, nil
}

// fatalError is a failure of our own persistence: Run returns it.
type fatalError struct{ err error }

func (f *fatalError) Error() string { return f.err.Error() }

// finalSaveTimeout bounds the position's last write as the sink stops.
const finalSaveTimeout = time.Second

// startMonitor writes the position and the lag every PositionEvery until
// ctx ends or stop is called, and the position once more then.
func (s *Sink) startMonitor(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.cfg.PositionEvery)
		defer t.Stop()
		var saved uint64
		for {
			select {
			case <-ctx.Done():
				s.saveLast(ctx, saved)
				return
			case <-t.C:
			}
			s.measureLag()
			if pos := s.acked.Load(); pos != saved {
				if err := s.savePosition(ctx, pos); err != nil {
					if ctx.Err() == nil {
						s.fail(errPosition, err)
					}
					continue
				}
				saved = pos
			}
		}
	}()
	return func() { cancel(); <-done }
}

// savePosition submits the position as a unit Put; it does not wait for
// the unit to be durable (the stream, not the position, decides a resume).
func (s *Sink) savePosition(ctx context.Context, pos uint64) error {
	u, err := positionUnit(pos)
	if err != nil {
		return err
	}
	return s.cfg.Writer.Submit(ctx, u)
}

// positionUnit is the unit that writes the position.
func positionUnit(pos uint64) (*archive.Unit, error) {
	v, err := archive.EncodeSeqCursor(pos)
	if err != nil {
		return nil, err
	}
	return &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorSinkNATS, Value: v}}}, nil
}

// saveLast writes the position as the sink stops, and waits until it is
// durable (at most finalSaveTimeout): a stream whose limits emptied it
// while backstream was down is resumed after it (resume). A failure is
// counted only: a writer stopping first refuses it, and the stream, not
// the position, decides every other resume.
func (s *Sink) saveLast(ctx context.Context, saved uint64) {
	pos := s.acked.Load()
	if pos == saved {
		return
	}
	u, err := positionUnit(pos)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finalSaveTimeout)
		defer cancel()
		_, err = s.cfg.Writer.Apply(ctx, u)
	}
	if err != nil {
		s.fail(errPosition, err)
	}
}

// measureLag sets the lag: events between the position and the archive
// tip, and the age of the first event after the position.
func (s *Sink) measureLag() {
	pos, tip := s.acked.Load(), s.cfg.Writer.Live().Tip()
	var events uint64
	var seconds float64
	if tip > pos {
		events = tip - pos
		if us, ok := s.eventTime(pos + 1); ok {
			seconds = max(0, float64(s.cfg.Now().UnixMicro()-us)/1e6)
		}
	}
	s.mu.Lock()
	s.status.LagEvents, s.status.LagSeconds = events, seconds
	s.mu.Unlock()
	s.cfg.Metrics.lag(events, seconds)
}

// eventTime is the time of the first archived event at or after seq.
func (s *Sink) eventTime(seq uint64) (int64, bool) {
	it, err := s.cfg.Store.Events(seq)
	if err != nil {
		return 0, false
	}
	defer it.Close()
	if !it.Next() {
		return 0, false
	}
	return it.Event().TimeUS, true
}
