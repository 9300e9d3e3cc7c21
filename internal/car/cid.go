// cid.go owns the CID primitives the project's hand-written decoders share:
// a DAG-CBOR link (tag 42) read with strict heads, the "exactly one CID"
// check with its allocation-free path for the atproto shape, and the
// rendering of CID bytes for error messages.

package car

import (
	"crypto/sha256"
	"fmt"

	"github.com/backstream/backstream/internal/cborhead"
	"github.com/ipfs/go-cid"
)

// MaxLinkBytes bounds the byte string of a link, its 0x00 prefix included:
// cbor-gen's limit (cbg.ReadCid), so nothing it refuses passes here.
const MaxLinkBytes = 512

// sha256CIDLen is the length of a CIDv1 with a one-byte codec and a
// sha2-256 multihash: version, codec, hash code 0x12, length 0x20, digest.
const sha256CIDLen = 4 + sha256.Size

// isSHA256CID reports whether b is a CIDv1 with a one-byte codec and a
// sha2-256 multihash (every atproto block), by its shape alone.
func isSHA256CID(b []byte) bool {
	return len(b) == sha256CIDLen && b[0] == 0x01 && b[1] < 0x80 && b[2] == 0x12 && b[3] == 0x20
}

// ValidCID reports whether b is exactly one CID, as cid.Cast checks: the
// atproto shape without allocating, anything else through go-cid.
func ValidCID(b []byte) bool {
	if isSHA256CID(b) {
		return true
	}
	_, err := cid.Cast(b)
	return err == nil
}

// ReadLink reads a DAG-CBOR link at b[pos:]: tag 42 around a byte string of
// at most MaxLinkBytes holding the 0x00 multibase prefix and exactly one CID
// (ValidCID), both heads minimally encoded (cborhead.Read). It returns the
// CID bytes, aliasing b, and the position after the link; ok is false for
// anything else.
func ReadLink(b []byte, pos int) (c []byte, next int, ok bool) {
	m, tag, pos, ok := cborhead.Read(b, pos)
	if !ok || m != majTag || tag != 42 {
		return nil, 0, false
	}
	m, n, pos, ok := cborhead.Read(b, pos)
	if !ok || m != majBytes || n > MaxLinkBytes || n < 2 || n > uint64(len(b)-pos) {
		return nil, 0, false
	}
	end := pos + int(n)
	if b[pos] != 0x00 || !ValidCID(b[pos+1:end]) {
		return nil, 0, false
	}
	return b[pos+1 : end : end], end, true
}

// CIDString renders CID bytes for an error message: the CID's string form,
// or hex when the bytes are not a CID. It allocates; for error paths.
func CIDString(b []byte) string {
	c, err := cid.Cast(b)
	if err != nil {
		return fmt.Sprintf("%x", b)
	}
	return c.String()
}
