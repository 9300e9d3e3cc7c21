package firehose

// verify_mst.go owns the loading of a #commit's partial MST for the sync
// 1.1 check: the tree mst.LoadTreeFromStore builds from the frame's blocks
// (FuzzLoadTree holds the two equal), with each canonically encoded node
// decoded straight into indigo's mst.Node, without cbor-gen's reader and
// NodeData's intermediate copy. A block this decoder does not take is
// decoded by indigo's own code, so which blocks are accepted, and how they
// read, is indigo's. The inversion itself (Insert, Remove, RootCID) stays
// indigo's.

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/internal/car"
	"github.com/backstream/backstream/internal/cborhead"
)

// maxNodeEntries and maxKeySuffix are cbor-gen's limits of a node's
// entries and of an entry's key suffix; past them indigo decides.
const (
	maxNodeEntries = 8192
	maxKeySuffix   = 2 << 20
)

// errBlockAbsent: a node the tree links to is not among the frame's blocks
// (a partial tree: the link stays a CID).
var errBlockAbsent = errors.New("MST node not in the frame's blocks")

// blockSource is a frame's blocks by CID (*upstream.CommitBlocks).
type blockSource interface {
	Get(c cid.Cid) ([]byte, bool)
}

// loadTree builds the partial MST rooted at root from bs, as
// mst.LoadTreeFromStore does.
func loadTree(bs blockSource, root cid.Cid) (*mst.Tree, error) {
	n, err := loadNode(bs, root)
	if errors.Is(err, errBlockAbsent) {
		return nil, fmt.Errorf("%w: root %s", err, root)
	}
	if err != nil {
		return nil, err
	}
	ensureHeights(n)
	return &mst.Tree{Root: n}, nil
}

// loadNode decodes the node ref and, recursively, its children present in
// bs (indigo's loadNodeFromStore); errBlockAbsent, unwrapped (a partial
// tree's links are many), when ref is not in bs.
func loadNode(bs blockSource, ref cid.Cid) (*mst.Node, error) {
	data, ok := bs.Get(ref)
	if !ok {
		return nil, errBlockAbsent
	}
	n, err := decodeNode(data, ref)
	if err != nil {
		return nil, err
	}
	for i, e := range n.Entries {
		if !e.IsChild() {
			continue
		}
		child, err := loadNode(bs, *e.ChildCID)
		if errors.Is(err, errBlockAbsent) {
			continue
		}
		if err != nil {
			return nil, err
		}
		n.Entries[i].Child = child
		if n.Height == -1 && child.Height >= 0 {
			n.Height = child.Height + 1
		}
	}
	return n, nil
}

