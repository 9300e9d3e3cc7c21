package archive

// readstall.go times the reads of the store's files. Pebble's disk-health
// checker (vfs.WithDiskHealthChecks) times writes, syncs and the
// filesystem's metadata operations, never a read: a read of a table, a
// write-ahead log or the manifest that never returns (a dying disk, a hung
// network volume) would leave a point read, an iterator, a compaction or
// the start blocked for good, with healthy probes and nothing logged.
//
// A table's file is read by many goroutines at once (every iterator over
// it shares the one handle), so a single start stamp per file, as Pebble
// keeps for a file's writes, cannot say which read is old. readFS instead
// counts each file's reads in flight by the epoch they began in, with no
// clock read and no lock on the read path: an atomic load of the epoch,
// an add before the read and one after it. The guard's read timer moves
// the epoch on every readTick; a count left in the slot the next epoch
// reuses is a read that began readEpochs-1 ticks (MaxWriteStall) ago or
// more and has not returned: a read-stall fault, found at most one tick
// after the bound.

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// readEpochs is the number of epochs a file counts its reads in (a power
// of two): a read is stuck once it has lasted readEpochs-1 ticks.
const readEpochs = 4

// readTick is the read timer's period for a bound: the bound in
// readEpochs-1 ticks, and never a busy loop.
func readTick(bound time.Duration) time.Duration {
	return max(bound/(readEpochs-1), time.Millisecond)
}

// readFS is the store's filesystem with the reads of every file it opens
// counted (see the file comment). Writes go through untouched.
type readFS struct {
	vfs.FS
	epoch atomic.Uint64

	mu    sync.Mutex
	files map[*readFile]struct{} // the open files
}

func newReadFS(fs vfs.FS) *readFS {
	return &readFS{FS: fs, files: make(map[*readFile]struct{})}
}

// readFile counts its reads in flight by the epoch they began in.
type readFile struct {
	vfs.File
	fs       *readFS
	name     string
	inflight [readEpochs]atomic.Int64
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
	f, err := r.FS.Open(name, opts...)
	return r.track(name, f, err)
}

// OpenReadWrite implements vfs.FS.
func (r *readFS) OpenReadWrite(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := r.FS.OpenReadWrite(name, opts...)
	return r.track(name, f, err)
}

// Unwrap is the filesystem under the counting (vfs.Root).
func (r *readFS) Unwrap() vfs.FS { return r.FS }

// Read implements vfs.File.
func (f *readFile) Read(p []byte) (int, error) {
	c := &f.inflight[f.fs.epoch.Load()%readEpochs]
	c.Add(1)
	n, err := f.File.Read(p)
	c.Add(-1)
	return n, err
}

// ReadAt implements vfs.File.
func (f *readFile) ReadAt(p []byte, off int64) (int, error) {
	c := &f.inflight[f.fs.epoch.Load()%readEpochs]
	c.Add(1)
	n, err := f.File.ReadAt(p, off)
	c.Add(-1)
	return n, err
}

// Close implements vfs.File.
func (f *readFile) Close() error {
	f.fs.mu.Lock()
	delete(f.fs.files, f)
	f.fs.mu.Unlock()
	return f.File.Close()
}

// advance moves to the next epoch unless a read counted in the slot it
// reuses is still in flight: then it returns that read's file, and the
// epoch stays (the store has a fault; nothing more is counted against it).
func (r *readFS) advance() (stuck string) {
	next := r.epoch.Load() + 1
	slot := next % readEpochs
	r.mu.Lock()
	for f := range r.files {
		if f.inflight[slot].Load() > 0 {
			stuck = f.name
			break
		}
	}
	r.mu.Unlock()
	if stuck == "" {
		r.epoch.Store(next)
	}
	return stuck
}

// timeReads wraps fs so that its reads are counted and starts the read
// timer, which close stops.
func (g *diskGuard) timeReads(fs vfs.FS) vfs.FS {
	r := newReadFS(fs)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reads = r
	g.epochStart[0] = g.now()
	g.readTimer = time.AfterFunc(readTick(g.maxStall), g.checkReads)
	return r
}

// checkReads is the read timer: one epoch on, or a fault for a read that
// has lasted the bound.
func (g *diskGuard) checkReads() {
	g.mu.Lock()
	if g.closed || g.readTimer == nil {
		g.mu.Unlock()
		return
	}
	e := g.reads.epoch.Load()
	stuck := g.reads.advance()
	if stuck == "" {
		g.epochStart[(e+1)%readEpochs] = g.now()
		g.readTimer.Reset(readTick(g.maxStall))
		g.mu.Unlock()
		return
	}
	// The read began in epoch e+1-readEpochs, before the epoch after
	// it did.
	since := g.now().Sub(g.epochStart[(e+2)%readEpochs])
	g.readTimer = nil
	g.mu.Unlock()
	g.setFault(FaultReadStall, fmt.Errorf("archive: a read of %s has not returned for over %v with no error from the disk holding %s: it is stuck or far too slow; check it and restart",
		stuck, since.Round(time.Millisecond), g.dataDir))
}
