// verify_entries.go owns the entry table of a snapshot verified in memory:
// the verifying walk notes where each MST entry's key suffix, record CID and
// record block lie in the CAR buffer, so that Records and Drops read the
// entries in key order without decoding a node or looking up a block again.
// The walk that verifies the tree is then the only walk of it, and the
// block index is dropped once it is done.
//
// A key is rebuilt from the previous entry's key in walk order, cut to the
// entry's prefix length, then its suffix. The prefix is stated against the
// previous entry of the same node, but the walk has checked that keys
// ascend strictly: every key visited between that entry and this one lies
// between two keys that begin with those prefix bytes, so it begins with
// them too.
//
// Memory: at most tableBytesPerBlock per block of the CAR (a record block
// holds at least one entry), charged with the CAR (memoryCost). A tree with
// more entries than the CAR has blocks (records sharing a block) keeps no
// table: Records and Drops walk the tree again, as they do for a snapshot
// verified from its file.

package backfill

import "unsafe"

// walkEntry locates one MST entry in the CAR buffer.
type walkEntry struct {
	prefix uint32 // bytes of the previous entry's key (walk order) that begin this one
	suffix span   // the rest of the key
	body   span   // the record block
	// cidLen: the record's CID is the cidLen bytes before body, the CID of
	// the block's section (which the block index matched).
	cidLen uint32
}

// tableBytesPerBlock is what the entry table costs per block of the CAR.
const tableBytesPerBlock = int64(unsafe.Sizeof(walkEntry{}))

// note records entry e of the node at offset node, whose record block
// starts at offset body and is n bytes long. A full table is given up.
func (w *walker) note(node uint32, e *mstEntry, body uint32, n int) {
	if len(w.entries) == cap(w.entries) {
		w.table, w.entries = false, nil
		return
	}
	suffix := node + e.suffixAt
	w.entries = append(w.entries, walkEntry{
		prefix: uint32(e.prefix),
		suffix: span{off: suffix, end: suffix + uint32(len(e.suffix))},
		body:   span{off: body, end: body + uint32(n)},
		cidLen: uint32(len(e.value)),
	})
}

// replayEntries is replay over the entry table.
func (s *Snapshot) replayEntries(dropped bool, fn visitFunc) error {
	key := make([]byte, 0, 64)
	for i, e := range s.entries {
		if int(e.prefix) > len(key) { // the walk's checks exclude it
			return verifyErr(ErrBadTree, nil, "entry %d: prefix length %d of a %d-byte key", i, e.prefix, len(key))
		}
		key = append(key[:e.prefix], s.car[e.suffix.off:e.suffix.end]...)
		if s.dropped(int32(i)) != dropped {
			continue
		}
		if err := fn(key, s.car[e.body.off-e.cidLen:e.body.off:e.body.off], s.car[e.body.off:e.body.end:e.body.end]); err != nil {
			return err
		}
	}
	return nil
}
