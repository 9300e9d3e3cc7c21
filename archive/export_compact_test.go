package archive

// SetCompactBatchBytes bounds a pass's shared removal batches (tests: a
// small bound makes every account its own batch).
func SetCompactBatchBytes(o *CompactOptions, n int) { o.batchBytes = n }

// KeyString is how a message names a key.
var KeyString = keyString
