package archive

// This file owns opening the store: the data-dir layout, Pebble options, the
// scratch directory, the startup guard (C5), and fail-closed typed reads.

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	crdberrors "github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/bloom"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/internal/diskspace"
)

// Options configure Open. The zero value is usable.
type Options struct {
	// FS is the filesystem holding the data dir; nil means the OS. Tests
	// pass vfs.NewStrictMem() or an errorfs wrapper.
	FS vfs.FS
	// Logger receives Pebble's log lines; nil means slog.Default().
	Logger *slog.Logger
	// OnFatal, when set, is called when Pebble reports an unrecoverable
	// error (a failed WAL or manifest write), on the Pebble goroutine that
	// hit it. Then, as Pebble requires that its Fatalf never return, the
	// store panics with the FatalError. A commit (the Writer's, the store's
	// own batches) recovers that panic and returns the FatalError, so it
	// reaches the caller and the command decides to exit; on a background
	// goroutine (a flush, a compaction) nothing recovers it, and the process
	// ends with the FatalError as the panic message (exit status 2).
	OnFatal func(*FatalError)
	// ReadOnly opens an existing store without writing anything: no guard
	// initialisation, no scratch cleanup. Used by `backstream status`.
	// Its reads are timed against MaxWriteStall like a writable store's:
	// Use ends the command on a read that never returns.
	ReadOnly bool
	// CacheSize is Pebble's block cache in bytes (DefaultCacheSize).
	CacheSize int64
	// MemTableSize is Pebble's memtable size in bytes
	// (DefaultMemTableSize).
	MemTableSize uint64
	// Now is the clock for timestamps written at creation and for the rate
	// limit of the disk guard's log lines (default time.Now).
	Now func() time.Time
	// CommitHook (tests only; nil in production) is called with the keys of
	// every synced batch (the Writer's and the store's own) before it is
	// committed; an error fails that commit as a write error would, and the
	// batch is not applied. internal/storefault's CommitFault is one.
	CommitHook func(op string, keys [][]byte) error

	// MinFree is the free-space floor of the store's volume in bytes: 0 is
	// the default floor (diskspace.Floor: the smaller of 1 GiB and 2 % of
	// the volume), negative turns the floor off. Open refuses a volume
	// below it and CheckSpace records a disk fault below it; both say
	// "disk full at <data-dir>: free space and restart".
	MinFree int64
	// Space reads the free space of the volume holding a path; nil means
	// diskspace.Stat when FS is the OS's, and no floor check on any other
	// filesystem (an in-memory one has no volume).
	Space func(path string) (diskspace.Space, error)
	// MaxWriteStall bounds a Pebble write stall before it is a disk fault
	// (default DefaultMaxWriteStall), and one read of the store's files
	// (or an open, a stat, a listing, or one of Open's own calls before
	// Pebble starts: the store dir, the lock, the scratch dir, the staged
	// checkpoints, the free-space query) that has not returned (found within a third of it
	// more: readstall.go; a ReadOnly store's too);
	// MaxFailedFlushes is the number of
	// consecutive failed flushes that is one (default
	// DefaultMaxFailedFlushes). See Store.Faulted.
	MaxWriteStall    time.Duration
	MaxFailedFlushes int
	// OnFault, when set, is handed the store's disk fault (Faulted) once,
	// right after Faulted is closed, on whichever goroutine recorded it,
	// possibly a Pebble one holding Pebble's lock: it must not block or
	// call into the store. It reaches a caller whose Open, or whose start
	// after it, is blocked in a write that never returns, where Faulted
	// cannot: the store is not returned yet.
	OnFault func(error)
	// Released, when set, is called by Use (Open ignores it) once its
	// open, do and close have all returned: before Use returns, unless a
	// fault ended Use first; then when the call Use left blocked returns
	// (never, if it never does). A caller that must not start another use
	// of that disk while one is stuck (a checkpoint's read-back) waits
	// for it.
	Released func()
	// Startup, when set, shows the one-time read a start is waiting for
	// (startup.go): Open's, the writer's and bootstrap's restart pass's
	// (Store.Startup). Nil: the steps are only logged.
	Startup *Startup
}

