package node

// SetCompactionReclaimBytes sets the bytes a compaction pass of n must
// remove before it compacts the removed ranges (archive.CompactOptions
// .ReclaimBytes), and has it compact every range it removed rows from
// (ReclaimShare negative), so that a pass over a small world, whose rows
// are mostly in the memtable, runs Pebble's manual compaction. Call it
// before Run.
func SetCompactionReclaimBytes(n *Node, b int64) {
	sc := n.comp.cfg.store.(storeCompaction)
	sc.opts.ReclaimBytes = b
	sc.opts.ReclaimShare = -1
	n.comp.cfg.store = sc
}
