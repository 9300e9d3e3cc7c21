// verify_mst.go owns the walk over a CAR's Merkle Search Tree. It walks the
// nodes itself instead of using mst.LoadTreeFromStore, which tolerates missing nodes
// silently, trusts prefix lengths (a hostile one panics it) and loads a
// subtree once per reference (a node naming one child many times costs
// exponential time). Here every node is visited at most once: keys must
// ascend strictly across the whole in-order walk, so a second visit of any
// subtree fails at its first key.
//
// Nodes are decoded by decodeNode, allocation-free, into views of the block.
// The checks are those of mst.Tree.Verify plus completeness: each key at the
// height its hash gives, children one level lower, no child below height 0,
// no empty node, no root that is only a pointer, every node and every record
// block present.

package backfill

import (
	"bytes"
	"context"
	"fmt"
	"unsafe"

	"github.com/backstream/backstream/internal/car"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/ipfs/go-cid"
)

// maxKeyBytes is the longest MST key (mst.MAX_KEY_BYTES, which indigo's
// tree refuses to hold); a tree with a longer key is refused as invalid.
const maxKeyBytes = mst.MAX_KEY_BYTES

// visitFunc receives one MST entry in key order: the key (valid only during
// the call), the record's CID bytes and its block (both aliasing the CAR
// buffer; for a file-backed snapshot, read buffers valid only during the
// call).
type visitFunc func(key, val, body []byte) error

// walker is one in-order walk; it is not safe for concurrent use.
type walker struct {
	ctx   context.Context
	snap  *Snapshot
	check bool // verify heights (the first walk); replays skip it

	nodeBufs [][]byte // file-backed snapshots: one node block per depth
	recBuf   []byte   // file-backed snapshots: the record block being visited

	keyBufs   [][]byte     // one key buffer per depth
	entryBufs [][]mstEntry // one entry buffer per depth
	last      []byte       // previous key of the walk
	started   bool
	visited   int
	visit     visitFunc

	// table: the walk records every entry it visits in entries (a snapshot
	// in memory; see verify_entries.go), until entries has no room left.
	table   bool
	entries []walkEntry
}

func (s *Snapshot) newWalker(ctx context.Context, check bool) *walker {
	return &walker{
		ctx: ctx, snap: s, check: check,
		keyBufs:   make([][]byte, 0, 8),
		entryBufs: make([][]mstEntry, 0, 8),
		last:      make([]byte, 0, 64),
	}
}

// walk visits every entry under root in key order.
func (w *walker) walk(root cid.Cid, visit visitFunc) error {
	w.visit = visit
	nd, found, err := w.load(root.Bytes(), 0)
	if err != nil {
		return err
	}
	if !found {
		return verifyErr(ErrMissingBlock, nil, "MST root %s", root)
	}
	if len(nd.entries) == 0 {
		if nd.left != nil {
			return verifyErr(ErrBadTree, nil, "root %s is only a pointer to a child", root)
		}
		return nil // the empty repository
	}
	if nd.entries[0].prefix != 0 || len(nd.entries[0].suffix) == 0 {
		return verifyErr(ErrBadTree, nil, "root %s: first key is empty or prefixed", root)
	}
	return w.node(root.Bytes(), nd, mst.HeightForKey(nd.entries[0].suffix), 0)
}

// release returns the walk's block buffers to the file-backed snapshot's
// memory limit.
func (w *walker) release() {
	if f := w.snap.file; f != nil {
		for _, b := range w.nodeBufs {
			f.give(cap(b))
		}
		f.give(cap(w.recBuf))
		for _, e := range w.entryBufs {
			f.give(cap(e) * int(unsafe.Sizeof(mstEntry{})))
		}
		w.nodeBufs, w.recBuf, w.entryBufs = nil, nil, nil
	}
}