// Store is the one Pebble database of a data dir.
type Store struct {
	db       *pebble.DB
	fs       vfs.FS
	dataDir  string
	dir      string // <data-dir>/store
	scratch  string // <data-dir>/scratch
	cache    *pebble.Cache
	lock     *pebble.Lock // the LOCK file, held from before Pebble opens until after it closes
	fatal    atomic.Pointer[FatalError]
	created  bool
	readOnly bool
	log      *slog.Logger
	hook     func(op string, keys [][]byte) error
	disk     *diskGuard // the Pebble event listener and the disk fault
	pfs      vfs.FS     // Pebble's file system: fs, timed by a disk-health checker when writable
	health   io.Closer  // stops the checker; nil without one
	space    freeSpace
	startup  *Startup // Options.Startup; may be nil
	ck       ckCalls  // checkpoints' calls on their destinations (checkpoint.go)

	compactGen atomic.Uint64 // compaction removal batches committed (CompactionGeneration)
	rosterGen  atomic.Uint64 // writer batches that changed a roster entry (RosterGeneration)
	rankGen    atomic.Uint64 // batches that changed a hostrank/ entry (TopFailingHosts)
	top        topCache      // TopFailingHosts's last answer
	dueLow     atomic.Int64  // the earliest next attempt + 1 of the due/ entries written since TakeDueWritten; 0: none
}

// StoreDir and ScratchDir are the fixed subdirectories of a data dir.
const (
	StoreDir   = "store"
	ScratchDir = "scratch"
)

// Open opens (or creates) <dataDir>/store, takes its lock, then empties
// <dataDir>/scratch and removes the checkpoints a crash left staged in
// <dataDir>/store/checkpoint-staging, and runs the startup guard: a store with no keys is
// initialised with a fresh meta/instance and meta/phase=bootstrap in one
// synced batch; a store with keys but without a readable, well-formed
// identity and phase is refused (ErrRefused) with a message saying what was
// found. The guard looks at <dataDir>/store only; leftover scratch files
// never block startup. A store another process (or another Open in this
// one) holds is ErrLocked, and its scratch is left alone. A volume below the
// free-space floor (Options.MinFree), or full, is refused with ErrDiskFull:
// "disk full at <data-dir>: free space and restart".
func Open(dataDir string, opts Options) (*Store, error) {
	s, err := open(dataDir, opts)
	if err != nil && isENOSPC(err) && !errors.Is(err, ErrDiskFull) {
		return nil, diskFullError(dataDir, "open", err)
	}
	return s, err
}

