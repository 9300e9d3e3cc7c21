package subscribe

// This file owns one subscriber: a cursor over the archive and the live
// log. It reads ev/ from Pebble while its next seq is below
// the live log's floor and the live log from there on, so replay hands
// over to live with no gap and no duplicate (D2), and a subscriber that
// falls behind the live log simply becomes a replaying one (D6).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
)

const (
	liveBatch     = 512              // live entries read per step
	replayChunk   = 512              // archive events read between checks of the live floor
	iterMaxAge    = 10 * time.Second // reopen a replay iterator this often, so it pins no old sstables
	iterMaxEvents = 1 << 18
	// replayFlushEvery: a replaying subscriber whose filter admits few
	// events still gets them at least this often.
	replayFlushEvery = 50 * time.Millisecond
	closeGrace       = time.Second // how long a final close frame may take to write
)

// Websocket close codes we send.
const (
	closeGoingAway     = 1001
	closePolicy        = 1008
	closeInternalError = 1011
)

// errTooSlow: the slow rule fired during a blocked write.
var errTooSlow = errors.New("subscriber stayed far behind while reading slower than the floor rate")

// errShutdown: the server is closing.
var errShutdown = errors.New("server shutting down")

type subscriber struct {
	srv   *Server
	log   *slog.Logger
	ws    *websocket.Conn
	sock  *sockConn
	store *archive.Store
	live  *archive.LiveLog
	dict  *zdict // non-nil: compress with the dictionary
	comp  bool
	hello bool // requireHello: wait for the first options_update

	filt atomic.Pointer[filter]

	// The cursor: every seq below next has been sent or filtered out.
	next uint64
	// position mirrors next for Stats (next itself is owned by the
	// subscriber goroutine).
	position atomic.Uint64

	// Output not yet written, and what it holds.
	out       []byte
	nLive     int
	nReplay   int
	liveTimes []int64 // TimeUS of the live events in out (delivery latency)

	// The slow rule: when the subscriber first was more than SlowLag behind
	// in the current window, and its position then.
	slowSince time.Time
	slowFrom  uint64
	lastFlush time.Time

	// Replay from the archive.
	it       *archive.EventIter
	itNext   uint64 // the seq the iterator yields next (valid while it != nil)
	itOpened time.Time
	itCount  int
	rend     Renderer
	scratch  []byte
	zbuf     []byte

	ents []*archive.LiveEntry

	// From the reader goroutine.
	helloCh   chan struct{} // closed by the first valid options_update
	helloOnce sync.Once
	ended     chan endReason // capacity 1: the reader's reason to stop
	readDone  chan struct{}
}

type endReason struct {
	reason string
	detail string
}

func newSubscriber(s *Server, src *source, ws *websocket.Conn, sock *sockConn, req *request, dz *zdict, start, id uint64, r *http.Request) *subscriber {
	sub := &subscriber{
		srv: s, ws: ws, sock: sock, store: src.store, live: src.live,
		dict: dz, comp: req.compress, hello: req.requireHello,
		next:     start,
		rend:     Renderer{Cursor: true},
		helloCh:  make(chan struct{}),
		ended:    make(chan endReason, 1),
		readDone: make(chan struct{}),
		out:      make([]byte, 0, s.cfg.FlushBytes+16<<10),
	}
	sub.log = s.log.With("subscriber", id, "remote", r.RemoteAddr)
	sub.filt.Store(req.filter)
	sub.position.Store(start)
	return sub
}

// end records why the connection must stop (first reason wins).
func (s *subscriber) end(reason, detail string) {
	select {
	case s.ended <- endReason{reason, detail}:
	default:
	}
}

// readLoop reads client frames: options_update messages replace the
// filter; gorilla answers pings and close frames itself (through sockConn).
func (s *subscriber) readLoop() {
	defer close(s.readDone)
	s.ws.SetReadLimit(maxClientMessage)
	for {
		typ, r, err := s.ws.NextReader()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				s.end(ReasonClientClosed, err.Error())
			} else {
				s.end(ReasonReadError, err.Error())
			}
			return
		}
		if typ != websocket.TextMessage {
			_, _ = io.Copy(io.Discard, r) // Jetstream ignores binary messages too
			continue
		}
		b, err := io.ReadAll(r)
		if err != nil {
			s.end(ReasonReadError, err.Error())
			return
		}
		f, err := parseClientMessage(b)
		if err != nil {
			s.end(ReasonBadOptions, err.Error())
			return
		}
		if f == nil {
			continue // a message type we do not know: ignored, as Jetstream does
		}
		s.filt.Store(f)
		s.helloOnce.Do(func() { close(s.helloCh) })
	}
}

