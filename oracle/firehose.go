package oracle

// firehose.go owns the firehose history (the retained, encoded events) and
// com.atproto.sync.subscribeRepos: cursor positioning, replay, live tail,
// slow-consumer detection and the per-connection wire faults.

import (
	"math/rand/v2"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/oracle/world"
)

// frame is one encoded event in the history.
type frame struct {
	seq     int64
	typ     string
	data    []byte
	invalid string // world.Event.Invalid of a one-off hostile commit
}

// eventLog is the firehose history. Frames are immutable once appended; a
// subscriber is an absolute index into the log, so replay and live are one
// read loop.
type eventLog struct {
	mu         sync.Mutex
	frames     []frame       // retained frames, ascending seq
	base       int64         // absolute index of frames[0]
	head       int64         // last seq assigned; 0 = none yet
	trimmedSeq int64         // highest seq dropped by retention; 0 = none
	retention  int           // max retained frames; 0 = unlimited
	wake       chan struct{} // closed and replaced on every append
}

func newEventLog(retention int) *eventLog {
	return &eventLog{retention: retention, wake: make(chan struct{})}
}

// append encodes ev with seq head+1+skip and adds it to the history.
// The caller serializes appends (Network.emitMu).
func (l *eventLog) append(ev world.Event, skip int64) (frame, error) {
	l.mu.Lock()
	seq := l.head + 1 + skip
	l.mu.Unlock()
	data, typ, err := encodeEvent(ev, seq)
	if err != nil {
		return frame{}, err
	}
	f := frame{seq: seq, typ: typ, data: data, invalid: ev.Invalid}
	l.mu.Lock()
	l.frames = append(l.frames, f)
	l.head = seq
	if l.retention > 0 && len(l.frames) > l.retention {
		drop := len(l.frames) - l.retention
		l.trimmedSeq = l.frames[drop-1].seq
		l.base += int64(drop)
		if cap(l.frames) > 4*l.retention {
			l.frames = append(make([]frame, 0, 2*l.retention), l.frames[drop:]...)
		} else {
			l.frames = l.frames[drop:]
		}
	}
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
	return f, nil
}

// headSeq returns the last seq assigned.
func (l *eventLog) headSeq() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.head
}

// snapshot returns the retained frames.
func (l *eventLog) snapshot() []frame {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.frames[:len(l.frames):len(l.frames)]
}

// start is where a new subscription begins.
type start struct {
	pos       int64 // absolute index of the first frame to send
	liveStart int64 // absolute index of the first frame appended after registration
	outdated  bool  // send #info OutdatedCursor first
	future    bool  // cursor above head: FutureCursor
	silent    bool  // cursor above head served from the live tip (RewindSequence)
}

// position applies the cursor rules. cursor < 0 means no cursor (live tip).
// A cursor above the head is FutureCursor, or the live tip when
// silentFuture (a relay restored from a backup: RewindSequence).
func (l *eventLog) position(cursor int64, silentFuture bool) start {
	l.mu.Lock()
	defer l.mu.Unlock()
	end := l.base + int64(len(l.frames))
	s := start{liveStart: end}
	switch {
	case cursor < 0:
		s.pos = end
	case cursor > l.head && silentFuture:
		s.pos, s.silent = end, true
	case cursor > l.head:
		s.future = true
	case cursor == 0:
		s.pos = l.base
	case cursor < l.trimmedSeq:
		s.outdated = true
		s.pos = l.base
	default:
		i := sort.Search(len(l.frames), func(i int) bool { return l.frames[i].seq > cursor })
		s.pos = l.base + int64(i)
	}
	return s
}

// read returns up to max frames from absolute index pos, the pending live lag
// (frames appended after liveStart not yet read), whether pos was trimmed
// away, and a channel closed on the next append.
func (l *eventLog) read(pos, liveStart int64, max int) (fs []frame, lag int64, trimmed bool, wake <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if pos < l.base {
		return nil, 0, true, nil
	}
	end := l.base + int64(len(l.frames))
	lag = end - maxInt64(pos, liveStart)
	if lag < 0 {
		lag = 0
	}
	i := int(pos - l.base)
	j := len(l.frames)
	if j-i > max {
		j = i + max
	}
	return l.frames[i:j:j], lag, false, l.wake
}

func maxInt64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

var upgrader = websocket.Upgrader{
	ReadBufferSize:  1024,
	WriteBufferSize: 64 << 10,
	CheckOrigin:     func(*http.Request) bool { return true },
}

// readBatch is how many frames a subscriber takes per lock acquisition.
const readBatch = 512