func open(dataDir string, opts Options) (*Store, error) {
	fs := opts.FS
	if fs == nil {
		fs = vfs.Default
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	s := &Store{
		fs:       fs,
		dataDir:  dataDir,
		dir:      fs.PathJoin(dataDir, StoreDir),
		scratch:  fs.PathJoin(dataDir, ScratchDir),
		log:      log,
		readOnly: opts.ReadOnly,
		hook:     opts.CommitHook,
		disk:     newDiskGuard(dataDir, log, now, opts.MaxWriteStall, opts.MaxFailedFlushes, opts.OnFault),
		space:    freeSpace{setting: opts.MinFree, stat: opts.Space},
		startup:  opts.Startup,
	}
	s.disk.readOnly = opts.ReadOnly
	if s.space.stat == nil && (opts.FS == nil || opts.FS == vfs.Default) {
		s.space.stat = diskspace.Stat
	}
	if err := s.prepare(); err != nil {
		return nil, err
	}
	if err := s.openPebble(opts); err != nil {
		return nil, err
	}
	if err := s.guard(now); err != nil {
		s.Close()
		return nil, err
	}
	if !opts.ReadOnly {
		if err := s.markIndex(now); err != nil {
			s.Close()
			return nil, err
		}
		if err := s.buildDueIndex(now); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// prepare is what Open does before Pebble starts: it finds the store dir
// (a read-only open) or makes it, takes the lock and, writable, empties
// the scratch dir, removes the checkpoints a crash left staged in the
// store dir and checks the free-space floor. Each of those calls is
// timed by the read guard, started here (readstall.go): one the volume
// never answers is a read-stall fault naming it, handed to OnFault while
// the open is still blocked in it. On an error the guard is stopped and
// the lock released.
func (s *Store) prepare() (err error) {
	r := s.disk.timeReads(s.fs)
	s.pfs = r
	defer func() {
		if err != nil {
			s.disk.close()
			if s.lock != nil {
				s.lock.Close()
				s.lock = nil
			}
		}
	}()
	if s.readOnly {
		var partial error
		if err := r.timeStep("a stat of the store dir "+s.dir, func() error {
			_, err := s.fs.Stat(s.dir)
			if errors.Is(err, os.ErrNotExist) {
				// A checkpoint that crashed mid-way: say so, as the
				// writable open does, not only that no store is here.
				partial = s.refuseInterruptedCheckpoint()
			}
			return err
		}); partial != nil {
			return partial
		} else if err != nil {
			return fmt.Errorf("archive: open %s: no store here: %w", s.dir, err)
		}
	} else if err := r.timeStep("making or finding the store dir "+s.dir, s.prepareDirs); err != nil {
		return err
	}
	// The lock first: scratch holds the downloads of whichever process
	// holds it, and a second process must not empty it under them.
	if err := r.timeStep("taking the LOCK file of "+s.dir, s.lockStore); err != nil {
		return err
	}
	if s.readOnly {
		return nil
	}
	if err := r.timeStep("emptying the scratch dir "+s.scratch, s.emptyScratch); err != nil {
		return err
	}
	if err := r.timeStep("removing the staged checkpoints "+s.stagingDir(), s.removeStaged); err != nil {
		return err
	}
	return r.timeStep("the free-space query of the volume holding "+s.dataDir, s.belowFloor)
}

// OpenError is Use's error when the store did not open (Open's error,
// unwrapped by errors.Is and errors.As): a command tells "no store here",
// "held by another process" from what its work or the close returned
// without tracking whether its job ran.
type OpenError struct{ Err error }

func (e *OpenError) Error() string { return e.Err.Error() }
func (e *OpenError) Unwrap() error { return e.Err }

// OpenFailed reports whether Use's err says the store did not open: the
// *OpenError Use returns itself, not one that a job's own error wraps (a
// job that opens another store, as a checkpoint's read-back does).
func OpenFailed(err error) bool {
	_, ok := err.(*OpenError)
	return ok
}

// Use opens the store of dataDir as opts say, runs do on it and closes
// it, for a command that ends when Use returns: do's error, else Open's (an
// *OpenError) or Close's. If the store records a disk fault first (a read, or one of
// Open's own calls before Pebble starts, stuck past MaxWriteStall,
// read-only or not; a write stall on a writable store),
// Use returns that fault (a *FatalError) at once, and leaves the open, do
// or close blocked in its call on a goroutine of its own (Options.Released
// says when it returns).
func Use(dataDir string, opts Options, do func(*Store) error) error {
	faulted := make(chan error, 1)
	then := opts.OnFault
	opts.OnFault = func(err error) {
		faulted <- err // once: the first fault only is handed on
		if then != nil {
			then(err)
		}
	}
	done := make(chan error, 1)
	go func() {
		err := func() error {
			s, err := Open(dataDir, opts)
			if err != nil {
				return &OpenError{Err: err}
			}
			err = do(s)
			if cerr := s.Close(); err == nil {
				err = cerr
			}
			return err
		}()
		if opts.Released != nil {
			opts.Released()
		}
		done <- err
	}()
	select {
	case err := <-done:
		select {
		case fault := <-faulted: // what failed do, or came with its end
			return fault
		default:
			return err
		}
	case fault := <-faulted:
		return fault
	}
}

// prepareDirs creates the data dir and the store dir (syncing every parent
// directory on creation so a power loss cannot take the store away).
func (s *Store) prepareDirs() error {
	if err := s.fs.MkdirAll(s.dataDir, 0o755); err != nil {
		return fmt.Errorf("archive: create data dir %s: %w", s.dataDir, err)
	}
	if _, err := s.fs.Stat(s.dir); err == nil {
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("archive: stat %s: %w", s.dir, err)
	}
	if err := s.refuseInterruptedCheckpoint(); err != nil {
		return err
	}
	if err := s.fs.MkdirAll(s.dir, 0o755); err != nil {
		return fmt.Errorf("archive: create store dir %s: %w", s.dir, err)
	}
	s.created = true
	return syncAncestors(s.fs, s.dir)
}

// syncAncestors syncs the directories above a directory just created,
// innermost first, up to the root, so a power loss cannot take it away.
func syncAncestors(fs vfs.FS, dir string) error {
	for {
		parent := fs.PathDir(dir)
		if err := syncDir(fs, parent); err != nil {
			return fmt.Errorf("archive: sync %s after creating %s: %w", parent, dir, err)
		}
		if parent == dir || parent == "" || parent == "." || parent == "/" {
			return nil
		}
		dir = parent
	}
}

// refuseInterruptedCheckpoint refuses to create a store beside a
// checkpoint that never completed: the data dir was meant to be a copy,
// and a new store there would start a bootstrap from nothing.
func (s *Store) refuseInterruptedCheckpoint() error {
	partial := s.fs.PathJoin(s.dataDir, checkpointPartial)
	switch _, err := s.fs.Stat(partial); {
	case err == nil:
		return fmt.Errorf("archive: %s holds %s and no %s: a checkpoint into it never completed, so it holds no store; remove %s and take the checkpoint again (or start without it, for a new archive)",
			s.dataDir, checkpointPartial, StoreDir, partial)
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("archive: stat %s: %w", partial, err)
	}
	return nil
}

// emptyScratch empties the scratch dir: only under the store's lock, as
// the scratch dir is the lock holder's. It removes what the dir holds, not
// the dir itself, which may be the mount point of a volume of its own.
func (s *Store) emptyScratch() error {
	names, err := s.fs.List(s.scratch)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("archive: empty scratch dir %s: %w", s.scratch, err)
	}
	for _, name := range names {
		if err := s.fs.RemoveAll(s.fs.PathJoin(s.scratch, name)); err != nil {
			return fmt.Errorf("archive: empty scratch dir %s: %w", s.scratch, err)
		}
	}
	if err := s.fs.MkdirAll(s.scratch, 0o755); err != nil {
		return fmt.Errorf("archive: create scratch dir %s: %w", s.scratch, err)
	}
	return nil
}

// stagingDir is where checkpoints are staged, inside the store dir
// (checkpoint.go).
func (s *Store) stagingDir() string { return s.fs.PathJoin(s.dir, checkpointStaging) }

// removeStaged removes the checkpoints a crash left staged: only under the
// store's lock, as they are the lock holder's. Pebble ignores the
// directory; a read-only open leaves it.
func (s *Store) removeStaged() error {
	if err := s.fs.RemoveAll(s.stagingDir()); err != nil {
		return fmt.Errorf("archive: remove the staged checkpoints %s: %w", s.stagingDir(), err)
	}
	return nil
}

func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	if err := d.Sync(); err != nil {
		d.Close()
		return err
	}
	return d.Close()
}

// MaxOpenFiles bounds the sstables Pebble keeps open (its table cache);
// FileDescriptors is what an open store may hold at most: those, plus the
// WAL, the manifest, the lock and the directories. serve keeps them in
// reserve when it sizes its connection cap.
const (
	MaxOpenFiles    = 1000
	FileDescriptors = MaxOpenFiles + 64
)

// Pebble's memory and its write-ahead log. Pebble v1 reserves its
// memtables (at most MemTableStopWritesThreshold, 2, queued plus the one
// being filled) out of the block cache, and preallocates each WAL at 110%
// of the memtable size, keeping up to three used ones for recycling: the
// memtable size sets both the memory the write path holds and the WAL's
// bytes on disk (about 70 MiB a log at 64 MiB). Those logs count against
// the data directory's bound (at most 1.2× the compacted store plus
// 64 MiB at every moment): a 2,000 × 200 bootstrap peaked at 125 MB for
// a 40 MB compacted store with 16 MiB memtables (55 MB of logs), at 97 MB
// with 8 MiB (27 MB of logs), for no more CPU per record. Once the rows
// compressed better (37 MiB compacted), 8 MiB peaked at 108–114 MiB, over
// the bound (1.004–1.055; sampled at the peak: 35 MiB of logs and 72 MiB
// of snappy L0 tables before the one L0 → L6 compaction); 6 MiB peaked at
// 83–87 MiB (0.77–0.80 of the bound), in A/B pairs at 0.87 and 1.04× the
// CPU per record. The cache serves point
// reads of rev/ and repo/ (filter and index blocks, mostly) and replay,
// which scans and gains little from it.
const (
	DefaultCacheSize    = 96 << 20
	DefaultMemTableSize = 6 << 20
)

func (s *Store) openPebble(opts Options) error {
	cacheSize := opts.CacheSize
	if cacheSize <= 0 {
		cacheSize = DefaultCacheSize
	}
	s.cache = pebble.NewCache(cacheSize)
	// The calls that read the store are timed (readstall.go), on a
	// read-only store too: a read stuck past the bound is a fault. s.pfs
	// is the guard's counting filesystem, from prepare.
	if !opts.ReadOnly {
		// Every file operation Pebble makes is timed: one that has not
		// returned after the threshold is reported (diskGuard.diskSlow),
		// and one that hangs past the write-stall bound is a fault. A
		// sync stuck without an error raises no write stall otherwise.
		// Pebble's checker does not time reads, opens, stats, listings:
		// the guard times them against the same bound.
		s.pfs, s.health = vfs.WithDiskHealthChecks(s.pfs, min(diskSlowThreshold, s.disk.maxStall), s.disk.diskSlow)
	}
	replay := &walReplay{}
	start := time.Now()
	db, err := pebble.Open(s.dir, s.pebbleOptions(opts, replay))
	if err != nil {
		s.disk.close()
		s.closeHealth()
		s.cache.Unref()
		s.cache = nil
		s.lock.Close()
		s.lock = nil
		return fmt.Errorf("archive: open %s: %w", s.dir, err)
	}
	s.db = db
	// After a crash Pebble replays the write-ahead logs it had not
	// flushed, and writes what they held to tables, before Open returns:
	// the start's one wait that no step of its own reports.
	if !opts.ReadOnly {
		files, bytes, keys := replay.totals()
		s.log.Info("store opened", "took", time.Since(start).Round(time.Millisecond),
			"wal_files_replayed", files, "wal_bytes_replayed", bytes, "wal_keys_replayed", keys)
	}
	return nil
}

// pebbleWALReplayed is the format of the line Pebble v1 logs (Infof) for
// each write-ahead log its Open replays; its fourth and fifth arguments
// are the bytes read and the keys replayed. Pebble exposes them nowhere
// else (TestOpenLogsWALReplay fails if a new Pebble changes the line).
const pebbleWALReplayed = "[JOB %d] WAL file %s with log number %s stopped reading at offset: %d; replayed %d keys in %d batches"

// walReplay adds up the write-ahead logs an Open replayed, from Pebble's
// line for each.
type walReplay struct {
	mu                 sync.Mutex
	files, bytes, keys int64
}

// note takes Pebble's line when it is a replay's.
func (r *walReplay) note(format string, args []any) {
	if r == nil || format != pebbleWALReplayed || len(args) < 5 {
		return
	}
	offset, ok1 := args[3].(int64)
	keys, ok2 := args[4].(int64)
	if !ok1 || !ok2 {
		return
	}
	r.mu.Lock()
	r.files, r.bytes, r.keys = r.files+1, r.bytes+offset, r.keys+keys
	r.mu.Unlock()
}

func (r *walReplay) totals() (files, bytes, keys int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.files, r.bytes, r.keys
}

// pebbleOptions are the store's Pebble options (its cache already made);
// replay (may be nil) adds up the write-ahead logs the open replays.
func (s *Store) pebbleOptions(opts Options, replay *walReplay) *pebble.Options {
	po := &pebble.Options{
		FS:           s.pfs,
		Lock:         s.lock,
		Cache:        s.cache,
		ReadOnly:     opts.ReadOnly,
		MemTableSize: opts.MemTableSize,
		MaxOpenFiles: MaxOpenFiles,
		Logger:       pebbleLogger{log: s.log, dataDir: s.dataDir, onFatal: s.onFatal(opts.OnFatal), replay: replay},
		// Background errors, failed flushes and write stalls are counted,
		// logged at ERROR and bounded (diskguard.go); without a listener
		// Pebble logs them through Infof, at debug level.
		EventListener: s.disk.listener(),
		// Events are written in seq order and never rewritten; larger L0
		// thresholds let bulk ingest run without write stalls. Pebble
		// scores L0 at 2 × sublevels / threshold, so L0 is compacted once
		// it holds 16 flushes (about 96 MiB of 6 MiB memtables: on the
		// 2,000 × 200 world, 16 tables of 28 MiB in all, into 19 MiB at
		// L6); compacting it every 64 MiB cost a 2,000 × 200 bootstrap a
		// quarter more CPU per record.
		L0CompactionThreshold:    32,
		L0StopWritesThreshold:    96,
		MaxConcurrentCompactions: func() int { return 2 },
	}
	if po.MemTableSize == 0 {
		po.MemTableSize = DefaultMemTableSize
	}
	po.Levels = levelOptions()
	// Tables written before pointReadFilter carry a filter of every key
	// under the plain bloom policy's name; keep reading them.
	po.Filters = map[string]pebble.FilterPolicy{plainBloom.Name(): plainBloom}
	po.EnsureDefaults()
	return po
}

// levelOptions are the store's per-level table options.
func levelOptions() []pebble.LevelOptions {
	levels := make([]pebble.LevelOptions, 7)
	for i := range levels {
		l := &levels[i]
		l.BlockSize = 32 << 10
		l.Compression = pebble.ZstdCompression
		if i == 0 {
			l.Compression = pebble.SnappyCompression
		}
		l.TargetFileSize = 64 << 20
		// Point reads of rev/ and repo/ for keys that are mostly absent
		// during bootstrap: bloom filters answer "absent" without a block.
		// ev/ and cap/ keys (range scans only) are left out of them.
		l.FilterPolicy = pointReadFilter{}
		l.FilterType = pebble.TableFilter
	}
	// The bottom level holds nearly all the data (all of it after a manual
	// compaction) and is tuned for size (numbers from
	// BenchmarkWriterWorldRecords/2000x200 and BenchmarkBottomLevelRead):
	//   - no filter: Pebble never reads L6 filters on Get (only iterators
	//     with UseL6Filters, which nothing here sets), so one is dead
	//     weight: 1.3 B per archived event;
	//   - 64 KiB blocks: 1.75 B per event less than 32 KiB; a point read
	//     that misses the block cache costs ~20% more (49 → 58 µs on the
	//     record mix); replay and cached point reads unchanged. Not taken:
	//     128 KiB (3.1 B less, but a miss costs 2×) and a restart interval
	//     of 64 (0.5 B less, cached point reads ~20% slower).
	//
	// Measured and not taken (BenchmarkWriterWorldRecords/2000x200, process
	// CPU from getrusage, alternating runs): Pebble v2.1.7 with these
	// options at its row-block formats writes the same 105.8 B per event
	// for 0.95-1.01x the write-phase CPU (median 0.985x, 4 pairs); its
	// columnar blocks (FormatColumnarBlocks) 112.7 B and 1.2x the CPU; its
	// per-level zstd level on L6 100.7 B at level 9 (1.8x the CPU of the
	// compactions into L6), 104.5 B at level 5 (1.4x). On v1,
	// FlushSplitBytes and an L0 target of 4 MiB: 0.92x and 1.01x the CPU in
	// two pairs, no change in bytes. 8 MiB target files on L0-L5 (with
	// LBaseMaxBytes 16 MiB, or L6 at 8 MiB too): BenchmarkBulkIngest
	// writer+cap on 8,000 x 200, 3 alternating rounds, medians 12.8 and
	// 12.6 CPU-s per million records against 11.7 (rounds 10.9-13.7 in
	// all: no gain). Pebble v2's value separation: docs/design.md.
	levels[6].FilterPolicy = nil
	levels[6].BlockSize = 64 << 10
	return levels
}

// lockStore takes the store's LOCK file before Pebble opens, so that a
// failure to take it is told apart from every other failure of the open.
func (s *Store) lockStore() error {
	l, err := pebble.LockDirectory(s.dir, s.fs)
	if err != nil {
		if lockHeld(err) {
			return fmt.Errorf("archive: open %s: %w — is another backstream process using this data dir? (%w)", s.dir, ErrLocked, err)
		}
		return fmt.Errorf("archive: open %s: take the LOCK file: %w", s.dir, err)
	}
	s.lock = l
	return nil
}

// errHeldInProcess is what Pebble v1.1.5's vfs.Default.Lock returns when
// this process holds the lock already (fcntl locks do not exclude their own
// process, so Pebble keeps a table of the files it locked). It has no type
// of its own: cockroachdb/errors.Is matches it by its type chain and exact
// message, not by a substring.
var errHeldInProcess = crdberrors.New("lock held by current process")

// lockHeld reports whether err, from taking the LOCK file, means someone
// holds it. Another process's lock fails fcntl(F_SETLK) with EAGAIN or
// EACCES (POSIX allows either; Pebble's MemFS returns EAGAIN), returned bare;
// a LOCK file that cannot be created at all (permissions, a missing
// directory) is an *fs.PathError, possibly with the same EACCES inside: not
// a held lock.
func lockHeld(err error) bool {
	if crdberrors.Is(err, errHeldInProcess) {
		return true
	}
	var pathErr *iofs.PathError
	if errors.As(err, &pathErr) {
		return false
	}
	return errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)
}

