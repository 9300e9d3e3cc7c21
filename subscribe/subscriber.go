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
	"net"
	"net/http"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/loglimit"
)

const (
	liveBatch     = 512              // live entries read per step
	replayChunk   = 512              // archive events read per batch, at most
	iterMaxAge    = 10 * time.Second // reopen a replay iterator this often, so it pins no old sstables
	iterMaxEvents = 1 << 18
	// replayFlushEvery: a replaying subscriber whose filter admits few
	// events still gets them at least this often.
	replayFlushEvery = 50 * time.Millisecond
	closeGrace       = time.Second // how long a final close frame may take to write
)

// indexChunk: rows an index replay's batch reads, at most. Each is a point
// read that may load a block of its own, so a batch stays a few
// milliseconds long: the first events go out at once, and a reader slot
// turns over as often as a scan's.
const indexChunk = 64

// Websocket close codes we send.
const (
	closeGoingAway     = 1001
	closePolicy        = 1008
	closeTooBig        = 1009
	closeInternalError = 1011
)

// errTooSlow: the slow rule fired during a blocked write.
var errTooSlow = errors.New("subscriber stayed far behind while reading slower than the floor rate")

// errStalled: a socket write did not complete within StallTimeout.
var errStalled = errors.New("subscriber's socket write stayed blocked")

// errShutdown: the server is closing.
var errShutdown = errors.New("server shutting down")

// errTooManyMessages: the client sent messages beyond its budget.
var errTooManyMessages = errors.New("too many client messages")

type subscriber struct {
	srv   *Server
	log   *slog.Logger
	ws    *websocket.Conn
	sock  *sockConn
	store *archive.Store
	live  *archive.LiveLog
	dict  *zdict // non-nil: compress with the dictionary
	comp  bool
	// defl: the client negotiated permessage-deflate and asked for no zstd
	// (zstd frames are not deflated again).
	defl  bool
	hello bool // requireHello: wait for the first options_update

	filt atomic.Pointer[filter]
	// filtHeld is what the filter reserves from the buffer budget
	// (filter.held): the reader goroutine's while it runs.
	filtHeld int64

	// The cursor: every seq below next has been sent or filtered out.
	next uint64
	// position mirrors next for Stats (next itself is owned by the
	// subscriber goroutine).
	position atomic.Uint64

	// Output not yet written, and what it holds. out never grows past its
	// capacity, FlushBytes + maxInlineFrame + maxControlPending: frames
	// larger than maxInlineFrame are written from where they lie (tail).
	out       []byte
	tail      []byte // the unwritten rest of a large frame's payload, after a failed write
	nLive     int
	nReplay   int
	liveTimes []int64 // TimeUS of the live events in out (delivery latency)

	// The slow rule: when the subscriber first was more than SlowLag behind
	// in the current window, and its position then.
	slowSince time.Time
	slowFrom  uint64
	lastFlush time.Time

	// Replay from the archive: the iterator, kept between batches only
	// while the socket takes every write without waiting; the renderer and
	// its buffers, dropped back to maxInlineFrame after a larger event.
	it       replayIter
	itNext   uint64      // the seq the iterator yields next (valid while it != nil)
	itTo     uint64      // an index iterator's bound: it yields no seq at or past it
	itRows   int         // rows the iterator read
	itSent   int         // rows it read that were sent
	plan     *replayPlan // how the current filter replays (plan.go)
	itOpened time.Time
	itCount  int
	itGen    uint64      // the store's compaction generation when it was opened
	slot     *readerSlot // the replay-reader slot held, if any (readerSlots)
	slotAt   time.Time   // since when
	catchUp  bool        // the live entries being sent are old (catchingUp)
	// oldBefore: a live-log entry stamped before this (unix µs) is a replay
	// delivery, not a live one (catchingUp sets it per batch).
	oldBefore int64
	// replaying mirrors, for Stats, whether the subscriber is replaying:
	// reading the archive or catching up through the live log.
	replaying atomic.Bool
	rend      Renderer
	scratch   []byte
	zbuf      []byte
	deflater  sliceWriter

	ents []*archive.LiveEntry

	// From the reader goroutine.
	helloCh   chan struct{} // closed by the first valid options_update
	helloOnce sync.Once
	ended     chan endReason // capacity 1: the reader's reason to stop
	readDone  chan struct{}
	// closeFrame: the reader read the client's close frame (set before
	// it ends).
	closeFrame atomic.Bool
}

