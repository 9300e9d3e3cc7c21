package subscribe

// This file owns the socket under a subscriber: the net.Conn handed to
// gorilla at the upgrade, and the server-to-client websocket framing the
// subscriber writes itself.
//
// Why not gorilla's writers: one write syscall per message caps a replaying
// subscriber far below 100,000 events/s. The subscriber instead appends
// whole frames to its own buffer and writes it in one call when it is full
// or the subscriber has caught up. gorilla still does the handshake and all
// reading (client messages, pings, close); the few frames it writes itself
// (the handshake response, pongs, close echoes, protocol-error closes) land
// whole in sockConn's pending buffer, which the subscriber — the only
// goroutine that ever writes to the socket — sends with its next flush.

import (
	"bufio"
	"encoding/binary"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"
)

// maxControlPending bounds the bytes gorilla may queue (pongs to a ping
// flood from a client that does not read; a pong is at most 127 bytes, and
// pings are rationed by the connection's message budget).
const maxControlPending = 16 << 10

// errControlBacklog: gorilla tried to queue more control bytes than
// maxControlPending; the connection is being abused.
var errControlBacklog = errors.New("subscribe: too many control frames queued")

// sockConn is the net.Conn gorilla sees. Reads pass through; writes queue.
type sockConn struct {
	net.Conn
	raw     syscall.RawConn // nil when the connection has no file descriptor
	mu      sync.Mutex
	pending []byte
	kick    chan struct{} // capacity 1: gorilla queued bytes, or the filter changed (nudge)
}

func newSockConn(c net.Conn) *sockConn {
	sc := &sockConn{Conn: c, kick: make(chan struct{}, 1)}
	if s, ok := c.(syscall.Conn); ok {
		sc.raw, _ = s.SyscallConn()
	}
	return sc
}

// tryWrite writes as much of b as the socket takes without waiting and
// returns how much that was; errors are left for the next ordinary write to
// report.
func (c *sockConn) tryWrite(b []byte) int {
	if c.raw == nil {
		return 0
	}
	n := 0
	_ = c.raw.Write(func(fd uintptr) bool {
		for n < len(b) {
			m, err := syscall.Write(int(fd), b[n:])
			if err != nil || m <= 0 {
				break
			}
			n += m
		}
		return true // never wait
	})
	return n
}

// Write queues a whole frame (gorilla writes each frame in one call).
func (c *sockConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if len(c.pending)+len(p) > maxControlPending {
		c.mu.Unlock()
		return 0, errControlBacklog
	}
	c.pending = append(c.pending, p...)
	c.mu.Unlock()
	c.nudge()
	return len(p), nil
}

// nudge wakes the subscriber if it waits for the live log: it flushes
// what gorilla queued and takes its next step.
func (c *sockConn) nudge() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// SetWriteDeadline is ignored: gorilla's writes never block here; the
// subscriber sets its own deadlines on the real socket when it flushes.
func (c *sockConn) SetWriteDeadline(time.Time) error { return nil }

// takePending appends what gorilla queued to dst and empties the queue.
func (c *sockConn) takePending(dst []byte) []byte {
	c.mu.Lock()
	dst = append(dst, c.pending...)
	c.pending = c.pending[:0]
	c.mu.Unlock()
	return dst
}

// hijacker wraps the ResponseWriter handed to gorilla's Upgrade so the
// connection it hijacks is a sockConn.
type hijacker struct {
	http.ResponseWriter
	conn *sockConn
}

func (h *hijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	hj, ok := h.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("subscribe: the response does not support hijacking")
	}
	nc, brw, err := hj.Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = newSockConn(nc)
	return h.conn, brw, nil
}

// Websocket opcodes (RFC 6455 §5.2).
const (
	opText   = 0x1
	opBinary = 0x2
	opClose  = 0x8
	opPing   = 0x9
)

// maxFrameHeader is the longest header appendFrameHeader writes.
const maxFrameHeader = 10

// appendFrame appends one unmasked, final server frame.
func appendFrame(b []byte, op byte, payload []byte) []byte {
	return append(appendFrameHeader(b, op, len(payload)), payload...)
}

// appendFrameHeader appends the header of an unmasked, final server frame
// of n payload bytes.
func appendFrameHeader(b []byte, op byte, n int) []byte {
	switch {
	case n < 126:
		return append(b, 0x80|op, byte(n))
	case n <= 0xffff:
		return append(b, 0x80|op, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|op, 127)
		return binary.BigEndian.AppendUint64(b, uint64(n))
	}
}

// closePayload is a close frame's body: code, then a reason cut to fit the
// 125-byte control frame limit.
func closePayload(code int, reason string) []byte {
	if len(reason) > 123 {
		reason = strings.ToValidUTF8(reason[:123], "")
	}
	b := []byte{byte(code >> 8), byte(code)}
	return append(b, reason...)
}