// guard is the startup guard (C5) and the first phase read (C2).
func (s *Store) guard(now func() time.Time) error {
	_, instErr := s.Instance()
	_, phaseErr := s.Phase()
	switch {
	case instErr == nil && phaseErr == nil:
		return nil
	case isRead(instErr) || isRead(phaseErr):
		return fmt.Errorf("archive: %w: cannot read the store identity: %w", ErrRefused, errors.Join(instErr, phaseErr))
	case errors.Is(instErr, ErrMalformed) || errors.Is(phaseErr, ErrMalformed):
		return fmt.Errorf("archive: %w: the store identity is malformed; backstream will not guess: %w", ErrRefused, errors.Join(instErr, phaseErr))
	}
	// At least one of instance/phase is missing, the other missing or fine.
	found, err := s.describeContents()
	if err != nil {
		return fmt.Errorf("archive: %w: %v", ErrRefused, err)
	}
	if found != "" {
		var missing []string
		if instErr != nil {
			missing = append(missing, string(KeyInstance))
		}
		if phaseErr != nil {
			missing = append(missing, string(KeyPhase))
		}
		return fmt.Errorf("archive: %w: %s holds %s but no %s; backstream will not re-bootstrap over existing data "+
			"(restore the store from a backup or move it aside to start a new archive)",
			ErrRefused, s.dir, found, strings.Join(missing, " or "))
	}
	if s.readOnly {
		return fmt.Errorf("archive: %w: %s is an empty store", ErrNotFound, s.dir)
	}
	return s.initialise(now())
}