// handleSubscribe serves com.atproto.sync.subscribeRepos.
func (n *Network) handleSubscribe(w http.ResponseWriter, r *http.Request) {
	if n.faults.firehoseRefused() {
		writeXRPCError(w, http.StatusServiceUnavailable, "Unavailable", "the firehose is down")
		return
	}
	cursor := int64(-1)
	if v := r.URL.Query().Get("cursor"); v != "" {
		c, err := strconv.ParseInt(v, 10, 64)
		if err != nil || c < 0 {
			writeXRPCError(w, http.StatusBadRequest, "InvalidRequest", "cursor must be a non-negative integer")
			return
		}
		cursor = c
	}
	conn, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // Upgrade already answered the client
	}
	if !n.trackConn(conn) {
		conn.Close()
		return
	}
	defer n.untrackConn(conn)
	if sb := n.testSendBuffer.Load(); sb > 0 {
		if tc, ok := conn.NetConn().(*net.TCPConn); ok {
			_ = tc.SetWriteBuffer(int(sb))
		}
	}
	conn.SetReadLimit(64 << 10)
	readDone := make(chan struct{})
	go func() { // owned: the handler waits for it below
		defer close(readDone)
		for {
			if _, _, err := conn.NextReader(); err != nil {
				return
			}
		}
	}()
	n.serveSubscriber(conn, cursor, readDone)
	conn.Close()
	<-readDone
}

// closeWith sends a close frame with code and reason, best effort.
func closeWith(conn *websocket.Conn, code int, reason string) {
	_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason),
		time.Now().Add(time.Second))
}

// serveSubscriber runs one subscription until the client leaves, a fault or
// the slow-consumer rule ends it, or the network closes.
func (n *Network) serveSubscriber(conn *websocket.Conn, cursor int64, readDone <-chan struct{}) {
	st := n.log.position(cursor, n.faults.silentFuture())
	if st.silent {
		n.faults.fire(FaultSilentFutureCursor)
	}
	_ = conn.SetWriteDeadline(time.Now().Add(n.cfg.WriteTimeout))
	if st.future {
		n.stats.futureCursor.Add(1)
		_ = conn.WriteMessage(websocket.BinaryMessage,
			errorFrame(errFutureCursor, "cursor is ahead of the latest sequence number"))
		closeWith(conn, websocket.ClosePolicyViolation, errFutureCursor)
		return
	}
	if st.outdated {
		n.stats.outdatedCursor.Add(1)
		b, err := infoFrame(infoOutdatedCursor, "requested cursor is older than the retained history")
		if err != nil || conn.WriteMessage(websocket.BinaryMessage, b) != nil {
			return
		}
	}
	connID := n.stats.connections.Add(1)
	rng := rand.New(rand.NewPCG(uint64(n.cfg.Seed), uint64(connID)))
	pos := st.pos
	sent := 0
	for {
		fs, lag, trimmed, wake := n.log.read(pos, st.liveStart, readBatch)
		if trimmed || lag > int64(n.cfg.SubscriberBuffer) {
			n.stats.tooSlow.Add(1)
			_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
			_ = conn.WriteMessage(websocket.BinaryMessage,
				errorFrame(errConsumerTooSlow, "subscriber fell too far behind"))
			closeWith(conn, websocket.ClosePolicyViolation, errConsumerTooSlow)
			return
		}
		if len(fs) == 0 {
			select {
			case <-wake:
				continue
			case <-readDone:
				return
			case <-n.ctx.Done():
				closeWith(conn, websocket.CloseGoingAway, "shutting down")
				return
			}
		}
		wf := n.faults.firehose()
		_ = conn.SetWriteDeadline(time.Now().Add(n.cfg.WriteTimeout))
		for _, f := range fs {
			pos++
			if wf.drop > 0 && rng.Float64() < wf.drop {
				n.faults.fire(FaultDroppedFrame)
				continue
			}
			if wf.malformed > 0 && rng.Float64() < wf.malformed {
				n.faults.fire(FaultMalformedFrame)
				if conn.WriteMessage(websocket.BinaryMessage, malformed(rng, f)) != nil {
					return
				}
			}
			if err := conn.WriteMessage(websocket.BinaryMessage, f.data); err != nil {
				return
			}
			n.stats.framesSent.Add(1)
			if wf.duplicate > 0 && rng.Float64() < wf.duplicate {
				n.faults.fire(FaultDuplicateFrame)
				if conn.WriteMessage(websocket.BinaryMessage, f.data) != nil {
					return
				}
			}
			sent++
			if wf.disconnectEvery > 0 && sent >= wf.disconnectEvery {
				n.faults.fire(FaultFirehoseDisconnect)
				_ = conn.NetConn().Close() // abrupt: no close frame
				return
			}
		}
	}
}

// malformed returns an undecodable frame: random bytes or a truncated real frame.
func malformed(rng *rand.Rand, f frame) []byte {
	if rng.IntN(2) == 0 && len(f.data) > 8 {
		return append([]byte(nil), f.data[:len(f.data)/2]...)
	}
	b := make([]byte, 8+rng.IntN(56))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	b[0] = 0xff // a CBOR "break" outside an indefinite item: never a valid header
	return b
}

// trackConn registers a websocket connection so Close can end it; false once closed.
func (n *Network) trackConn(c *websocket.Conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.conns[c] = struct{}{}
	return true
}

func (n *Network) untrackConn(c *websocket.Conn) {
	n.mu.Lock()
	delete(n.conns, c)
	n.mu.Unlock()
}
