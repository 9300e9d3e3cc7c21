package archive

// readstall.go times the calls that read the store's files. Pebble's
// disk-health checker (vfs.WithDiskHealthChecks) times writes, syncs and
// the filesystem calls that change it (create, rename, remove, link,
// mkdir), never a read, an open, a stat, a listing or a free-space query:
// one that never returns (a dying disk, a hung network volume) would leave
// a point read, an iterator, a compaction or the start blocked for good,
// with healthy probes and nothing logged.
//
// A table's file is read by many goroutines at once (every iterator over
// it shares the one handle), so a single start stamp per file, as Pebble
// keeps for a file's writes, cannot say which read is old. readFS instead
// counts each file's calls in flight (and the filesystem's own: opens,
// stats, listings) by the epoch they began in, with no clock read and no
// lock per call: an atomic load of the epoch, an add before the call and
// one after it. The guard's read timer moves the epoch on every readTick;
// a count left in the slot the next epoch reuses is a call that began
// readEpochs-1 ticks (MaxWriteStall) ago or more and has not returned: a
// read-stall fault, found at most one tick after the bound. A count left
// in the slot of the epoch before the one ending is a call out for over a
// tick (a third of the bound): slow, counted and logged at WARN, so an
// operator sees a disk slowing before it is a fault. A call that lasts
// two ticks is always counted so, one shorter than a tick never.
//
// The guard starts before Pebble does: Open's own calls on the volume
// before pebble.Open (finding or making the store dir, taking its lock,
// emptying the scratch dir, the free-space query), which neither Pebble's
// checker nor the counting filesystem sees, are counted the same way,
// each by the name Open gives it (timeStep).

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// readEpochs is the number of epochs a call is counted in (a power of
// two): a call is stuck once it has lasted readEpochs-1 ticks.
const readEpochs = 4

// readTick is the read timer's period for a bound: the bound in
// readEpochs-1 ticks, and never a busy loop.
func readTick(bound time.Duration) time.Duration {
	return max(bound/(readEpochs-1), time.Millisecond)
}

// inflight counts calls in flight by the epoch they began in.
type inflight [readEpochs]atomic.Int64

// begin counts a call beginning now; the caller hands the counter it
// returns to end once the call has returned.
func (c *inflight) begin(epoch *atomic.Uint64) *atomic.Int64 {
	n := &c[epoch.Load()%readEpochs]
	n.Add(1)
	return n
}

// The calls counted on a file it opened, and on the filesystem itself: all
// that Pebble makes to read the store and that can hang on a dying disk or
// a hung network volume, which its checker does not time. Reads and
// readahead of tables, logs and the manifest; a file's Stat, on every
// open of a table (its size); the opens themselves, as a read or a
// compaction missing the table cache opens the table, and a long scan
// opens it again for the OS's readahead; the free-space query after
// every flush, compaction and deletion; Stat, List and OpenDir, at the
// start. Lock and the writes are Pebble's checker's, or not on a path that
// serves; Open's before Pebble starts are timeStep's.
const (
	fileRead = iota // Read, ReadAt
	fileStat
	filePrefetch
	fileCalls
)

const (
	fsOpen = iota // Open, OpenReadWrite
	fsOpenDir
	fsStat
	fsList
	fsDiskUsage
	fsCalls
)

// fileCallNames and fsCallNames name a call in a fault or a log line: a
// file's with its name after them, the filesystem's as they are (a
// filesystem call is counted, not named: naming it would take a lock or
// an allocation on every call).
var (
	fileCallNames = [fileCalls]string{"a read of", "a stat of", "a prefetch of"}
	fsCallNames   = [fsCalls]string{"an open of a file of the store", "an open of a directory of the store",
		"a stat of a file of the store", "a listing of a directory of the store", "a free-space query of the store's volume"}
)

// readFS is the store's filesystem with the calls that read it counted
// (see the file comment). Writes go through untouched.
type readFS struct {
	vfs.FS
	epoch atomic.Uint64
	calls [fsCalls]inflight

	mu    sync.Mutex
	files map[*readFile]struct{} // the open files
	steps map[*openStep]struct{} // Open's own calls in flight (timeStep)
}

