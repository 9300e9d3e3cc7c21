package subscribe

// This file owns permessage-deflate (RFC 7692) on the subscriber's own
// frames. gorilla negotiates the extension (and inflates what a client
// sends); it only ever accepts it with server_no_context_takeover and
// client_no_context_takeover, so every message is compressed on its own,
// with no history: the same JSON always deflates to the same bytes. A live
// event is therefore deflated once, in its live-log slot, and the result
// is shared by every deflate subscriber, like its zstd frame; a replayed
// event is deflated by the subscriber reading it.

import (
	"bytes"

	"github.com/klauspost/compress/flate"
)

// rsv1 is the frame header bit marking a compressed message (RFC 7692 §6).
const rsv1 = 0x40

// deflateAccepted is the line gorilla adds to its handshake response when
// it accepts the client's offer; no other form of the extension is ever
// negotiated.
var deflateAccepted = []byte("\r\nSec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover; client_no_context_takeover\r\n")

// deflateNegotiated reports whether the handshake response gorilla queued
// on c (not yet sent: the subscriber's first flush sends it) accepted
// permessage-deflate.
func deflateNegotiated(c *sockConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Contains(c.pending, deflateAccepted)
}

// sliceWriter appends to a byte slice.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error) {
	w.b = append(w.b, p...)
	return len(p), nil
}

// deflateTail ends every flushed deflate stream; RFC 7692 §7.2.1 has the
// sender remove it and the receiver put it back.
var deflateTail = []byte{0x00, 0x00, 0xff, 0xff}

// appendDeflate appends msg compressed as one permessage-deflate message
// with no context takeover. The stateless encoder keeps no window between
// calls (exactly what no_context_takeover allows) and allocates nothing
// per call beyond dst's growth.
func (w *sliceWriter) appendDeflate(dst, msg []byte) []byte {
	w.b = dst
	// Writing to a slice cannot fail.
	_ = flate.StatelessDeflate(w, msg, false, nil)
	out := w.b
	w.b = nil
	if bytes.HasSuffix(out[len(dst):], deflateTail) {
		out = out[:len(out)-len(deflateTail)]
	}
	return out
}