// run serves the connection until it ends and returns the reason.
func (s *subscriber) run(ctx context.Context) string {
	go s.readLoop()
	// Send the handshake response gorilla queued.
	reason, detail := s.serve(ctx)
	s.closeIter()
	s.finish(reason, detail)
	return reason
}

// serve is the main loop; it returns when the connection must end.
func (s *subscriber) serve(ctx context.Context) (reason, detail string) {
	ping := time.NewTicker(s.srv.cfg.PingInterval)
	defer ping.Stop()
	if err := s.flush(ctx); err != nil {
		return s.writeFailure(err)
	}
	if s.hello {
		for waiting := true; waiting; {
			select {
			case <-s.helloCh:
				waiting = false
			case e := <-s.ended:
				return e.reason, e.detail
			case <-ctx.Done():
				return ReasonShutdown, "server shutting down"
			case <-s.sock.kick:
				if err := s.flush(ctx); err != nil {
					return s.writeFailure(err)
				}
			case <-ping.C:
				s.out = appendFrame(s.out, opPing, nil)
				if err := s.flush(ctx); err != nil {
					return s.writeFailure(err)
				}
			}
		}
	}
	for {
		select {
		case e := <-s.ended:
			return e.reason, e.detail
		case <-ctx.Done():
			return ReasonShutdown, "server shutting down"
		case <-ping.C:
			s.out = appendFrame(s.out, opPing, nil)
		default:
		}
		wake := s.live.Wait()
		var floor uint64
		s.ents, floor = s.live.ReadEntries(s.next, s.ents[:0], liveBatch)
		if s.next < floor {
			if err := s.replay(ctx, floor); err != nil {
				if errors.Is(err, errTooSlow) || errors.Is(err, errShutdown) || isWriteErr(err) {
					return s.writeFailure(err)
				}
				s.log.Error("subscribe: replay from the archive failed", "next", s.next, "err", err)
				return ReasonInternalError, "reading the archive failed"
			}
			continue
		}
		s.closeIter()
		if len(s.ents) == 0 {
			// Caught up: write what is buffered, then wait for the next
			// publish (wake was taken before the read, so none is missed).
			if err := s.flush(ctx); err != nil {
				return s.writeFailure(err)
			}
			if s.live.Closed() && s.live.Tip() < s.next {
				return ReasonShutdown, "the archive writer stopped"
			}
			select {
			case <-wake:
			case e := <-s.ended:
				return e.reason, e.detail
			case <-ctx.Done():
				return ReasonShutdown, "server shutting down"
			case <-s.sock.kick:
				if err := s.flush(ctx); err != nil {
					return s.writeFailure(err)
				}
			case <-ping.C:
				s.out = appendFrame(s.out, opPing, nil)
				if err := s.flush(ctx); err != nil {
					return s.writeFailure(err)
				}
			}
			continue
		}
		for _, e := range s.ents {
			if e.Event.Seq != s.next {
				// The live log's seqs are contiguous; anything else is a bug
				// that would break D2, so stop rather than skip or repeat.
				s.log.Error("subscribe: live log out of step", "next", s.next, "got", e.Event.Seq)
				return ReasonInternalError, "live log out of step"
			}
			s.next++
			s.sendLive(e)
		}
		clear(s.ents)
		if len(s.out) >= s.srv.cfg.FlushBytes {
			if err := s.flush(ctx); err != nil {
				return s.writeFailure(err)
			}
		}
	}
}

