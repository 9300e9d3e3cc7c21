// car.go owns the CAR v1 reader: header framing and decoding, section
// framing and the per-block hash check.

package car

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/backstream/backstream/internal/cborhead"
	"github.com/ipfs/go-cid"
)

// Reader sentinels.
var (
	// ErrTruncated: a length (header, section, CID field) runs past the end
	// of the input.
	ErrTruncated = errors.New("car: truncated")
	// ErrMalformed: the bytes are not a CAR v1: bad varint, a header that is
	// not exactly {roots: [CID...], version: 1}, an empty section, an
	// undecodable CID, an unsupported multihash.
	ErrMalformed = errors.New("car: malformed")
	// ErrBadBlock: a block's bytes do not hash to its CID.
	ErrBadBlock = errors.New("car: block does not match its CID")
)

// MaxRoots bounds the roots a header may list. A repository or commit CAR
// has one; the bound only stops a hostile header early.
const MaxRoots = 1024

// Reader walks the blocks of an in-memory CAR v1. The zero value is an
// empty reader; use Open.
type Reader struct {
	b     []byte
	pos   int
	roots [][]byte
}

// Open parses the header of the CAR v1 in b and returns a reader positioned
// at the first block. b is not copied: everything the reader returns aliases
// it.
func Open(b []byte) (Reader, error) {
	r := Reader{b: b}
	if err := r.open(); err != nil {
		return Reader{}, err
	}
	return r, nil
}

// Roots returns the header's root CIDs, as CID bytes aliasing the input.
func (r *Reader) Roots() [][]byte { return r.roots }

// Offset returns the position in the input just past the last block Next
// returned (past the header before the first call): a block's data is
// b[Offset()-len(data):Offset()].
func (r *Reader) Offset() int { return r.pos }

func (r *Reader) open() error {
	b := r.b
	hlen, n := uvarint(b)
	switch {
	case n == 0:
		return fmt.Errorf("%w: header length", ErrTruncated)
	case n < 0:
		return fmt.Errorf("%w: header length overflows", ErrMalformed)
	case hlen == 0:
		return fmt.Errorf("%w: empty header", ErrMalformed)
	case hlen > uint64(len(b)-n):
		return fmt.Errorf("%w: header of %d bytes, %d present", ErrTruncated, hlen, len(b)-n)
	}
	end := n + int(hlen)
	if err := r.header(b[n:end]); err != nil {
		return err
	}
	r.pos = end
	return nil
}

// header decodes {"roots": [CID...], "version": 1}: minimal DAG-CBOR
// heads, each key exactly once (either order), no other key, no trailing
// bytes.
func (r *Reader) header(h []byte) error {
	d := decoder{b: h}
	bad := func(what string) error { return fmt.Errorf("%w: header: %s", ErrMalformed, what) }
	n, ok := d.head(majMap)
	if !ok || n != 2 {
		return bad("not a two-key map")
	}
	var seenRoots, seenVersion bool
	for range n {
		kl, ok := d.head(majText)
		key, ok2 := d.bytes(kl)
		if !ok || !ok2 {
			return bad("key")
		}
		switch string(key) {
		case "roots":
			if seenRoots {
				return bad("duplicate roots")
			}
			seenRoots = true
			count, ok := d.head(majArray)
			if !ok || count > MaxRoots {
				return bad("roots is not an array of at most MaxRoots CIDs")
			}
			if count > 0 {
				// Grown as links are read: each takes bytes that are present.
				r.roots = make([][]byte, 0, min(count, 4))
			}
			for range count {
				c, next, ok := ReadLink(d.b, d.pos)
				if !ok {
					return bad("root is not a CID link")
				}
				d.pos = next
				r.roots = append(r.roots, c)
			}
		case "version":
			if seenVersion {
				return bad("duplicate version")
			}
			seenVersion = true
			v, ok := d.head(majUint)
			if !ok {
				return bad("version is not an unsigned integer")
			}
			if v != 1 {
				return fmt.Errorf("%w: header: version %d", ErrMalformed, v)
			}
		default:
			return bad("unknown key")
		}
	}
	if d.pos != len(h) {
		return bad("trailing bytes")
	}
	return nil
}

