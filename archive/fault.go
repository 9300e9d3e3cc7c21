package archive

// fault.go owns the test-only storage fault injectors (issue 8, item 3).
// Production never constructs them; they live here, not in a _test file,
// because the tests of merge, retry and lifecycle use them too.
//
// Two seams, two layers:
//
//   - Write path: CommitFault decides, before a synced batch is committed,
//     whether it fails. It sits above Pebble (Options.CommitHook, consulted by
//     the Writer and by the store's own synced batches) because Pebble v1.1.5
//     hands a failed WAL write to the waiting commit and then panics on the
//     next one: a write fault injected below Pebble cannot be survived in a
//     running process, and the interesting question is what backstream does
//     with the error, which the hook answers for any key prefix.
//   - Read path: ReadFault is a vfs/errorfs injector failing sstable reads
//     (no seam needed). IsolateKey rewrites one key into its own sstable so
//     that failing that file's reads fails exactly the reads of that key.
//
// Every injector counts what it fired, so a test can prove its fault
// happened (no vacuous pass).

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// ErrInjected is the default error of an injected storage fault.
var ErrInjected = errors.New("injected storage fault")

// BatchKeys returns the user keys of every record in b, in batch order (a
// range deletion contributes its start key). The slices alias b's memory.
func BatchKeys(b *pebble.Batch) ([][]byte, error) {
	var keys [][]byte
	r := b.Reader()
	for {
		_, k, _, ok, err := r.Next()
		if err != nil {
			return nil, fmt.Errorf("archive: decode batch: %w", err)
		}
		if !ok {
			return keys, nil
		}
		keys = append(keys, k)
	}
}

// CommitFault fails synced commits: the n-th batch (1-based) holding a key
// with the given prefix fails with the fault's error, and the batch is not
// applied. Sticky makes every later matching batch fail too (a disk that
// stays broken). Its Check method is the Options.CommitHook.
type CommitFault struct {
	prefix []byte
	n      int

	mu     sync.Mutex
	err    error
	sticky bool
	seen   int      // matching batches seen
	fired  int      // batches failed
	ops    []string // ops of the failed batches
}

// FailNthCommit fails the n-th synced batch touching prefix (n ≥ 1) with
// ErrInjected. An empty prefix matches every non-empty batch.
func FailNthCommit(prefix string, n int) *CommitFault {
	if n < 1 {
		n = 1
	}
	return &CommitFault{prefix: []byte(prefix), n: n, err: ErrInjected}
}

// WithError makes the fault fail with err (e.g. syscall.ENOSPC for a full
// disk, syscall.EIO).
func (f *CommitFault) WithError(err error) *CommitFault {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
	return f
}

// Sticky makes every matching batch after the n-th fail as well.
func (f *CommitFault) Sticky() *CommitFault {
	f.mu.Lock()
	f.sticky = true
	f.mu.Unlock()
	return f
}

// Check is the commit hook: op names the batch (for messages), keys are its
// keys. It returns the injected error when this batch must fail.
func (f *CommitFault) Check(op string, keys [][]byte) error {
	match := false
	for _, k := range keys {
		if len(k) >= len(f.prefix) && string(k[:len(f.prefix)]) == string(f.prefix) {
			match = true
			break
		}
	}
	if !match {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen++
	if f.seen == f.n || (f.sticky && f.seen > f.n) {
		f.fired++
		f.ops = append(f.ops, op)
		return fmt.Errorf("%s: batch %d touching %q: %w", op, f.seen, f.prefix, f.err)
	}
	return nil
}

// Seen is the number of matching batches so far (failed ones included).
func (f *CommitFault) Seen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// Fired is the number of batches the fault failed.
func (f *CommitFault) Fired() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// FiredOps names the failed batches, in order.
func (f *CommitFault) FiredOps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ops...)
}

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

// IsolateKey rewrites key (with its current value) into an sstable of its
// own in the store under dataDir, and returns that file's path: failing the
// reads of that file then fails the reads of key. The store must not be
// open. The key must exist.
//
// Pebble's point read of a smaller key may still touch the file (its
// filter) when no file of the same level holds that key: a Get of
// meta/phase can reach a file holding only repo/<did>. The shield keys (each
// present in the store) are therefore rewritten, after the isolated key,
// into a newer file, where their reads stop. Pass the keys an operation
// reads before the one under test.
func IsolateKey(fs vfs.FS, dataDir string, key []byte, shield ...[]byte) (string, error) {
	dir := fs.PathJoin(dataDir, StoreDir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := pebble.Open(dir, &pebble.Options{
		FS:                          fs,
		Logger:                      pebbleLogger{log: quiet, dataDir: dataDir, onFatal: func(fe *FatalError) { panic(fe) }},
		L0CompactionThreshold:       1 << 20, // keep the new file as it is
		L0StopWritesThreshold:       1 << 20,
		DisableAutomaticCompactions: true,
	})
	if err != nil {
		return "", fmt.Errorf("archive: isolate %q: open: %w", key, err)
	}
	defer db.Close()
	v, closer, err := db.Get(key)
	if err != nil {
		return "", fmt.Errorf("archive: isolate %q: %w", key, err)
	}
	val := append([]byte(nil), v...)
	closer.Close()
	// Everything else goes to the bottom level first, so the new file is the
	// only one in L0 and the reopened store has no reason to compact it away.
	if err := db.Compact([]byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, false); err != nil {
		return "", fmt.Errorf("archive: isolate %q: compact: %w", key, err)
	}
	if err := db.Set(key, val, pebble.Sync); err != nil {
		return "", fmt.Errorf("archive: isolate %q: %w", key, err)
	}
	if err := db.Flush(); err != nil {
		return "", fmt.Errorf("archive: isolate %q: flush: %w", key, err)
	}
	for _, k := range shield {
		v, closer, err := db.Get(k)
		if err != nil {
			return "", fmt.Errorf("archive: isolate %q: shield %q: %w", key, k, err)
		}
		err = db.Set(k, append([]byte(nil), v...), pebble.Sync)
		closer.Close()
		if err != nil {
			return "", fmt.Errorf("archive: isolate %q: shield %q: %w", key, k, err)
		}
	}
	if len(shield) > 0 {
		if err := db.Flush(); err != nil {
			return "", fmt.Errorf("archive: isolate %q: flush: %w", key, err)
		}
	}
	levels, err := db.SSTables()
	if err != nil {
		return "", fmt.Errorf("archive: isolate %q: %w", key, err)
	}
	var best *pebble.SSTableInfo
	for _, l := range levels {
		for i := range l {
			t := &l[i]
			if string(t.Smallest.UserKey) == string(key) && string(t.Largest.UserKey) == string(key) &&
				(best == nil || t.FileNum > best.FileNum) {
				best = t
			}
		}
	}
	if best == nil {
		return "", fmt.Errorf("archive: isolate %q: no sstable holds it alone", key)
	}
	return fs.PathJoin(dir, fmt.Sprintf("%06d.sst", best.FileNum)), nil
}