// sendLive appends a live event's shared frame if the filter admits it.
func (s *subscriber) sendLive(e *archive.LiveEntry) {
	f := s.filt.Load()
	if !f.admit(e.Event) {
		return
	}
	fr, first := liveFrame(e)
	if fr.err != nil {
		if first {
			s.srv.m.renderError()
			s.srv.log.Error("subscribe: cannot render archived event; skipped", "seq", e.Event.Seq, "err", fr.err)
		}
		return
	}
	p := fr.payload(s.srv.codecs, s.comp, s.dict)
	if f.maxSize > 0 && len(p) > f.maxSize {
		s.srv.m.skippedTooLarge()
		return
	}
	s.out = appendFrame(s.out, s.opcode(), p)
	s.nLive++
	s.liveTimes = append(s.liveTimes, e.Event.TimeUS)
}

func (s *subscriber) opcode() byte {
	if s.comp {
		return opBinary
	}
	return opText
}

// replay reads up to replayChunk events from the archive at s.next, and
// stops at floor, the live log's floor as the caller saw it: from there the
// live log's shared frames serve (if the floor has moved on meanwhile, the
// caller comes back here). An exhausted iterator is closed, not taken as
// "caught up": the caller re-reads the live floor and comes back here if
// still below it.
func (s *subscriber) replay(ctx context.Context, floor uint64) error {
	now := time.Now()
	if s.it != nil && (s.itNext != s.next || now.Sub(s.itOpened) > iterMaxAge || s.itCount > iterMaxEvents) {
		s.closeIter()
	}
	fresh := false
	if s.it == nil {
		it, err := s.store.Events(s.next)
		if err != nil {
			return err
		}
		s.it, s.itNext, s.itOpened, s.itCount, fresh = it, s.next, now, 0, true
	}
	f := s.filt.Load()
	for n := 0; n < replayChunk && s.next < floor; n++ {
		if !s.it.Next() {
			err := s.it.Err()
			s.closeIter()
			if err != nil {
				return err
			}
			if fresh && n == 0 {
				// Below the live floor yet nothing in the archive from here:
				// the archive lost events the live log has published.
				return fmt.Errorf("subscribe: archive has no event at or after seq %d below the live floor", s.next)
			}
			break
		}
		ev := s.it.Event()
		s.next = ev.Seq + 1
		s.itNext = s.next
		s.itCount++
		if f.admit(ev) {
			s.sendReplay(ev, f)
		}
		if len(s.out) >= s.srv.cfg.FlushBytes {
			if err := s.flush(ctx); err != nil {
				return err
			}
			f = s.filt.Load()
		}
	}
	now = time.Now()
	s.position.Store(s.next)
	if len(s.out) > 0 && now.Sub(s.lastFlush) >= replayFlushEvery {
		// A sparse filter fills the buffer slowly: do not sit on events.
		return s.flush(ctx)
	}
	if s.slow(now) {
		return errTooSlow
	}
	return nil
}

// sendReplay renders an archive event for this subscriber alone.
func (s *subscriber) sendReplay(ev *archive.Event, f *filter) {
	var err error
	s.scratch, err = s.rend.AppendJSON(s.scratch[:0], ev)
	if err != nil {
		s.srv.m.renderError()
		s.log.Error("subscribe: cannot render archived event; skipped", "seq", ev.Seq, "err", err)
		return
	}
	p := s.scratch
	if s.comp {
		if s.dict != nil {
			s.zbuf = s.dict.enc.EncodeAll(p, s.zbuf[:0])
		} else {
			s.zbuf = s.srv.codecs.plain.EncodeAll(p, s.zbuf[:0])
		}
		p = s.zbuf
	}
	if f.maxSize > 0 && len(p) > f.maxSize {
		s.srv.m.skippedTooLarge()
		return
	}
	s.out = appendFrame(s.out, s.opcode(), p)
	s.nReplay++
}

func (s *subscriber) closeIter() {
	if s.it != nil {
		if err := s.it.Close(); err != nil {
			s.log.Warn("subscribe: closing archive iterator", "err", err)
		}
		s.it = nil
	}
}

// writeErr marks a socket write failure.
type writeErr struct{ err error }

func (e *writeErr) Error() string { return "subscribe: write: " + e.err.Error() }
func (e *writeErr) Unwrap() error { return e.err }

func isWriteErr(err error) bool {
	var we *writeErr
	return errors.As(err, &we)
}

