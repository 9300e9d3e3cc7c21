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
	"time"
)

// maxControlPending bounds the bytes gorilla may queue (pongs to a ping
// flood from a client that does not read).
const maxControlPending = 1 << 20

// errControlBacklog: gorilla tried to queue more control bytes than
// maxControlPending; the connection is being abused.
var errControlBacklog = errors.New("subscribe: too many control frames queued")

// sockConn is the net.Conn gorilla sees. Reads pass through; writes queue.
type sockConn struct {
	net.Conn
	mu      sync.Mutex
	pending []byte
	kick    chan struct{} // capacity 1: gorilla queued bytes
}

func newSockConn(c net.Conn) *sockConn {
	return &sockConn{Conn: c, kick: make(chan struct{}, 1)}
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
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return len(p), nil
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

// appendFrame appends one unmasked, final server frame.
func appendFrame(b []byte, op byte, payload []byte) []byte {
	n := len(payload)
	switch {
	case n < 126:
		b = append(b, 0x80|op, byte(n))
	case n <= 0xffff:
		b = append(b, 0x80|op, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|op, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, payload...)
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
