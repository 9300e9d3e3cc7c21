package storefault

// read.go owns ReadFault, the read-path injector (a vfs/errorfs.Injector).

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// ReadFault is an errorfs.Injector that fails data reads (Read, ReadAt; not
// open or stat) of sstables while armed:
// of every sstable (FailAll), of chosen files (FailFiles), or every sstable
// read from the n-th one on (FailFromNth). Wrap the store's FS with
// errorfs.Wrap(fs, f). Writes are never touched.
type ReadFault struct {
	mu    sync.Mutex
	armed bool
	files map[string]bool // base names; nil = every sstable
	from  int64           // 0: every read; n: reads from the n-th on
	only  bool            // only the from-th read fails
	err   error

	reads atomic.Int64 // sstable reads seen while armed
	fired atomic.Int64
}

// NewReadFault returns a disarmed injector failing with ErrInjected.
func NewReadFault() *ReadFault { return &ReadFault{err: ErrInjected} }

// FailAll arms the injector for every sstable read.
func (f *ReadFault) FailAll() { f.arm(nil, 0) }

// FailFiles arms the injector for reads of the named files (paths or base
// names), every read.
func (f *ReadFault) FailFiles(paths ...string) {
	m := make(map[string]bool, len(paths))
	for _, p := range paths {
		m[baseName(p)] = true
	}
	f.arm(m, 0)
}

// FailFromNth arms the injector so that every sstable read from the n-th
// (1-based, counted from now) on fails: a sweep over n visits every read of
// an operation as its first failing read.
func (f *ReadFault) FailFromNth(n int) { f.arm(nil, int64(n)) }

// FailNth arms the injector so that only the n-th sstable read (1-based,
// counted from now) fails: a transient error. An operation that swallows it
// shows up as a success with the fault fired.
func (f *ReadFault) FailNth(n int) {
	f.arm(nil, int64(n))
	f.mu.Lock()
	f.only = true
	f.mu.Unlock()
}

func (f *ReadFault) arm(files map[string]bool, from int64) {
	f.mu.Lock()
	f.armed, f.files, f.from, f.only = true, files, from, false
	f.reads.Store(0)
	f.fired.Store(0)
	f.mu.Unlock()
}

// Disarm stops injecting. Counters keep their values.
func (f *ReadFault) Disarm() {
	f.mu.Lock()
	f.armed = false
	f.mu.Unlock()
}

// Fired is the number of reads failed since the last arm.
func (f *ReadFault) Fired() int64 { return f.fired.Load() }

// Reads is the number of sstable reads seen since the last arm.
func (f *ReadFault) Reads() int64 { return f.reads.Load() }

// MaybeError implements errorfs.Injector.
func (f *ReadFault) MaybeError(op errorfs.Op, path string) error {
	if (op != errorfs.OpFileReadAt && op != errorfs.OpFileRead) || !strings.HasSuffix(path, ".sst") {
		return nil
	}
	f.mu.Lock()
	armed, files, from, only, err := f.armed, f.files, f.from, f.only, f.err
	f.mu.Unlock()
	if !armed {
		return nil
	}
	if files != nil && !files[baseName(path)] {
		return nil
	}
	n := f.reads.Add(1)
	if from > 0 && (n < from || (only && n > from)) {
		return nil
	}
	f.fired.Add(1)
	return fmt.Errorf("read %s: %w", baseName(path), err)
}

func baseName(p string) string {
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		return p[i+1:]
	}
	return p
}