func (s *subscriber) writeFailure(err error) (string, string) {
	switch {
	case errors.Is(err, errTooSlow):
		return ReasonTooSlow, fmt.Sprintf("consumer too slow: more than %d events behind, reading under %.0f events/s for %s",
			s.srv.cfg.SlowLag, s.srv.cfg.SlowRate, s.srv.cfg.SlowWindow)
	case errors.Is(err, errShutdown):
		return ReasonShutdown, "server shutting down"
	}
	return ReasonWriteError, err.Error()
}

// flush writes the buffered frames (and any control frames gorilla
// queued). A write that blocks wakes every WriteTick to apply the slow rule
// and notice shutdown; it never gives up on a client that is reading.
func (s *subscriber) flush(ctx context.Context) error {
	s.out = s.sock.takePending(s.out)
	if len(s.out) == 0 {
		s.position.Store(s.next)
		return nil
	}
	b := s.out
	tick := s.srv.cfg.WriteTick
	for len(b) > 0 {
		_ = s.sock.Conn.SetWriteDeadline(time.Now().Add(tick))
		n, err := s.sock.Conn.Write(b)
		b = b[n:]
		if err == nil {
			continue
		}
		if !errorsIsTimeout(err) {
			return &writeErr{err}
		}
		if ctx.Err() != nil {
			s.out = append(s.out[:0], b...)
			return errShutdown
		}
		if s.slow(time.Now()) {
			s.out = append(s.out[:0], b...)
			return errTooSlow
		}
	}
	now := time.Now()
	m := s.srv.m
	m.sent(s.nLive, s.nReplay, len(s.out))
	if len(s.liveTimes) > 0 {
		nowUS := now.UnixMicro()
		for _, t := range s.liveTimes {
			m.observeDelivery(float64(nowUS-t) / 1e6)
		}
		s.liveTimes = s.liveTimes[:0]
	}
	s.nLive, s.nReplay = 0, 0
	s.out = s.out[:0]
	s.lastFlush = now
	s.position.Store(s.next)
	if s.slow(now) {
		return errTooSlow
	}
	return nil
}

// slow applies the rule of D6: true when the subscriber has been more than
// SlowLag events behind the tip for a whole SlowWindow while its cursor
// advanced slower than SlowRate events/s. Falling behind alone is fine: the
// archive is the buffer. The cursor only advances as fast as the socket
// takes data (a full buffer is written before more is read), so a client
// that does not read holds it still.
func (s *subscriber) slow(now time.Time) bool {
	cfg := &s.srv.cfg
	pos := s.next
	tip := s.live.Tip()
	if tip < pos || tip-pos < cfg.SlowLag {
		s.slowSince = time.Time{}
		return false
	}
	if s.slowSince.IsZero() {
		s.slowSince, s.slowFrom = now, pos
		return false
	}
	el := now.Sub(s.slowSince)
	if el < cfg.SlowWindow {
		return false
	}
	if float64(pos-s.slowFrom)/el.Seconds() < cfg.SlowRate {
		return true
	}
	s.slowSince, s.slowFrom = now, pos // kept up: start a new window
	return false
}

// finish sends a close frame when the connection is still writable, closes
// the socket and waits for the reader.
func (s *subscriber) finish(reason, detail string) {
	var code int
	switch reason {
	case ReasonTooSlow, ReasonBadOptions:
		code = closePolicy
	case ReasonShutdown:
		code = closeGoingAway
	case ReasonInternalError:
		code = closeInternalError
	}
	if reason != ReasonWriteError && reason != ReasonReadError {
		s.out = s.sock.takePending(s.out) // e.g. gorilla's echo of the client's close
		if code != 0 {
			s.out = appendFrame(s.out, opClose, closePayload(code, detail))
		}
		if len(s.out) > 0 {
			_ = s.sock.Conn.SetWriteDeadline(time.Now().Add(closeGrace))
			_, _ = s.sock.Conn.Write(s.out)
		}
	}
	if reason != ReasonClientClosed {
		s.log.Info("subscriber disconnected", "reason", reason, "detail", detail, "position", s.position.Load())
	}
	_ = s.ws.Close()
	<-s.readDone
}
