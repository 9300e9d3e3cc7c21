package storefault

// hold.go owns Hold, the "a disk that stops answering" wrapper: calls that
// match are held, with no error and no end, until the test releases them.

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// Held is a filesystem whose calls a match selects block until Release: a
// disk, or the part of one a command uses, that stops answering without an
// error. It counts the calls it has held, so a test can prove its fault
// happened.
type Held struct {
	vfs.FS
	release chan struct{}
	once    sync.Once
	held    atomic.Int64
}

// Hold wraps fs so that every call match selects is held until Release.
func Hold(fs vfs.FS, match func(op errorfs.Op, path string) bool) *Held {
	h := &Held{release: make(chan struct{})}
	h.FS = errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if match(op, path) {
			h.held.Add(1)
			<-h.release
		}
		return nil
	}))
	return h
}

// Release lets every held call, and every later one, through. It may be
// called more than once (a test defers it).
func (h *Held) Release() { h.once.Do(func() { close(h.release) }) }

// Holds is how many calls have been held so far.
func (h *Held) Holds() int64 { return h.held.Load() }

// TableReads selects the data reads (Read, ReadAt) of sstables.
func TableReads(op errorfs.Op, path string) bool {
	return strings.HasSuffix(path, ".sst") && (op == errorfs.OpFileRead || op == errorfs.OpFileReadAt)
}

// TableOpens selects the opens of sstables.
func TableOpens(op errorfs.Op, path string) bool {
	return strings.HasSuffix(path, ".sst") && op == errorfs.OpOpen
}

// Writes selects the write-side calls under prefix (a create, a write, a
// sync, a directory made, a rename), but not the LOCK file, which a
// read-only open takes the same way, nor a close.
func Writes(prefix string) func(op errorfs.Op, path string) bool {
	return func(op errorfs.Op, path string) bool {
		return op.OpKind() == errorfs.OpKindWrite && op != errorfs.OpLock && op != errorfs.OpFileClose && strings.HasPrefix(path, prefix)
	}
}