func newReadFS(fs vfs.FS) *readFS {
	return &readFS{FS: fs, files: make(map[*readFile]struct{}), steps: make(map[*openStep]struct{})}
}

// openStep is one of Open's own calls before Pebble starts, named, and the
// slot of the epoch it began in. There are a handful per open: naming
// them costs nothing that matters.
type openStep struct {
	name string
	slot uint64
}

// timeStep runs call, one of Open's own calls on the store's volume
// before Pebble starts (finding or making the store dir, taking its lock,
// emptying the scratch dir, the free-space query), counted as in flight
// under name until it returns: one that never returns is a read-stall
// fault naming it, as a read of the store's files is.
func (r *readFS) timeStep(name string, call func() error) error {
	st := &openStep{name: name}
	r.mu.Lock()
	st.slot = r.epoch.Load() % readEpochs
	r.steps[st] = struct{}{}
	r.mu.Unlock()
	err := call()
	r.mu.Lock()
	delete(r.steps, st)
	r.mu.Unlock()
	return err
}

// readFile counts its calls in flight by the epoch they began in.
type readFile struct {
	vfs.File
	fs    *readFS
	name  string
	calls [fileCalls]inflight
}

func (r *readFS) track(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return f, err
	}
	rf := &readFile{File: f, fs: r, name: name}
	r.mu.Lock()
	r.files[rf] = struct{}{}
	r.mu.Unlock()
	return rf, nil
}

// Open implements vfs.FS: tables, logs, the manifest are read through it.
func (r *readFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	c := r.calls[fsOpen].begin(&r.epoch)
	f, err := r.FS.Open(name, opts...)
	c.Add(-1)
	return r.track(name, f, err)
}

// OpenReadWrite implements vfs.FS.
func (r *readFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	c := r.calls[fsOpen].begin(&r.epoch)
	f, err := r.FS.OpenReadWrite(name, opts...)
	c.Add(-1)
	return r.track(name, f, err)
}

// OpenDir implements vfs.FS. The directory is not counted as a file:
// Pebble only syncs it, which its checker times.
func (r *readFS) OpenDir(name string) (vfs.File, error) {
	c := r.calls[fsOpenDir].begin(&r.epoch)
	f, err := r.FS.OpenDir(name)
	c.Add(-1)
	return f, err
}

// Stat implements vfs.FS.
func (r *readFS) Stat(name string) (os.FileInfo, error) {
	c := r.calls[fsStat].begin(&r.epoch)
	fi, err := r.FS.Stat(name)
	c.Add(-1)
	return fi, err
}

// List implements vfs.FS.
func (r *readFS) List(dir string) ([]string, error) {
	c := r.calls[fsList].begin(&r.epoch)
	names, err := r.FS.List(dir)
	c.Add(-1)
	return names, err
}

// GetDiskUsage implements vfs.FS.
func (r *readFS) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	c := r.calls[fsDiskUsage].begin(&r.epoch)
	u, err := r.FS.GetDiskUsage(path)
	c.Add(-1)
	return u, err
}

// Unwrap is the filesystem under the counting (vfs.Root).
func (r *readFS) Unwrap() vfs.FS { return r.FS }

// Read implements vfs.File.
func (f *readFile) Read(p []byte) (int, error) {
	c := f.calls[fileRead].begin(&f.fs.epoch)
	n, err := f.File.Read(p)
	c.Add(-1)
	return n, err
}

// ReadAt implements vfs.File.
func (f *readFile) ReadAt(p []byte, off int64) (int, error) {
	c := f.calls[fileRead].begin(&f.fs.epoch)
	n, err := f.File.ReadAt(p, off)
	c.Add(-1)
	return n, err
}

// Stat implements vfs.File.
func (f *readFile) Stat() (os.FileInfo, error) {
	c := f.calls[fileStat].begin(&f.fs.epoch)
	fi, err := f.File.Stat()
	c.Add(-1)
	return fi, err
}

