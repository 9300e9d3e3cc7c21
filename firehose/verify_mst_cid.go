package firehose

// verify_mst_cid.go owns the root CID of an inverted partial MST: what
// indigo's mst.Tree.RootCID computes (the dirty nodes encoded again as
// NodeData and hashed, bottom up), with each node encoded straight from
// mst.Node into one reused buffer and hashed with crypto/sha256, without
// NodeData's intermediate copy, cbor-gen's writer and go-multihash
// (TestRootCIDMatchesIndigo and FuzzRootCID hold the two equal). Which
// nodes are encoded, and what each entry becomes, is writeBlocks' and
// NodeData's rule, kept here line for line.

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/ipfs/go-cid"
)

// errTreeEncoding: the tree has a node or entry indigo refuses to encode.
var errTreeEncoding = errors.New("MST node not encodable")

// sha256CIDPrefix is the head of a CIDv1 dag-cbor sha2-256 CID.
var sha256CIDPrefix = [4]byte{0x01, 0x71, 0x12, 0x20}

// rootCID is tree.RootCID(): the nodes that changed are encoded and hashed
// again (and keep their new CIDs, as in indigo).
func rootCID(tree *mst.Tree) (cid.Cid, error) {
	if r := tree.Root; r != nil && r.Stub && !r.Dirty && r.CID != nil {
		return *r.CID, nil
	}
	var buf []byte
	c, err := nodeCID(tree.Root, &buf)
	if err != nil {
		return cid.Undef, err
	}
	return *c, nil
}

// nodeCID is writeBlocks(ctx, nil, true): n's CID, after its dirty
// children's, buf reused for every node's encoding.
func nodeCID(n *mst.Node, buf *[]byte) (*cid.Cid, error) {
	if n == nil || n.Stub {
		return nil, fmt.Errorf("%w: nil tree node", errTreeEncoding)
	}
	if !n.Dirty && n.CID != nil {
		return n.CID, nil
	}
	for i := range n.Entries {
		e := &n.Entries[i]
		if !e.IsChild() || e.Child == nil || !(e.Dirty || e.Child.Dirty) {
			continue
		}
		cc, err := nodeCID(e.Child, buf)
		if err != nil {
			return nil, err
		}
		e.ChildCID, e.Dirty = cc, false
	}
	b, err := appendNode((*buf)[:0], n)
	*buf = b
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	c, err := cid.Cast(append(sha256CIDPrefix[:], sum[:]...))
	if err != nil {
		return nil, err
	}
	n.CID, n.Dirty = &c, false
	return &c, nil
}

// appendNode appends n's NodeData encoding (cbor-gen's): {"e": entries,
// "l": left link or null}, each entry {"k": key suffix, "p": prefix
// length, "t": right link or null, "v": value link}. The entries are
// NodeData's: a child first is the left link (and nothing else), a later
// child the right link of the value entry before it (the last such child
// wins; a child with no value entry before it is refused, where NodeData
// panics), a value entry a new entry.
func appendNode(b []byte, n *mst.Node) ([]byte, error) {
	var left *cid.Cid
	start, values := 0, 0
	if len(n.Entries) > 0 && n.Entries[0].IsChild() {
		left, start = n.Entries[0].ChildCID, 1
	}
	for i := start; i < len(n.Entries); i++ {
		e := &n.Entries[i]
		if e.IsChild() && values == 0 {
			return nil, fmt.Errorf("%w: malformed tree node", errTreeEncoding)
		}
		if e.IsValue() {
			values++
		}
	}
	if values > maxNodeEntries {
		return nil, fmt.Errorf("%w: %d entries", errTreeEncoding, values)
	}
	b = append(b, 0xa2, 0x61, 'e')
	b = appendHead(b, 4, uint64(values))
	var prev []byte
	for i := start; i < len(n.Entries); i++ {
		e := &n.Entries[i]
		if !e.IsValue() {
			continue
		}
		var right *cid.Cid
		for j := i + 1; j < len(n.Entries); j++ {
			if n.Entries[j].IsChild() {
				right = n.Entries[j].ChildCID
			}
			if n.Entries[j].IsValue() {
				break
			}
		}
		p := mst.CountPrefixLen(prev, e.Key)
		suffix := e.Key[p:]
		if len(suffix) > maxKeySuffix {
			return nil, fmt.Errorf("%w: key suffix of %d bytes", errTreeEncoding, len(suffix))
		}
		b = append(b, 0xa4, 0x61, 'k')
		b = appendHead(b, 2, uint64(len(suffix)))
		b = append(b, suffix...)
		b = append(b, 0x61, 'p')
		b = appendHead(b, 0, uint64(p))
		b = append(b, 0x61, 't')
		var err error
		if b, err = appendLink(b, right, true); err != nil {
			return nil, err
		}
		b = append(b, 0x61, 'v')
		if b, err = appendLink(b, e.Value, false); err != nil {
			return nil, err
		}
		prev = e.Key
	}
	b = append(b, 0x61, 'l')
	return appendLink(b, left, true)
}

// appendLink appends c as a DAG-CBOR link (tag 42, the 0x00 prefix and the
// CID's bytes), or null when c is nil and nullable; an undefined CID is
// refused, as cbor-gen's WriteCid refuses it.
func appendLink(b []byte, c *cid.Cid, nullable bool) ([]byte, error) {
	if c == nil && nullable {
		return append(b, 0xf6), nil
	}
	if c == nil || !c.Defined() {
		return nil, fmt.Errorf("%w: undefined cid", errTreeEncoding)
	}
	raw := c.KeyString()
	b = append(b, 0xd8, 42)
	b = appendHead(b, 2, uint64(len(raw)+1))
	b = append(b, 0x00)
	return append(b, raw...), nil
}

// appendHead appends a CBOR head of the given major type and argument in
// its shortest form.
func appendHead(b []byte, major byte, arg uint64) []byte {
	m := major << 5
	switch {
	case arg < 24:
		return append(b, m|byte(arg))
	case arg <= math.MaxUint8:
		return append(b, m|24, byte(arg))
	case arg <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(arg))
	case arg <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(arg))
	}
	return binary.BigEndian.AppendUint64(append(b, m|27), arg)
}
