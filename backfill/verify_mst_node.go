// verify_mst_node.go owns the decoding of one MST node block without
// allocating: the result aliases the block. It accepts a subset of what
// indigo's generated decoder (mst.NodeData.UnmarshalCBOR) accepts and reads
// it identically (FuzzNodeDecode holds both): minimal heads only, every
// field at most once, no unknown field, no trailing bytes, and every
// canonically encoded node.

package backfill

import (
	"errors"
	"math"

	"github.com/backstream/backstream/internal/car"
	"github.com/backstream/backstream/internal/cborhead"
)

// mstNode is one decoded node; its slices alias the block.
type mstNode struct {
	left    []byte // CID bytes (no multibase prefix); nil when null or absent
	entries []mstEntry
	at      uint32 // the block's offset in the CAR buffer (set by the walker of a snapshot in memory)
}

// mstEntry is one entry of a node.
type mstEntry struct {
	prefix   int64
	suffix   []byte
	suffixAt uint32 // where suffix starts in the block
	value    []byte // CID bytes; nil when absent
	right    []byte // CID bytes; nil when null or absent
}

// Limits of indigo's decoder, kept so that nothing it rejects passes here.
const (
	maxNodeEntries = 8192    // "e" array length
	maxKeySuffix   = 2 << 20 // "k" byte string length
)

// presizeEntries is the largest entry count decodeNode allocates for
// before decoding the entries (a tree's nodes hold about 4 on average).
const presizeEntries = 64

var errNodeShape = errors.New("not an MST node")

// decodeNode decodes an MST node block, reusing buf's storage for entries.
func decodeNode(b []byte, buf []mstEntry) (mstNode, error) {
	nd := mstNode{entries: buf[:0]}
	d := nodeDecoder{b: b}
	n, ok := d.head(5)
	if !ok || n > maxNodeEntries {
		return nd, errNodeShape
	}
	var seenE, seenL bool
	for range n {
		switch d.fieldName() {
		case 'e':
			if seenE {
				return nd, errNodeShape
			}
			seenE = true
			count, ok := d.head(4)
			if !ok || count > maxNodeEntries {
				return nd, errNodeShape
			}
			if c := int(count); c > cap(nd.entries) && c <= min(presizeEntries, len(b)-d.pos) {
				// Room for the node's entries in one allocation, at least
				// doubling the buffer it replaces so that a walk reusing
				// it grows it rarely. Only for a count the block could
				// hold (each entry takes a byte at least) and at most
				// presizeEntries: a larger one grows as its entries
				// decode, so a count no entries back costs nothing.
				nd.entries = make([]mstEntry, 0, max(c, 2*cap(nd.entries)))
			}
			for range count {
				e, ok := d.entry()
				if !ok {
					return nd, errNodeShape
				}
				nd.entries = append(nd.entries, e)
			}
		case 'l':
			if seenL {
				return nd, errNodeShape
			}
			seenL = true
			if nd.left, ok = d.nullableCID(); !ok {
				return nd, errNodeShape
			}
		default:
			return nd, errNodeShape
		}
	}
	if d.failed || d.pos != len(b) {
		return nd, errNodeShape
	}
	return nd, nil
}

// nodeDecoder reads DAG-CBOR from b; any failure sets failed.
type nodeDecoder struct {
	b      []byte
	pos    int
	failed bool
}

// rawHead reads a minimally encoded head (what cbor-gen requires).
func (d *nodeDecoder) rawHead() (major byte, arg uint64) {
	if d.failed {
		return 0, 0
	}
	major, arg, next, ok := cborhead.Read(d.b, d.pos)
	if !ok {
		d.failed = true
		return 0, 0
	}
	d.pos = next
	return major, arg
}

// head reads a head that must be of the given major type.
func (d *nodeDecoder) head(major byte) (uint64, bool) {
	m, arg := d.rawHead()
	if d.failed || m != major {
		d.failed = true
		return 0, false
	}
	return arg, true
}

// bytesOf reads the n bytes following a string head.
func (d *nodeDecoder) bytesOf(n uint64) []byte {
	if d.failed || n > uint64(len(d.b)-d.pos) {
		d.failed = true
		return nil
	}
	s := d.b[d.pos : d.pos+int(n) : d.pos+int(n)]
	d.pos += int(n)
	return s
}

// fieldName reads a one-character map key; 0 for anything else.
func (d *nodeDecoder) fieldName() byte {
	n, ok := d.head(3)
	name := d.bytesOf(n)
	if !ok || d.failed || len(name) != 1 {
		d.failed = true
		return 0
	}
	return name[0]
}

func (d *nodeDecoder) entry() (mstEntry, bool) {
	var e mstEntry
	n, ok := d.head(5)
	if !ok || n > maxNodeEntries {
		return e, false
	}
	var seen [4]bool
	for range n {
		name := d.fieldName()
		i := -1
		switch name {
		case 'k':
			i = 0
			l, ok := d.head(2)
			if !ok || l > maxKeySuffix {
				return e, false
			}
			e.suffixAt = uint32(d.pos)
			e.suffix = d.bytesOf(l)
		case 'p':
			i = 1
			p, ok := d.head(0) // a negative prefix is never valid
			if !ok || p > math.MaxInt64 {
				return e, false
			}
			e.prefix = int64(p)
		case 't':
			i = 2
			if e.right, ok = d.nullableCID(); !ok {
				return e, false
			}
		case 'v':
			i = 3
			if e.value, ok = d.cid(); !ok {
				return e, false
			}
		}
		if i < 0 || seen[i] || d.failed {
			return e, false
		}
		seen[i] = true
	}
	return e, !d.failed
}

func (d *nodeDecoder) nullableCID() ([]byte, bool) {
	if d.pos < len(d.b) && d.b[d.pos] == 0xf6 {
		d.pos++
		return nil, true
	}
	return d.cid()
}

// cid reads a tag-42 link (car.ReadLink: what cbor-gen's ReadCid accepts)
// and returns the CID bytes after the 0x00 prefix.
func (d *nodeDecoder) cid() ([]byte, bool) {
	if d.failed {
		return nil, false
	}
	c, next, ok := car.ReadLink(d.b, d.pos)
	if !ok {
		d.failed = true
		return nil, false
	}
	d.pos = next
	return c, true
}
