package storefault

// read.go owns ReadFault, the read-path injector (a vfs/errorfs.Injector).

import (
	"fmt"
	"runtime"
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
// an operation as its first failing read. Like FailNth, it counts and fails
// only the reads of the operation under test, not Pebble's background jobs'
// (see onPebbleGoroutine).
func (f *ReadFault) FailFromNth(n int) { f.arm(nil, int64(n)) }

// FailNth arms the injector so that only the n-th sstable read (1-based,
// counted from now) fails: a transient error. An operation that swallows it
// shows up as a success with the fault fired. Pebble's background reads are
// neither counted nor failed (see onPebbleGoroutine).
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
	if from > 0 && onPebbleGoroutine() {
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

// onPebbleGoroutine reports whether the caller runs on a goroutine Pebble
// started: a background job (the table-stats collector every Open starts, a
// flush, a compaction) whose read failures reach no caller — Pebble reports
// them as background errors and retries. Such reads interleave with the
// operation's own at the scheduler's whim, so counting them would make the
// n-th read of a sweep a different read from run to run, and a transient
// failure of one a success that the operation never saw.
func onPebbleGoroutine() bool {
	pcs := make([]uintptr, 256)
	n := runtime.Callers(2, pcs)
	if n == len(pcs) {
		return false // too deep to see the entry: count the read
	}
	frames := runtime.CallersFrames(pcs[:n])
	entry := ""
	for {
		fr, more := frames.Next()
		if fr.Function != "runtime.goexit" {
			entry = fr.Function
		}
		if !more {
			break
		}
	}
	return strings.HasPrefix(entry, "github.com/cockroachdb/pebble.")
}