// load decodes the node with CID bytes c for a walk at depth.
func (w *walker) load(c []byte, depth int) (mstNode, bool, error) {
	for len(w.nodeBufs) <= depth && w.snap.file != nil {
		w.nodeBufs = append(w.nodeBufs, nil)
	}
	var buf *[]byte
	if w.snap.file != nil {
		buf = &w.nodeBufs[depth]
	}
	blk, at, ok, err := w.snap.block(c, buf)
	if err != nil || !ok {
		return mstNode{}, false, err
	}
	for len(w.entryBufs) <= depth {
		// decodeNode allocates the buffer to the first node's size; a
		// file-backed walk counts every entry it allocates.
		w.entryBufs = append(w.entryBufs, nil)
	}
	old := cap(w.entryBufs[depth])
	nd, err := decodeNode(blk, w.entryBufs[depth])
	nd.at = at
	w.entryBufs[depth] = nd.entries
	if f := w.snap.file; f != nil && cap(nd.entries) > old {
		// At most maxNodeEntries entries were decoded: count them now.
		if terr := f.take((cap(nd.entries) - old) * int(unsafe.Sizeof(mstEntry{}))); terr != nil {
			w.entryBufs[depth] = w.entryBufs[depth][:0:0]
			f.give(old * int(unsafe.Sizeof(mstEntry{})))
			return nd, true, terr
		}
	}
	if err != nil {
		return nd, true, verifyErr(ErrBadTree, err, "decode node %s", car.CIDString(c))
	}
	return nd, true, nil
}

// child loads and walks the subtree at c, expected at height.
func (w *walker) child(c []byte, height, depth int) error {
	if height < 0 {
		return verifyErr(ErrBadTree, nil, "child %s below height 0", car.CIDString(c))
	}
	nd, found, err := w.load(c, depth)
	if err != nil {
		return err
	}
	if !found {
		return verifyErr(ErrPartialTree, nil, "node %s at height %d absent", car.CIDString(c), height)
	}
	if len(nd.entries) == 0 && nd.left == nil {
		return verifyErr(ErrBadTree, nil, "empty node %s", car.CIDString(c))
	}
	return w.node(c, nd, height, depth)
}

func (w *walker) node(self []byte, nd mstNode, height, depth int) error {
	if nd.left != nil {
		if err := w.child(nd.left, height-1, depth+1); err != nil {
			return err
		}
	}
	for len(w.keyBufs) <= depth {
		w.keyBufs = append(w.keyBufs, make([]byte, 0, 64))
	}
	key := w.keyBufs[depth][:0]
	for i := range nd.entries {
		e := &nd.entries[i]
		if e.prefix > int64(len(key)) {
			return verifyErr(ErrBadTree, nil, "node %s entry %d: prefix length %d of a %d-byte key", car.CIDString(self), i, e.prefix, len(key))
		}
		if n := e.prefix + int64(len(e.suffix)); n > maxKeyBytes {
			// Refused before it is built: hashing, comparing and copying
			// ever longer keys would cost a node's size squared.
			return verifyErr(ErrBadTree, nil, "node %s entry %d: key of %d bytes, over %d", car.CIDString(self), i, n, maxKeyBytes)
		}
		key = append(key[:e.prefix], e.suffix...)
		w.keyBufs[depth] = key
		if len(key) == 0 {
			return verifyErr(ErrBadTree, nil, "node %s entry %d: empty key", car.CIDString(self), i)
		}
		if w.check {
			if h := mst.HeightForKey(key); h != height {
				return verifyErr(ErrBadTree, nil, "node %s entry %d: key of height %d in a node of height %d", car.CIDString(self), i, h, height)
			}
		}
		if w.started && bytes.Compare(key, w.last) <= 0 {
			return verifyErr(ErrBadTree, nil, "node %s entry %d: key %q not after %q", car.CIDString(self), i, key, w.last)
		}
		w.last = append(w.last[:0], key...)
		w.started = true
		if e.value == nil {
			return verifyErr(ErrBadTree, nil, "node %s entry %d: no value", car.CIDString(self), i)
		}
		body, at, ok, err := w.snap.block(e.value, &w.recBuf)
		if err != nil {
			return err
		}
		if !ok {
			return verifyErr(ErrMissingBlock, nil, "record %q block %s", key, car.CIDString(e.value))
		}
		if w.table {
			w.note(nd.at, e, at, len(body))
		}
		if w.visited%ctxCheckEvery == 0 {
			if err := w.ctx.Err(); err != nil {
				return fmt.Errorf("backfill: verify: %w", err)
			}
		}
		w.visited++
		if err := w.visit(key, e.value, body); err != nil {
			return err
		}
		if e.right != nil {
			if err := w.child(e.right, height-1, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