type endReason struct {
	reason string
	detail string
}

func newSubscriber(s *Server, src *source, ws *websocket.Conn, sock *sockConn, req *request, dz *zdict, start, id uint64, r *http.Request) *subscriber {
	sub := &subscriber{
		srv: s, ws: ws, sock: sock, store: src.store, live: src.live,
		dict: dz, comp: req.compress, hello: req.requireHello,
		defl:     !req.compress && deflateNegotiated(sock),
		next:     start,
		rend:     Renderer{Cursor: true},
		helloCh:  make(chan struct{}),
		ended:    make(chan endReason, 1),
		readDone: make(chan struct{}),
		out:      make([]byte, 0, outputCapacity(s.cfg.FlushBytes)),
	}
	sub.log = s.log.With("subscriber", id, "remote", r.RemoteAddr)
	sub.filt.Store(req.filter)
	sub.filtHeld = req.filter.held
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
// Every message and ping spends a token of the connection's budget; beyond
// it the connection is closed (too_many_messages).
func (s *subscriber) readLoop() {
	defer close(s.readDone)
	defer func() {
		if v := recover(); v != nil {
			s.end(s.panicked("read", v))
		}
	}()
	cfg := &s.srv.cfg
	bucket := newMsgBucket(cfg.MessageRate, cfg.MessageBurst, time.Now())
	pong := s.ws.PingHandler()
	s.ws.SetPingHandler(func(data string) error {
		if !bucket.take(time.Now()) {
			return errTooManyMessages
		}
		return pong(data)
	})
	for {
		typ, r, err := s.ws.NextReader()
		if err == nil && !bucket.take(time.Now()) {
			err = errTooManyMessages
		}
		if err != nil {
			var ce *websocket.CloseError
			switch {
			case errors.Is(err, errTooManyMessages):
				s.end(ReasonTooManyMsgs, fmt.Sprintf("more than %g client messages per second (burst %d)", cfg.MessageRate, cfg.MessageBurst))
			case errors.As(err, &ce):
				s.closeFrame.Store(true)
				s.end(ReasonClientClosed, err.Error())
			case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
				s.end(ReasonClientClosed, err.Error())
			default:
				s.end(ReasonReadError, err.Error())
			}
			return
		}
		b, err := readClientMessage(typ, r)
		if errors.Is(err, errMessageTooBig) {
			s.end(ReasonTooBig, fmt.Sprintf("a client message over %d bytes", maxClientMessage))
			return
		}
		if err != nil {
			s.end(ReasonReadError, err.Error())
			return
		}
		if typ != websocket.TextMessage {
			continue // Jetstream ignores binary messages too
		}
		f, err := parseClientMessage(b)
		if err != nil {
			s.end(ReasonBadOptions, err.Error())
			return
		}
		if f == nil {
			continue // a message type we do not know: ignored, as Jetstream does
		}
		if !s.srv.reserveFilter(s.filtHeld, f.held) {
			s.end(ReasonBufferBudget, fmt.Sprintf("options_update: the new filter needs about %d bytes more of the subscribers' buffer budget (%d bytes) than it has left; retry later",
				f.held-s.filtHeld, cfg.BufferBudget))
			return
		}
		s.filtHeld = f.held
		s.filt.Store(f)
		s.sock.nudge() // the subscriber lets go of its old filter's plan at its next step
		s.helloOnce.Do(func() { close(s.helloCh) })
	}
}

// errMessageTooBig: a client message inflated past maxClientMessage.
var errMessageTooBig = errors.New("client message too big")

// readClientMessage reads one client message: a text message's bytes, or a
// binary one's discarded. It stops past maxClientMessage bytes as the
// server holds them, inflated when the client deflates (gorilla's own read
// limit counts the bytes on the wire, a thousandth of that).
func readClientMessage(typ int, r io.Reader) ([]byte, error) {
	lr := io.LimitReader(r, maxClientMessage+1)
	var b []byte
	var n int64
	var err error
	if typ == websocket.TextMessage {
		b, err = io.ReadAll(lr)
		n = int64(len(b))
	} else {
		n, err = io.Copy(io.Discard, lr)
	}
	if err == nil && n > maxClientMessage {
		err = errMessageTooBig
	}
	return b, err
}

// run serves the connection until it ends and returns the reason.
func (s *subscriber) run(ctx context.Context) string {
	go s.readLoop()
	reason, detail := s.serveContained(ctx)
	s.closeIter()
	s.finish(reason, detail)
	return reason
}

// serveContained is serve, with a panic in it ending this connection
// alone: the frames not yet written (one may be half built) are dropped and
// the client is closed with 1011. While a subscriber ran in its HTTP
// handler, net/http recovered its panics so; on goroutines of its own, a
// panic would end the process, and the archive and every other subscriber
// with it.
func (s *subscriber) serveContained(ctx context.Context) (reason, detail string) {
	defer func() {
		if v := recover(); v != nil {
			s.out = s.out[:0]
			reason, detail = s.panicked("serve", v)
		}
	}()
	return s.serve(ctx)
}

// panicked counts a panic recovered in the subscriber's code (where: its
// serve or read loop) and logs it with its stack, once a minute; the
// connection ends as internal_error.
func (s *subscriber) panicked(where string, v any) (reason, detail string) {
	s.srv.m.panicked()
	s.srv.lines.Log(s.log, slog.LevelError, "panic/"+where, "subscribe: a panic in a subscriber's code ended its connection (a bug; the process and the other subscribers go on)",
		"where", where, "panic", loglimit.Clip(fmt.Sprint(v), maxLogDetail), "stack", string(debug.Stack()))
	return ReasonInternalError, "internal error"
}

// awaitHello holds a requireHello subscriber until its first
// options_update, for at most HelloTimeout; it keeps answering pings.
func (s *subscriber) awaitHello(ctx context.Context, ping <-chan time.Time) (reason, detail string) {
	timeout := time.NewTimer(s.srv.cfg.HelloTimeout)
	defer timeout.Stop()
	for {
		select {
		case <-s.helloCh:
			return "", ""
		case e := <-s.ended:
			return e.reason, e.detail
		case <-ctx.Done():
			return ReasonShutdown, "server shutting down"
		case <-timeout.C:
			return ReasonHelloTimeout, fmt.Sprintf("requireHello: no options_update within %s", s.srv.cfg.HelloTimeout)
		case <-s.sock.kick:
		case <-ping:
			s.out = appendFrame(s.out, opPing, nil)
		}
		if err := s.flush(ctx); err != nil {
			return s.writeFailure(err)
		}
	}
}

// serve is the main loop; it returns when the connection must end.
func (s *subscriber) serve(ctx context.Context) (reason, detail string) {
	ping := time.NewTicker(s.srv.cfg.PingInterval)
	defer ping.Stop()
	// Send the handshake response gorilla queued.
	if err := s.flush(ctx); err != nil {
		return s.writeFailure(err)
	}
	if s.hello {
		if reason, detail := s.awaitHello(ctx, ping.C); reason != "" {
			return reason, detail
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
		if s.plan != nil && s.plan.f != s.filt.Load() {
			// An options_update replaced the filter (and gave back its
			// reservation): let go of the old one and its plan's ranges.
			s.closeIter()
			s.plan = nil
		}
		wake := s.live.Wait()
		var floor uint64
		s.ents, floor = s.live.ReadEntries(s.next, s.ents[:0], liveBatch)
		if s.next < floor {
			if err := s.replay(ctx, floor); err != nil {
				if errors.Is(err, errTooSlow) || errors.Is(err, errStalled) || errors.Is(err, errShutdown) || isWriteErr(err) {
					return s.writeFailure(err)
				}
				s.log.Error("subscribe: replay from the archive failed", "next", s.next, "err", err)
				return ReasonInternalError, "reading the archive failed"
			}
			continue
		}
		s.closeIter()
		if len(s.ents) == 0 {
			s.replaying.Store(false)
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
		// Old entries make this a replay through the live log, which takes
		// its turns among the archive readers (sendLiveBatch).
		s.catchUp = s.catchingUp()
		s.replaying.Store(s.catchUp)
		err := s.sendLiveBatch(ctx)
		s.yieldSlot()
		clear(s.ents)
		if errors.Is(err, errOutOfStep) {
			return ReasonInternalError, "live log out of step"
		}
		if err != nil {
			return s.writeFailure(err)
		}
	}
}

// catchUpAge: a subscriber whose next live-log entry is older than this is
// catching up, not following the tip, and shares the archive readers' turns;
// an event older than this when read is a replay delivery in the metrics,
// whichever buffer served it.
const catchUpAge = time.Second

// catchingUp reports whether the live entries just read are old: the
// subscriber reads the live log as a replay. It sets the age below which
// an entry of the batch counts as replayed.
func (s *subscriber) catchingUp() bool {
	s.oldBefore = time.Now().Add(-catchUpAge).UnixMicro()
	return s.ents[0].Event.TimeUS < s.oldBefore
}

// errOutOfStep: a live-log entry did not have the seq expected.
var errOutOfStep = errors.New("live log out of step")

// sendLiveBatch sends the live entries read, writing whenever the buffer
// is full. A catching-up subscriber renders only while it holds a reader
// slot: one that a write made give its slot back takes a turn again before
// the next entry, and if it cannot (the connection ends) it stops there —
// the main loop reads again from s.next and sees why.
func (s *subscriber) sendLiveBatch(ctx context.Context) error {
	for _, e := range s.ents {
		if s.catchUp && s.slot == nil {
			if s.slot = s.srv.readers.acquire(ctx, s); s.slot == nil {
				return nil
			}
			s.slotAt = time.Now()
		}
		if e.Event.Seq != s.next {
			// The live log's seqs are contiguous; anything else is a bug
			// that would break D2, so stop rather than skip or repeat.
			s.log.Error("subscribe: live log out of step", "next", s.next, "got", e.Event.Seq)
			return errOutOfStep
		}
		s.next++
		if e.Forgotten() {
			continue // compaction removed it: superseded, never sent again
		}
		if err := s.sendLive(ctx, e); err != nil {
			return err
		}
		if len(s.out) >= s.srv.cfg.FlushBytes {
			if err := s.flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// sendLive appends a live event's shared frame if the filter admits it; a
// frame too large for the output buffer is written from the live log's
// memo.
func (s *subscriber) sendLive(ctx context.Context, e *archive.LiveEntry) error {
	f := s.filt.Load()
	if !f.admit(e.Event) {
		return nil
	}
	fr, first := liveFrame(e)
	if fr.err != nil {
		if first {
			s.srv.renderFailed(s.srv.log, e.Event.Seq, fr.err)
		}
		return nil
	}
	p := fr.payload(s.srv.codecs, s.comp, s.dict)
	if f.maxSize > 0 && len(p) > f.maxSize {
		s.srv.m.skippedTooLarge()
		return nil
	}
	if s.defl {
		p = fr.deflated()
	}
	if e.Event.TimeUS < s.oldBefore {
		s.nReplay++ // an old event, served from memory: still a replay
	} else {
		s.nLive++
		s.liveTimes = append(s.liveTimes, e.Event.TimeUS) // delivery latency of events followed at the tip
	}
	if len(p) > maxInlineFrame-maxFrameHeader {
		return s.writeLarge(ctx, p)
	}
	s.out = appendFrame(s.out, s.opcode(), p)
	return nil
}

// opcode is the first header byte's opcode of an event frame, with RSV1
// set when the message is deflated.
func (s *subscriber) opcode() byte {
	switch {
	case s.comp:
		return opBinary
	case s.defl:
		return opText | rsv1
	}
	return opText
}

// replay reads one batch from the archive at s.next and sends it. The batch
// holds an archive-reader slot while it reads, renders and writes what the
// socket takes at once, and gives it back before any write that would wait
// and at its end, so waiting subscribers take their turns and replay as a
// whole uses at most ReplayReaders goroutines' worth of CPU. Its iterator
// outlives the batch only while the socket takes every write at once
// (write closes it before any write that would wait), so a client that
// does not read pins no sstable.
func (s *subscriber) replay(ctx context.Context, floor uint64) error {
	s.replaying.Store(true)
	if s.slot = s.srv.readers.acquire(ctx, s); s.slot == nil {
		return nil // the main loop sees why
	}
	s.slotAt = time.Now()
	defer s.yieldSlot()
	large, err := s.readBatch(floor)
	if err != nil {
		return err
	}
	if large != nil {
		if err := s.writeLarge(ctx, large); err != nil {
			return err
		}
		s.dropRenderBuffers()
	}
	now := time.Now()
	s.position.Store(s.next)
	if len(s.out) >= s.srv.cfg.FlushBytes || (len(s.out) > 0 && (now.Sub(s.lastFlush) >= replayFlushEvery || s.plan.name() == planIndex)) {
		// A sparse filter fills the buffer slowly: do not sit on events.
		// An index replay's batch is a few point reads: what it found goes
		// out at once.
		return s.flush(ctx)
	}
	if s.slow(now) {
		return errTooSlow
	}
	return nil
}

// yieldSlot gives back the replay-reader slot, if held (taking the rest it
// owes: readerSlots).
func (s *subscriber) yieldSlot() {
	if s.slot != nil {
		sl := s.slot
		s.slot = nil
		s.srv.readers.release(sl, s.slotAt)
	}
}

// readBatch reads archive events at s.next into the output buffer: at most
// replayChunk, stopping at floor (the live log's floor as the caller saw it:
// from there the live log's shared frames serve, and if the floor has moved
// on meanwhile the caller comes back), at a full buffer, or after an event
// too large for the buffer, which it returns (rendered, still to send). An
// exhausted iterator is closed, not taken as "caught up": the caller
// re-reads the floor.
func (s *subscriber) readBatch(floor uint64) (large []byte, err error) {
	now := time.Now()
	gen := s.store.CompactionGeneration()
	f := s.filt.Load()
	// A compaction batch committed since the iterator opened: reopen it,
	// so no row that batch removed is read from the old snapshot. A new
	// filter (options_update) plans again.
	if s.it != nil && (s.itNext != s.next || now.Sub(s.itOpened) > iterMaxAge || s.itCount > iterMaxEvents || s.itGen != gen || s.plan.f != f) {
		s.closeIter()
	}
	fresh := false
	if s.it == nil {
		if err := s.openIter(f, floor); err != nil {
			return nil, err
		}
		s.itNext, s.itOpened, s.itCount, s.itGen, fresh = s.next, now, 0, gen, true
	}
	chunk := replayChunk
	if s.itTo > 0 {
		chunk = indexChunk
	}
	for n := 0; n < chunk && s.next < floor && len(s.out) < s.srv.cfg.FlushBytes; n++ {
		if !s.it.Next() {
			err := s.it.Err()
			indexed := s.itTo > 0
			to := s.itTo
			s.closeIter()
			if err != nil {
				return nil, err
			}
			if indexed {
				// No wanted row below the bound: every seq below it is
				// sent or filtered out.
				s.next = max(s.next, to)
				return nil, nil
			}
			if fresh && n == 0 {
				// Below the live floor yet nothing in the archive from here:
				// the archive lost events the live log has published.
				// (Compaction leaves gaps, which the iterator steps over:
				// the first row it finds may lie at or past the floor, and
				// is durable, since a pass only removes rows superseded by
				// durable ones; it never removes the tip's row.)
				return nil, fmt.Errorf("subscribe: archive has no event at or after seq %d below the live floor", s.next)
			}
			return nil, nil
		}
		ev := s.it.Event()
		s.next = ev.Seq + 1
		s.itNext = s.next
		s.itCount++
		s.itRows++
		if !f.admit(ev) {
			continue
		}
		p := s.renderReplay(ev, f)
		if p == nil {
			continue
		}
		s.nReplay++
		s.itSent++
		if len(p) > maxInlineFrame-maxFrameHeader {
			return p, nil
		}
		s.out = appendFrame(s.out, s.opcode(), p)
	}
	return nil, nil
}

// openIter opens the replay iterator at s.next for f, planning first when
// f is new (or the plan waits for the index backfill): a scan of ev/, or
// the index ranges of the plan merged by seq, bounded by floor.
func (s *subscriber) openIter(f *filter, floor uint64) error {
	if s.plan == nil || s.plan.f != f || s.plan.unindexed {
		p, err := plan(s.store, f, s.next, floor, s.srv.cfg.ScanReplays)
		if err != nil {
			return err
		}
		if s.plan == nil || s.plan.f != f || p.name() != s.plan.name() {
			s.srv.m.planned(p.name())
		}
		s.plan = p
	}
	ranges, err := s.plan.rangesAt(s.store)
	if err != nil {
		return err
	}
	if ranges == nil {
		it, err := s.store.Events(s.next)
		if err != nil {
			return err
		}
		s.it, s.itTo = it, 0
		return nil
	}
	it, err := s.store.IndexedEvents(ranges, s.next, floor)
	if err != nil {
		return err
	}
	s.it, s.itTo = it, floor
	return nil
}

// replayIter is what a replay reads: a scan (archive.EventIter) or an
// index merge (archive.IndexIter).
type replayIter interface {
	Next() bool
	Event() *archive.Event
	Err() error
	Close() error
}

func (s *subscriber) closeIter() {
	if s.it != nil {
		if err := s.it.Close(); err != nil {
			s.log.Warn("subscribe: closing archive iterator", "err", err)
		}
		s.it, s.itTo = nil, 0
		s.srv.m.replayRows(s.plan.name(), s.itRows, s.itSent)
		s.itRows, s.itSent = 0, 0
	}
}

// renderReplay renders an archive event for this subscriber alone; nil when
// it is skipped.
func (s *subscriber) renderReplay(ev *archive.Event, f *filter) []byte {
	if s.scratch == nil {
		s.scratch = make([]byte, 0, maxInlineFrame)
	}
	var err error
	s.scratch, err = s.rend.AppendJSON(s.scratch[:0], ev)
	if err != nil {
		s.srv.renderFailed(s.log, ev.Seq, err)
		return nil
	}
	p := s.scratch
	if s.comp {
		if s.zbuf == nil {
			s.zbuf = make([]byte, 0, maxInlineFrame)
		}
		if s.dict != nil {
			s.zbuf = s.dict.enc.EncodeAll(p, s.zbuf[:0])
		} else {
			s.zbuf = s.srv.codecs.plain.EncodeAll(p, s.zbuf[:0])
		}
		p = s.zbuf
	}
	if f.maxSize > 0 && len(p) > f.maxSize {
		s.srv.m.skippedTooLarge()
		return nil
	}
	if s.defl {
		if s.zbuf == nil {
			s.zbuf = make([]byte, 0, maxInlineFrame)
		}
		s.zbuf = s.deflater.appendDeflate(s.zbuf[:0], p)
		p = s.zbuf
	}
	return p
}

// renderFailed counts an archived event that cannot be rendered: it is
// skipped. A record the archive keeps but the atproto data model refuses
// (ErrBadRecord: a non-integral float, which Jetstream v1 never sends
// either) is its PDS's to write, as many as it likes, and every replay
// meets it again: counted as upstream_record, one WARN line a minute.
// Anything else is bad archived data or our bug: counted as internal (what
// BackstreamRenderErrors fires on), one ERROR line a minute of its own, so
// a PDS's records never hide it. Each line names the last one and how many
// it stands for.
func (s *Server) renderFailed(l *slog.Logger, seq uint64, err error) {
	reason := RenderErrorReason(err)
	s.m.renderError(reason)
	if reason == RenderUpstreamRecord {
		s.lines.Log(l, slog.LevelWarn, "render/"+reason, "subscribe: an archived record its PDS wrote outside the atproto data model cannot be rendered; skipped", "seq", seq, "err", err)
		return
	}
	s.lines.Log(l, slog.LevelError, "render/"+reason, "subscribe: cannot render archived event; skipped", "seq", seq, "err", err)
}

// dropRenderBuffers lets go of render buffers a large event grew.
func (s *subscriber) dropRenderBuffers() {
	if cap(s.scratch) > maxInlineFrame {
		s.scratch = nil
	}
	if cap(s.zbuf) > maxInlineFrame {
		s.zbuf = nil
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
	cfg := &s.srv.cfg
	switch {
	case errors.Is(err, errTooSlow):
		return ReasonTooSlow, fmt.Sprintf("consumer too slow: more than %d events behind, reading under %.0f events/s for %s",
			cfg.SlowLag, cfg.SlowRate, cfg.SlowWindow)
	case errors.Is(err, errStalled):
		return ReasonStalled, fmt.Sprintf("consumer stalled: a write did not complete within %s", cfg.StallTimeout)
	case errors.Is(err, errShutdown):
		return ReasonShutdown, "server shutting down"
	}
	// A client that closed properly (its close frame read, gorilla's
	// answer sent) may close its socket before a write already on its way
	// went out: that write met the socket the client closed, which is the
	// client leaving, not a failed write. The reader ends at once on the
	// dead socket, if it has not yet.
	select {
	case <-s.readDone:
	case <-time.After(closeGrace):
	}
	if s.closeFrame.Load() {
		return ReasonClientClosed, "the client closed the connection (" + err.Error() + ")"
	}
	return ReasonWriteError, err.Error()
}

// writeLarge writes one frame whose payload p is too large for the output
// buffer: its header with what is buffered, then p itself.
func (s *subscriber) writeLarge(ctx context.Context, p []byte) error {
	// Control frames gorilla queued go before the header: taken after it,
	// a pong would land inside the event's frame.
	s.out = s.sock.takePending(s.out)
	s.out = appendFrameHeader(s.out, s.opcode(), len(p))
	s.tail = p // until written: finish must not cut the frame short
	if err := s.writeOut(ctx); err != nil {
		return err
	}
	rest, err := s.write(ctx, p)
	s.tail = rest
	if err != nil {
		return err
	}
	s.srv.m.sent(0, 0, len(p))
	return nil
}

// write writes b to the socket and returns what is left unwritten when it
// fails. While a replay iterator is open or a reader slot held, it first
// writes what the socket takes at once, and closes the iterator and gives
// the slot back before it waits for the rest. A
// write that blocks wakes every WriteTick to notice shutdown and apply the
// slow rule; one that has not completed within StallTimeout fails with
// errStalled — the client does not read, or reads a trickle. It never gives
// up on a client that keeps up.
func (s *subscriber) write(ctx context.Context, b []byte) ([]byte, error) {
	cfg := &s.srv.cfg
	if s.it != nil || s.slot != nil {
		b = b[s.sock.tryWrite(b):]
		if len(b) > 0 {
			s.closeIter()
			s.yieldSlot()
		}
	}
	since := time.Now()
	for len(b) > 0 {
		_ = s.sock.Conn.SetWriteDeadline(time.Now().Add(cfg.WriteTick))
		n, err := s.sock.Conn.Write(b)
		b = b[n:]
		if err == nil {
			continue
		}
		if !errorsIsTimeout(err) {
			return b, &writeErr{err}
		}
		now := time.Now()
		switch {
		case ctx.Err() != nil:
			return b, errShutdown
		case now.Sub(since) >= cfg.StallTimeout:
			return b, errStalled
		case s.slow(now):
			return b, errTooSlow
		}
	}
	return nil, nil
}

// flush writes the buffered frames (and any control frames gorilla
// queued).
func (s *subscriber) flush(ctx context.Context) error {
	s.out = s.sock.takePending(s.out)
	return s.writeOut(ctx)
}

// writeOut writes the output buffer as it is (flush, without taking the
// queued control frames first).
func (s *subscriber) writeOut(ctx context.Context) error {
	if len(s.out) == 0 {
		s.position.Store(s.next)
		return nil
	}
	if rest, err := s.write(ctx, s.out); err != nil {
		s.out = s.out[:copy(s.out, rest)] // for finish, before its close frame
		return err
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

// finish sends a close frame when the connection is still writable (after
// the rest of a frame cut short), closes the socket and waits for the
// reader.
func (s *subscriber) finish(reason, detail string) {
	var code int
	switch reason {
	case ReasonTooSlow, ReasonStalled, ReasonHelloTimeout, ReasonTooManyMsgs, ReasonBadOptions, ReasonBufferBudget:
		code = closePolicy
	case ReasonTooBig:
		code = closeTooBig
	case ReasonShutdown:
		code = closeGoingAway
	case ReasonInternalError:
		code = closeInternalError
	}
	if reason != ReasonWriteError && reason != ReasonReadError {
		end := s.sock.takePending(nil) // e.g. gorilla's echo of the client's close
		if code != 0 {
			end = appendFrame(end, opClose, closePayload(code, detail))
		}
		bufs := net.Buffers{s.out, s.tail, end}
		_ = s.sock.Conn.SetWriteDeadline(time.Now().Add(closeGrace))
		_, _ = bufs.WriteTo(s.sock.Conn)
	}
	if reason != ReasonClientClosed {
		// Counted in backstream_subscribe_disconnects_total; a client
		// that reconnects to be closed again must not write a line each
		// time: one per reason a minute, naming the last subscriber.
		s.srv.lines.Log(s.log, slog.LevelInfo, "disconnected/"+reason, "subscriber disconnected",
			"reason", reason, "detail", loglimit.Clip(detail, maxLogDetail), "position", s.position.Load())
	}
	_ = s.ws.Close()
	<-s.readDone
}
