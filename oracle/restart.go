package oracle

// restart.go owns the relay rebuilt with a fresh sequence: its history is
// gone, its seqs start over at 1, and every subscriber is disconnected. A
// consumer that reconnects with its old cursor hears FutureCursor. It also
// owns the relay restored from a backup (Faults.RewindSequence): its
// history goes back by some seqs, which its next events reuse.

import (
	"slices"
	"sort"
)

// RestartSequence forgets the firehose history and restarts seqs at 1, as a
// relay rebuilt or replaced would, and drops every firehose connection
// (abruptly). The world is untouched: accounts and records stay as they
// are, and listRepos and getRepo answer as before.
func (n *Network) RestartSequence() {
	n.emitMu.Lock()
	n.log.restart()
	n.emitMu.Unlock()
	n.dropConns()
}

// dropConns closes every firehose connection abruptly (no close frame), as
// a relay restarting would.
func (n *Network) dropConns() {
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

// rewind drops the frames of the last n seqs from the history and sets
// the head back by n (at least to 0): the next append reuses a seq already
// sent. Absolute indexes stay monotonic: the kept frames end where the
// history ended, so a subscriber still reading waits for new frames (its
// connection is closed by the caller), and one positioned later starts
// from the kept frames or the new ones.
func (l *eventLog) rewind(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	to := max(l.head-n, 0)
	end := l.base + int64(len(l.frames))
	i := sort.Search(len(l.frames), func(i int) bool { return l.frames[i].seq > to })
	l.frames = slices.Clone(l.frames[:i])
	l.base = end - int64(len(l.frames))
	l.head = to
	l.trimmedSeq = min(l.trimmedSeq, to)
	close(l.wake)
	l.wake = make(chan struct{})
}