// Next returns the next block: its CID bytes and its data, both aliasing
// the input, after checking that the data hashes to the CID. It returns
// io.EOF after the last block.
func (r *Reader) Next() (cidBytes, data []byte, err error) {
	if r.pos >= len(r.b) {
		return nil, nil, io.EOF
	}
	slen, n := uvarint(r.b[r.pos:])
	switch {
	case n == 0:
		return nil, nil, fmt.Errorf("%w: section length at offset %d", ErrTruncated, r.pos)
	case n < 0:
		return nil, nil, fmt.Errorf("%w: section length overflows at offset %d", ErrMalformed, r.pos)
	}
	start := r.pos + n
	if slen > uint64(len(r.b)-start) {
		return nil, nil, fmt.Errorf("%w: section of %d bytes at offset %d, %d present", ErrTruncated, slen, start, len(r.b)-start)
	}
	sec := r.b[start : start+int(slen) : start+int(slen)]
	clen, err := checkBlock(sec)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (section at offset %d)", err, start)
	}
	r.pos = start + int(slen)
	return sec[:clen:clen], sec[clen:], nil
}

// uvarint is binary.Uvarint, except that ten bytes that all continue are an
// overflow (n < 0) even when nothing follows them: no eleventh byte can make
// them a varint, so they are malformed, not cut short (binary.ReadUvarint,
// which a CAR read from a file goes through, says the same).
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n == 0 && len(b) >= binary.MaxVarintLen64 {
		return 0, -binary.MaxVarintLen64
	}
	return v, n
}

// CheckSection checks one block section (its CID, then the block's bytes)
// as Next does, for callers that frame sections themselves (a CAR read from
// a file section by section). It returns the CID's length.
func CheckSection(sec []byte) (cidLen int, err error) { return checkBlock(sec) }

// checkBlock parses the CID at the start of a section and checks the rest
// of the section hashes to it. It returns the CID's length.
func checkBlock(sec []byte) (int, error) {
	// Fast path: CIDv1, one-byte codec, sha2-256 (every atproto block).
	if len(sec) >= sha256CIDLen && isSHA256CID(sec[:sha256CIDLen]) {
		sum := sha256.Sum256(sec[sha256CIDLen:])
		if !bytes.Equal(sum[:], sec[4:sha256CIDLen]) {
			return 0, fmt.Errorf("%w: %s", ErrBadBlock, CIDString(sec[:sha256CIDLen]))
		}
		return sha256CIDLen, nil
	}
	if len(sec) == 0 {
		return 0, fmt.Errorf("%w: empty section", ErrMalformed)
	}
	n, c, err := cid.CidFromBytes(sec)
	if err != nil {
		return 0, fmt.Errorf("%w: section CID: %v", ErrMalformed, err)
	}
	sum, err := c.Prefix().Sum(sec[n:])
	if err != nil {
		return 0, fmt.Errorf("%w: hash block %s: %v", ErrMalformed, c, err)
	}
	if !sum.Equals(c) {
		return 0, fmt.Errorf("%w: %s hashes to %s", ErrBadBlock, c, sum)
	}
	return n, nil
}

// CBOR major types used by the header.
const (
	majUint  = 0
	majBytes = 2
	majText  = 3
	majArray = 4
	majMap   = 5
	majTag   = 6
)

// decoder reads minimal DAG-CBOR heads from a byte slice; every read
// checks the bytes present.
type decoder struct {
	b   []byte
	pos int
}

// head reads a minimally encoded head of the given major type.
func (d *decoder) head(major byte) (uint64, bool) {
	m, arg, next, ok := cborhead.Read(d.b, d.pos)
	if !ok || m != major {
		return 0, false
	}
	d.pos = next
	return arg, true
}

// bytes reads the n bytes after a string head.
func (d *decoder) bytes(n uint64) ([]byte, bool) {
	if n > uint64(len(d.b)-d.pos) {
		return nil, false
	}
	s := d.b[d.pos : d.pos+int(n) : d.pos+int(n)]
	d.pos += int(n)
	return s, true
}
