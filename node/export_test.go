package node

// SetCompactionReclaimBytes sets the bytes a compaction pass of n must
// remove before it compacts the removed ranges (archive.CompactOptions
// .ReclaimBytes), so that a pass over a small world runs Pebble's manual
// compaction. Call it before Run.
func SetCompactionReclaimBytes(n *Node, b int64) {
	sc := n.comp.cfg.store.(storeCompaction)
	sc.opts.ReclaimBytes = b
	n.comp.cfg.store = sc
}