// Prefetch implements vfs.File.
func (f *readFile) Prefetch(off, n int64) error {
	c := f.calls[filePrefetch].begin(&f.fs.epoch)
	err := f.File.Prefetch(off, n)
	c.Add(-1)
	return err
}

// Close implements vfs.File.
func (f *readFile) Close() error {
	f.fs.mu.Lock()
	delete(f.fs.files, f)
	f.fs.mu.Unlock()
	return f.File.Close()
}

// callsIn is the number of calls counted in slot that are still in
// flight, and the first of them found, named ("" for none).
func (r *readFS) callsIn(slot uint64) (n int64, first string) {
	note := func(c int64, name func() string) {
		if c > 0 {
			if n == 0 {
				first = name()
			}
			n += c
		}
	}
	for i := range r.calls {
		note(r.calls[i][slot].Load(), func() string { return fsCallNames[i] })
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for st := range r.steps {
		if st.slot == slot {
			note(1, func() string { return st.name })
		}
	}
	for f := range r.files {
		for i := range f.calls {
			note(f.calls[i][slot].Load(), func() string { return fileCallNames[i] + " " + f.name })
		}
	}
	return n, first
}

// advance moves to the next epoch unless a call counted in the slot it
// reuses is still in flight: then it returns that call, named, and the
// epoch stays (the store has a fault; nothing more is counted against
// it). Otherwise it returns the calls still in flight that began in the
// epoch before the one ending (over one tick ago: slow), and the first
// of them, named.
func (r *readFS) advance() (stuck string, slow int64, slowCall string) {
	next := r.epoch.Load() + 1
	if _, stuck = r.callsIn(next % readEpochs); stuck != "" {
		return stuck, 0, ""
	}
	slow, slowCall = r.callsIn((next + readEpochs - 2) % readEpochs)
	r.epoch.Store(next)
	return "", slow, slowCall
}

// timeReads wraps fs so that its reads are counted and starts the read
// timer, which close stops.
func (g *diskGuard) timeReads(fs vfs.FS) *readFS {
	r := newReadFS(fs)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads = r
	g.epochStart[0] = g.now()
	g.readTimer = time.AfterFunc(readTick(g.maxStall), g.checkReads)
	return r
}

// checkReads is the read timer: one epoch on, counting the calls out for
// over a tick as slow (logged at WARN once a minute), or a fault for a call
// that has lasted the bound.
func (g *diskGuard) checkReads() {
	g.mu.Lock()
	if g.closed || g.readTimer == nil {
		g.mu.Unlock()
		return
	}
	e := g.reads.epoch.Load()
	stuck, slow, slowCall := g.reads.advance()
	if stuck == "" {
		g.epochStart[(e+1)%readEpochs] = g.now()
		g.readTimer.Reset(readTick(g.maxStall))
		g.mu.Unlock()
		if slow > 0 {
			g.slowRead(slow, slowCall)
		}
		return
	}
	// The call began in epoch e+1-readEpochs, before the epoch after it
	// did.
	since := g.now().Sub(g.epochStart[(e+2)%readEpochs])
	g.readTimer = nil
	g.mu.Unlock()
	g.setFault(FaultReadStall, fmt.Errorf("archive: %s has not returned for over %v with no error from the disk holding %s: it is stuck or far too slow; check it and restart",
		stuck, since.Round(time.Millisecond), g.dataDir))
}

// slowRead counts n calls out for over a tick (a third of the bound) and
// logs them at WARN, one line a minute, naming the first.
func (g *diskGuard) slowRead(n int64, first string) {
	total := g.slowReads.Add(uint64(n))
	g.lines.Log(g.log, slog.LevelWarn, logSlowRead, "store read slow (one line per minute)", "component", "pebble", "call", first, "calls", n,
		"out_over", readTick(g.maxStall), "slow_total", total, "data_dir", g.dataDir)
}
