// verify_mst.go owns the walk over a CAR's Merkle Search Tree. It decodes
// nodes with indigo's own node codec (mst.NodeData) but walks them itself
// instead of using mst.LoadTreeFromStore, which tolerates missing nodes
// silently, trusts prefix lengths (a hostile one panics it) and loads a
// subtree once per reference (a node naming one child many times costs
// exponential time). Here every node is visited at most once: keys must
// ascend strictly across the whole in-order walk, so a second visit of any
// subtree fails at its first key.
//
// The checks are those of mst.Tree.Verify plus completeness: each key at the
// height its hash gives, children one level lower, no child below height 0,
// no empty node, no root that is only a pointer, every node and every record
// block present.

package backfill

import (
	"bytes"
	"context"
	"fmt"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/ipfs/go-cid"
)

// maxKeyBytes is the longest MST key (mst.MAX_KEY_BYTES); a longer key is
// dropped as an invalid path.
const maxKeyBytes = mst.MAX_KEY_BYTES

// visitFunc receives one MST entry in key order: the key (valid only during
// the call), the record CID and the record block (aliasing the CAR buffer).
type visitFunc func(key []byte, val cid.Cid, body []byte) error

// walker is one in-order walk; it is not safe for concurrent use.
type walker struct {
	ctx   context.Context
	car   []byte
	index map[string]span
	check bool // verify heights (the first walk); replays skip it

	rd      bytes.Reader
	keyBufs [][]byte // one key buffer per depth
	last    []byte   // previous key of the walk
	started bool
	visited int
	visit   visitFunc
}

func (s *Snapshot) newWalker(ctx context.Context, check bool) *walker {
	return &walker{ctx: ctx, car: s.car, index: s.index, check: check}
}

// walk visits every entry under root in key order.
func (w *walker) walk(root cid.Cid, visit visitFunc) error {
	w.visit = visit
	nd, err := w.load(root)
	if err != nil {
		if err == errNoBlock {
			return verifyErr(ErrMissingBlock, nil, "MST root %s", root)
		}
		return err
	}
	if len(nd.Entries) == 0 {
		if nd.Left != nil {
			return verifyErr(ErrBadTree, nil, "root %s is only a pointer to a child", root)
		}
		return nil // the empty repository
	}
	if nd.Entries[0].PrefixLen != 0 || len(nd.Entries[0].KeySuffix) == 0 {
		return verifyErr(ErrBadTree, nil, "root %s: first key is empty or prefixed", root)
	}
	return w.node(root, nd, mst.HeightForKey(nd.Entries[0].KeySuffix), 0)
}

// errNoBlock is load's internal "absent" signal, classified by the caller.
var errNoBlock = fmt.Errorf("no block")

func (w *walker) load(c cid.Cid) (*mst.NodeData, error) {
	loc, ok := w.index[c.KeyString()]
	if !ok {
		return nil, errNoBlock
	}
	w.rd.Reset(w.car[loc.off:loc.end])
	var nd mst.NodeData
	if err := nd.UnmarshalCBOR(&w.rd); err != nil {
		return nil, verifyErr(ErrBadTree, err, "decode node %s", c)
	}
	return &nd, nil
}

// child loads and walks the subtree at c, expected at height.
func (w *walker) child(c cid.Cid, height, depth int) error {
	if height < 0 {
		return verifyErr(ErrBadTree, nil, "child %s below height 0", c)
	}
	nd, err := w.load(c)
	if err != nil {
		if err == errNoBlock {
			return verifyErr(ErrPartialTree, nil, "node %s at height %d absent", c, height)
		}
		return err
	}
	if len(nd.Entries) == 0 && nd.Left == nil {
		return verifyErr(ErrBadTree, nil, "empty node %s", c)
	}
	return w.node(c, nd, height, depth)
}

func (w *walker) node(self cid.Cid, nd *mst.NodeData, height, depth int) error {
	if nd.Left != nil {
		if err := w.child(*nd.Left, height-1, depth+1); err != nil {
			return err
		}
	}
	for len(w.keyBufs) <= depth {
		w.keyBufs = append(w.keyBufs, nil)
	}
	key := w.keyBufs[depth][:0]
	for i := range nd.Entries {
		e := &nd.Entries[i]
		if e.PrefixLen < 0 || e.PrefixLen > int64(len(key)) {
			return verifyErr(ErrBadTree, nil, "node %s entry %d: prefix length %d of a %d-byte key", self, i, e.PrefixLen, len(key))
		}
		key = append(key[:e.PrefixLen], e.KeySuffix...)
		w.keyBufs[depth] = key
		if len(key) == 0 {
			return verifyErr(ErrBadTree, nil, "node %s entry %d: empty key", self, i)
		}
		if w.check {
			if h := mst.HeightForKey(key); h != height {
				return verifyErr(ErrBadTree, nil, "node %s entry %d: key of height %d in a node of height %d", self, i, h, height)
			}
		}
		if w.started && bytes.Compare(key, w.last) <= 0 {
			return verifyErr(ErrBadTree, nil, "node %s entry %d: key %q not after %q", self, i, key, w.last)
		}
		w.last = append(w.last[:0], key...)
		w.started = true
		if !e.Value.Defined() {
			return verifyErr(ErrBadTree, nil, "node %s entry %d: no value", self, i)
		}
		loc, ok := w.index[e.Value.KeyString()]
		if !ok {
			return verifyErr(ErrMissingBlock, nil, "record %q block %s", key, e.Value)
		}
		if w.visited%ctxCheckEvery == 0 {
			if err := w.ctx.Err(); err != nil {
				return fmt.Errorf("backfill: verify: %w", err)
			}
		}
		w.visited++
		if err := w.visit(key, e.Value, w.car[loc.off:loc.end:loc.end]); err != nil {
			return err
		}
		if e.Right != nil {
			if err := w.child(*e.Right, height-1, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