// describeContents reports what a store without identity holds: "" when it
// holds no keys at all.
func (s *Store) describeContents() (string, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return "", fmt.Errorf("scan store: %w", err)
	}
	defer it.Close()
	var parts []string
	for _, p := range dataPrefixes {
		if it.SeekGE(p); it.Valid() && hasPrefix(it.Key(), p) {
			parts = append(parts, fmt.Sprintf("%s keys (first %q)", p, truncateForError(it.Key())))
		}
	}
	if len(parts) == 0 && it.First() {
		parts = append(parts, fmt.Sprintf("other keys (first %q)", truncateForError(it.Key())))
	}
	if err := it.Error(); err != nil {
		return "", fmt.Errorf("scan store: %w", err)
	}
	return strings.Join(parts, ", "), nil
}

func (s *Store) initialise(now time.Time) error {
	var id Instance
	if _, err := io.ReadFull(rand.Reader, id[:]); err != nil {
		return fmt.Errorf("archive: mint instance id: %w", err)
	}
	phase, err := EncodePhase(PhaseBootstrap)
	if err != nil {
		return fmt.Errorf("archive: initialise store: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set(KeyInstance, id[:], nil)
	_ = b.Set(KeyPhase, phase, nil)
	_ = b.Set(KeyPhaseEnteredAt, EncodeTime(now), nil)
	_ = b.Set(KeyIndex, EncodeIndexMarker(IndexMarker{Next: 1, End: 1}), nil) // nothing to backfill
	_ = b.Set(KeyDueIndex, dueIndexBuilt, nil)                                // no repos to index
	// Not through commit: the CommitHook sees the batches of a store that
	// is open, and this one is part of opening it.
	if err := commitSynced(b); err != nil {
		return s.persistErr("initialise store", err)
	}
	s.created = true
	return nil
}

// Created reports whether Open initialised a new store.
func (s *Store) Created() bool { return s.created }

// DataDir is the data dir the store lives in.
func (s *Store) DataDir() string { return s.dataDir }

// ScratchDir is <data-dir>/scratch, emptied at every Open.
func (s *Store) ScratchDir() string { return s.scratch }

// FS is the filesystem the store lives on.
func (s *Store) FS() vfs.FS { return s.fs }

// DB exposes the Pebble handle for readers in this package's tests and for
// metrics collection. Writes outside the Writer and Commit are a bug.
func (s *Store) DB() *pebble.DB { return s.db }

// DiskBytes is the store's size on disk: what Pebble counts (tables,
// write-ahead logs, manifest, options) and, for a store opened read-only,
// the write-ahead logs on disk too, which Pebble counts only when it writes
// to the store. A store stopped before its rows were flushed to a table (a
// fresh checkpoint, a small store) holds them all in its logs.
func (s *Store) DiskBytes() (uint64, error) {
	n := s.db.Metrics().DiskSpaceUsage()
	if !s.readOnly {
		return n, nil
	}
	names, err := s.pfs.List(s.dir) // timed, as Pebble's own calls
	if err != nil {
		return 0, fmt.Errorf("archive: size of %s: %w", s.dir, err)
	}
	for _, name := range names {
		if !strings.HasSuffix(name, ".log") {
			continue
		}
		fi, err := s.pfs.Stat(s.fs.PathJoin(s.dir, name))
		if err != nil {
			return 0, fmt.Errorf("archive: size of %s: %w", s.dir, err)
		}
		n += uint64(fi.Size())
	}
	return n, nil
}

// Close closes Pebble and releases the LOCK file. The Writer must be closed
// first. After a fatal error it returns that error.
func (s *Store) Close() error {
	var err error
	s.disk.close()
	if s.db != nil {
		err = s.closeDB()
		s.db = nil
		s.closeHealth()
	}
	if s.lock != nil {
		err = errors.Join(err, s.lock.Close())
		s.lock = nil
	}
	if s.cache != nil {
		s.cache.Unref()
		s.cache = nil
	}
	return err
}

// closeHealth stops the disk-health checker, once Pebble is closed.
func (s *Store) closeHealth() {
	if s.health != nil {
		s.health.Close()
		s.health = nil
	}
}

// closeDB closes Pebble. After a fatal error, Close reports the WAL error
// again (without the operator's words): the fatal error is returned instead.
func (s *Store) closeDB() error {
	err := s.db.Close()
	if fe := s.fatal.Load(); fe != nil {
		return fe
	}
	return err
}

// onFatal is the pebbleLogger's fatal handler: it keeps the first fatal
// error (Close reports it), then hands it to then (Options.OnFatal).
func (s *Store) onFatal(then func(*FatalError)) func(*FatalError) {
	return func(fe *FatalError) {
		s.fatal.CompareAndSwap(nil, fe)
		if then != nil {
			then(fe)
		}
	}
}

// persistErr wraps a write/sync failure; disk-full errors say so and name
// the data dir. A FatalError already does, and is returned as it is.
func (s *Store) persistErr(op string, err error) error {
	var fe *FatalError
	if errors.As(err, &fe) {
		return fe
	}
	return PersistError(s.dataDir, op, err)
}

// PersistError wraps a failed write to the store under dataDir into the
// message an operator needs. A full disk is named as such: "disk full at
// <data-dir>: free space and restart" (ErrDiskFull).
func PersistError(dataDir, op string, err error) error {
	if isENOSPC(err) {
		return diskFullError(dataDir, op, err)
	}
	return fmt.Errorf("archive: %s: write to the store in %s failed; backstream stops rather than lose data — check the disk and restart: %w", op, dataDir, err)
}

// pebbleLogger routes Pebble's log to slog; Fatalf never returns.
type pebbleLogger struct {
	log     *slog.Logger
	dataDir string
	onFatal func(*FatalError)
	replay  *walReplay // adds up the write-ahead logs Open replays; may be nil
}

// Infof is Pebble's chatter, at debug level. Background errors do not come
// here: the event listener (diskguard.go) takes them, at ERROR.
func (l pebbleLogger) Infof(format string, args ...any) {
	l.replay.note(format, args)
	l.log.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}

func (l pebbleLogger) Errorf(format string, args ...any) {
	l.log.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf turns Pebble's fatal report into a FatalError that names the data
// dir (and a full disk as such), logs it, hands it to onFatal, and panics
// with it: Pebble requires that Fatalf never return. The store never exits
// the process itself; see Options.OnFatal for where the panic goes.
func (l pebbleLogger) Fatalf(format string, args ...any) {
	var cause error = fmt.Errorf(format, args...)
	for _, a := range args {
		if e, ok := a.(error); ok { // keep errors.Is(err, syscall.ENOSPC) working
			cause = &wrappedError{msg: cause.Error(), err: e}
			break
		}
	}
	fe := &FatalError{Err: PersistError(l.dataDir, "pebble", cause)}
	l.log.Error(fe.Error(), "component", "pebble")
	if l.onFatal != nil {
		l.onFatal(fe)
	}
	panic(fe)
}

// checkCommit runs the test-only CommitHook over b's keys.
func (s *Store) checkCommit(op string, b *pebble.Batch) error {
	if s.hook == nil {
		return nil
	}
	keys, err := batchKeys(b)
	if err != nil {
		return err
	}
	return s.hook(op, keys)
}

// batchKeys returns the user keys of every record in b, in batch order (a
// range deletion contributes its start key). The slices alias b's memory.
func batchKeys(b *pebble.Batch) ([][]byte, error) {
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

// wrappedError keeps a formatted message and the error it was formatted from.
type wrappedError struct {
	msg string
	err error
}

func (e *wrappedError) Error() string { return e.msg }
func (e *wrappedError) Unwrap() error { return e.err }

// plainBloom is the filter of tables written by earlier builds (every key).
var plainBloom = bloom.FilterPolicy(10)

// pointReadFilter is a 10-bit bloom filter over the keys that are read by
// point lookups (meta/, cursor/, repo/, rev/, host/). ev/ and cap/ keys are
// only ever read by range scans, where a filter is never consulted: they
// are left out of the filter (1.3 B per event saved in L0–L5), and
// MayContain answers true for them, so a point read of one stays correct.
// The name differs from plainBloom's, so a build that does not know this
// policy ignores these filters instead of trusting them for ev/ keys.
type pointReadFilter struct{}

func (pointReadFilter) Name() string { return "backstream.bloom10-point-read-families.v1" }

func (pointReadFilter) MayContain(ft pebble.FilterType, filter, key []byte) bool {
	if scanOnlyKey(key) {
		return true
	}
	return plainBloom.MayContain(ft, filter, key)
}

func (pointReadFilter) NewWriter(ft pebble.FilterType) pebble.FilterWriter {
	return pointReadFilterWriter{plainBloom.NewWriter(ft)}
}

type pointReadFilterWriter struct{ pebble.FilterWriter }

func (w pointReadFilterWriter) AddKey(key []byte) {
	if !scanOnlyKey(key) {
		w.FilterWriter.AddKey(key)
	}
}

// scanOnlyKey reports whether key belongs to a family read by range scans
// only (ev/, cap/, rec/, tomb/, and the replay index xc/, xd/, xm/).
func scanOnlyKey(key []byte) bool {
	return hasPrefix(key, PrefixEvent) || hasPrefix(key, PrefixCapture) ||
		hasPrefix(key, PrefixRecord) || hasPrefix(key, PrefixTomb) || isReplayIndexKey(key)
}

func hasPrefix(b, p []byte) bool { return len(b) >= len(p) && string(b[:len(p)]) == string(p) }

func isRead(err error) bool { return err != nil && errors.Is(err, ErrRead) }

// Startup is the report of the one-time reads a start waits for
// (Options.Startup; nil when none): the writer's and bootstrap's show
// there too.
func (s *Store) Startup() *Startup { return s.startup }