// decodeNode decodes the node block data (CID ref) into an mst.Node, as
// mst.NodeData's UnmarshalCBOR and Node do: by nodeReader when the block is
// canonical, by indigo otherwise. A node with a key longer than
// mst.MAX_KEY_BYTES is refused either way.
func decodeNode(data []byte, ref cid.Cid) (*mst.Node, error) {
	r := nodeReader{b: data}
	if n, ok := r.node(ref); ok {
		return n, nil
	}
	if r.err != nil {
		return nil, r.err
	}
	nd, err := mst.NodeDataFromCBOR(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	if err := checkPrefixes(nd); err != nil {
		return nil, err
	}
	n := nd.Node(&ref)
	return &n, nil
}

// checkPrefixes refuses a node whose entry shares more of the previous key
// than that key has, or a negative share, as nodeReader does: indigo's
// NodeData.Node slices the previous key by it unchecked, and panics, or
// takes the bytes that lie past the key in its slice's spare capacity.
func checkPrefixes(nd *mst.NodeData) error {
	prev := 0
	for _, e := range nd.Entries {
		if e.PrefixLen < 0 || e.PrefixLen > int64(prev) {
			return prefixError(e.PrefixLen, prev)
		}
		prev = int(e.PrefixLen) + len(e.KeySuffix)
		if prev > mst.MAX_KEY_BYTES {
			return keyLengthError(prev)
		}
	}
	return nil
}

// keyLengthError is the error of an MST key longer than an MST key may be
// (indigo's tree refuses to hold one). Refused before the key is built:
// each entry's key is a copy, so keys that each extend the one before
// would cost a node's size squared in memory.
func keyLengthError(n int) error {
	return fmt.Errorf("MST key of %d bytes, over %d", n, mst.MAX_KEY_BYTES)
}

// prefixError is the error of an MST entry whose prefix length p is not
// within the previous key (prev bytes).
func prefixError[P int64 | uint64](p P, prev int) error {
	return fmt.Errorf("MST entry prefix %d not within the previous key (%d bytes)", p, prev)
}

// ensureHeights gives every loaded child without a height its parent's
// less one (indigo's Node.ensureHeights).
func ensureHeights(n *mst.Node) {
	if n.Height <= 0 {
		return
	}
	for _, e := range n.Entries {
		if e.Child != nil {
			if e.Child.Height < 0 {
				e.Child.Height = n.Height - 1
			}
			ensureHeights(e.Child)
		}
	}
}

// nodeReader decodes one canonically encoded node: a map {"e": [entry...],
// "l": link or null} whose entries are maps {"k": bytes, "p": uint, "t":
// link or null, "v": link}, keys in that order, every head minimal (bytes
// after the node are ignored, as indigo's reader ignores them). Anything
// else is not taken (ok false, err nil) and left to indigo (through
// checkPrefixes); err is set only for a prefix longer than the previous
// key, which indigo does not check, or a key longer than an MST key may
// be (checkPrefixes refuses both).
type nodeReader struct {
	b   []byte
	pos int
	err error
}

// node decodes the block as NodeData.Node(&ref) converts it.
func (r *nodeReader) node(ref cid.Cid) (*mst.Node, bool) {
	if !r.head(5, 2) || !r.name('e') {
		return nil, false
	}
	count, ok := r.arg(4)
	if !ok || count > maxNodeEntries || count > uint64(len(r.b)-r.pos) {
		return nil, false
	}
	type entry struct {
		prefix       uint64
		suffix       []byte
		value, right cid.Cid
	}
	entries := make([]entry, count)
	for i := range entries {
		e := &entries[i]
		if !r.head(5, 4) || !r.name('k') {
			return nil, false
		}
		if e.suffix, ok = r.bytes(); !ok || !r.name('p') {
			return nil, false
		}
		if e.prefix, ok = r.arg(0); !ok || !r.name('t') {
			return nil, false
		}
		if e.right, ok = r.link(true); !ok || !r.name('v') {
			return nil, false
		}
		if e.value, ok = r.link(false); !ok {
			return nil, false
		}
	}
	if !r.name('l') {
		return nil, false
	}
	left, ok := r.link(true)
	if !ok {
		return nil, false
	}
	n := &mst.Node{CID: &ref, Entries: make([]mst.NodeEntry, 0, 2*len(entries)+1), Height: -1}
	if left.Defined() {
		n.Entries = append(n.Entries, mst.NodeEntry{ChildCID: &left})
	}
	var prev []byte
	for i := range entries {
		e := &entries[i]
		if e.prefix > uint64(len(prev)) {
			r.err = prefixError(e.prefix, len(prev))
			return nil, false
		}
		if n := int(e.prefix) + len(e.suffix); n > mst.MAX_KEY_BYTES {
			r.err = keyLengthError(n)
			return nil, false
		}
		key := make([]byte, 0, int(e.prefix)+len(e.suffix))
		key = append(append(key, prev[:e.prefix]...), e.suffix...)
		n.Entries = append(n.Entries, mst.NodeEntry{Key: key, Value: &e.value})
		prev = key
		if n.Height < 0 {
			n.Height = mst.HeightForKey(key)
		}
		if e.right.Defined() {
			n.Entries = append(n.Entries, mst.NodeEntry{ChildCID: &e.right})
		}
	}
	return n, true
}

// arg reads a minimal head of the given major type.
func (r *nodeReader) arg(major byte) (uint64, bool) {
	m, arg, next, ok := cborhead.Read(r.b, r.pos)
	if !ok || m != major {
		return 0, false
	}
	r.pos = next
	return arg, true
}

// head reads a head of the given major type and argument.
func (r *nodeReader) head(major byte, want uint64) bool {
	arg, ok := r.arg(major)
	return ok && arg == want
}

// name reads a one-character text key c.
func (r *nodeReader) name(c byte) bool {
	if !r.head(3, 1) || r.pos >= len(r.b) || r.b[r.pos] != c {
		return false
	}
	r.pos++
	return true
}

// bytes reads a byte string of at most maxKeySuffix bytes.
func (r *nodeReader) bytes() ([]byte, bool) { return r.str(2, maxKeySuffix) }

// str reads a string of the given major type (byte or text) of at most
// max bytes, aliasing the block.
func (r *nodeReader) str(major byte, max uint64) ([]byte, bool) {
	n, ok := r.arg(major)
	if !ok || n > max || n > uint64(len(r.b)-r.pos) {
		return nil, false
	}
	b := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return b, true
}

// link reads a link (car.ReadLink), or null when nullable (cid.Undef).
func (r *nodeReader) link(nullable bool) (cid.Cid, bool) {
	if nullable && r.pos < len(r.b) && r.b[r.pos] == 0xf6 {
		r.pos++
		return cid.Undef, true
	}
	c, next, ok := car.ReadLink(r.b, r.pos)
	if !ok {
		return cid.Undef, false
	}
	v, err := cid.Cast(c)
	if err != nil {
		return cid.Undef, false
	}
	r.pos = next
	return v, true
}
