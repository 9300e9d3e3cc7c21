package archive

// setRelayCursor gives a benchmark's live unit its cursor/relay position.
// It is the one piece of BenchmarkWriterHoldLatency that needs Unit.Cursor;
// against a writer from before it, a Put of EncodeSeqCursor(seq) under
// KeyCursorRelay stands in.
func setRelayCursor(u *Unit, seq uint64) { u.Cursor = SeqCursor{Key: KeyCursorRelay, Seq: seq} }
