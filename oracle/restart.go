package oracle

// restart.go owns the relay rebuilt with a fresh sequence: its history is
// gone, its seqs start over at 1, and every subscriber is disconnected. A
// consumer that reconnects with its old cursor hears FutureCursor.

// RestartSequence forgets the firehose history and restarts seqs at 1, as a
// relay rebuilt or replaced would, and drops every firehose connection
// (abruptly). The world is untouched: accounts and records stay as they
// are, and listRepos and getRepo answer as before.
func (n *Network) RestartSequence() {
	n.emitMu.Lock()
	n.log.restart()
	n.emitMu.Unlock()
	n.mu.Lock()
	for c := range n.conns {
		_ = c.NetConn().Close()
	}
	n.mu.Unlock()
}

// restart empties the history and sets the last seq back to 0. Absolute
// indexes stay monotonic, so a subscriber still reading is past the end
// and waits for new frames (its connection is closed by the caller).
func (l *eventLog) restart() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.base += int64(len(l.frames))
	l.frames = nil
	l.head = 0
	l.trimmedSeq = 0
	close(l.wake)
	l.wake = make(chan struct{})
}
