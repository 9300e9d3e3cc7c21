package archive

// This file owns online backup: a consistent copy of the open store as a new
// data dir. Pebble's checkpoint (sstables hard-linked, MANIFEST, OPTIONS and
// the WALs copied, every file and directory synced) is staged inside the
// store dir itself (store/checkpoint-staging/N), on the store's own
// filesystem for certain, so its tables are always hard links; the store
// then moves it into the destination (a rename on the same filesystem, a
// copy elsewhere), each of its calls there timed, so a destination that
// stops answering ends the checkpoint and not the live store.
//
// Why not scratch/: it may be a volume of its own (a tmpfs, a download
// disk), where Pebble would copy every table of the store, filling it.
// Pebble ignores a directory in its own: its listing parses file names
// (CURRENT, LOCK, MANIFEST-*, OPTIONS-*, marker.*, temporary.*, N.sst,
// N.log) and skips any other, and it deletes only files it knows; a
// checkpoint links or copies only the files of its version, never a
// directory in the store dir.
//
// Why the two steps: for as long as Pebble's checkpoint runs it holds the
// live store's file deletions (no compacted-away table, no old write-ahead
// log or manifest is removed), and Pebble gives no way to abandon it. Built
// on the live volume, the only calls it makes are the live store's, timed
// by its guard: one that never returns is the live store's disk fault, as
// it should be. Every call on the destination comes after it, and one stuck
// there holds at most a goroutine and the staged copy (hard links to the
// tables of one instant: at most the store's size then), until it returns
// or the process restarts (Open removes the staging dir, a named step).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// ErrCheckpointDest: the checkpoint destination is refused: it exists and is
// not an empty directory, or it lies inside the data dir's store/ (the
// staging dir included) or scratch/ (or is the data dir itself). Nothing
// was written.
var ErrCheckpointDest = errors.New("checkpoint destination refused")

// ErrCheckpointReadOnly: the store was opened read-only, which Pebble cannot
// checkpoint; open it read-write (no other process may hold it).
var ErrCheckpointReadOnly = errors.New("a store opened read-only cannot be checkpointed")

// ErrCheckpointNoRoom: the copies a checkpoint stages on the store's own
// volume would take it below the store's free-space floor
// (Options.MinFree), which the live store would then record as a disk
// fault. Nothing was written.
var ErrCheckpointNoRoom = errors.New("no room to stage the checkpoint on the store's volume")

// ErrCheckpointStuck: a call of a checkpoint on its destination has not
// returned within the store's bound (Options.MaxWriteStall), with no
// error: the checkpoint gave up on it, and no checkpoint of this store
// starts until it returns. The live store is not affected.
var ErrCheckpointStuck = errors.New("checkpoint destination stuck")

// checkpointPartial is where a checkpoint is built inside its destination
// before it is renamed to store/: a crash mid-way leaves a directory that
// Open does not mistake for a store.
const checkpointPartial = "store.partial"

// checkpointStaging is the directory inside the store dir where Pebble
// builds each checkpoint, in a numbered directory of its own, before it is
// moved to its destination. Not a name Pebble parses as one of its files
// (it skips it), nor the prefix of one; Open removes it (a crash mid-way
// leaves it).
const checkpointStaging = "checkpoint-staging"

// copyChunk is how much of a file a copy to the destination writes per
// call: each one is progress for the stall bound.
const copyChunk = 1 << 20

// ckCalls is what the store keeps of its checkpoints: the staged copies
// made, and the call on a destination that a checkpoint gave up on.
type ckCalls struct {
	staged atomic.Uint64 // the staged checkpoints made, naming the next

	mu         sync.Mutex
	stuck      string     // the call a checkpoint gave up on, its work not ended; "" none
	stuckSince time.Time  // when that call began
	stuckBy    *destCalls // the checkpoint that gave up
}

// Checkpoint writes a consistent copy of the store, as it is at one instant
// between two commits, to dir as a new data dir: dir/store is a store that
// Open accepts (same identity, phase, cursors, repo states and events up to
// the tip at that instant). dir must not exist or be an empty directory, and
// must not be (or lie inside) this data dir's store/ or scratch/ — the store
// is never overwritten. The WAL is flushed and synced first, every file
// written is synced, and store/ appears only once complete (built as
// dir/store.partial and renamed), so a crash mid-way never leaves something
// that opens as a store. Safe to call while the Writer runs; concurrent
// Checkpoints must use distinct destinations. A store opened read-only is
// refused (ErrCheckpointReadOnly).
//
// Pebble builds the copy in the store dir's checkpoint-staging/, where
// sstables are hard-linked (it is on the store's filesystem, whatever is
// mounted at scratch/); it is then renamed into dir when dir is on that
// filesystem too (cheap, and the checkpoint
// then pins files that compactions would delete: its disk use grows as the
// live store diverges), and copied elsewhere. A call on dir (its stat, a
// directory made, a file created, written or synced, a rename) that has
// not returned after MaxWriteStall ends the checkpoint with
// ErrCheckpointStuck, without a fault of the live store; until that call
// returns, every Checkpoint is refused with ErrCheckpointStuck
// (CheckpointStuck says which call). A call of Pebble's checkpoint, on the
// store's own volume, that never returns is the store's disk fault.
func (s *Store) Checkpoint(dir string) error {
	if s.db == nil {
		return fmt.Errorf("archive: checkpoint to %s: %w", dir, ErrClosed)
	}
	if dir == "" {
		return fmt.Errorf("archive: checkpoint: %w: no destination", ErrCheckpointDest)
	}
	if s.readOnly {
		// Pebble's checkpoint links the OPTIONS file the open wrote; a
		// read-only open writes none.
		return fmt.Errorf("archive: checkpoint to %s: %w", dir, ErrCheckpointReadOnly)
	}
	dir = filepath.Clean(dir)
	if call, since := s.CheckpointStuck(); call != "" {
		return fmt.Errorf("archive: checkpoint to %s: %w: an earlier checkpoint's %s has not returned since %s; no checkpoint starts until it does: check that volume",
			dir, ErrCheckpointStuck, call, since.UTC().Format(time.RFC3339))
	}
	if err := s.RoomToStage(); err != nil {
		return fmt.Errorf("archive: checkpoint to %s: %w", dir, err)
	}
	if err := s.checkCheckpointDest(dir); err != nil {
		return err
	}
	staging := s.fs.PathJoin(s.stagingDir(), strconv.FormatUint(s.ck.staged.Add(1), 10))
	// Every Writer commit is synced already; the flush makes the guarantee
	// independent of that: everything committed before this call is in the
	// checkpoint. Pebble syncs every file it writes and staging itself;
	// its calls are the live store's (s.pfs), timed by its guard.
	if err := s.db.Checkpoint(staging, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("archive: checkpoint to %s: pebble checkpoint in %s: %w", dir, staging, err)
	}
	return s.onDest(dir, func(d *destCalls) error {
		// What a copy, or a failure, leaves of the staged checkpoint;
		// nothing after a rename. On the live volume: the store's call.
		defer s.pfs.RemoveAll(staging)
		return s.moveCheckpoint(d, staging, dir)
	})
}

// moveCheckpoint moves the staged checkpoint into dir as dir/store: built
// as dir/store.partial, renamed once complete, every directory it changes
// synced. On a failure it removes what it wrote there, and dir if it
// created it.
func (s *Store) moveCheckpoint(d *destCalls, staging, dir string) (err error) {
	partial := s.fs.PathJoin(dir, checkpointPartial)
	final := s.fs.PathJoin(dir, StoreDir)
	var created bool
	if err := d.call("a stat of "+dir, func() error {
		_, err := s.fs.Stat(dir)
		created = errors.Is(err, os.ErrNotExist)
		return nil
	}); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			d.tidy("removing "+partial, func() error { return s.fs.RemoveAll(partial) })
			if created {
				d.tidy("removing "+dir, func() error { return s.fs.RemoveAll(dir) })
			}
		}
	}()
	fail := func(op string, err error) error {
		return fmt.Errorf("archive: checkpoint to %s: %s: %w", dir, op, err)
	}
	if err := d.call("making "+dir, func() error { return s.fs.MkdirAll(dir, 0o755) }); err != nil {
		return fail("mkdir", err)
	}
	if created {
		if err := d.call("a sync of the parents of "+dir, func() error { return syncAncestors(s.fs, dir) }); err != nil {
			return fail("sync", err)
		}
	}
	err = d.call("a rename of "+staging+" to "+partial, func() error { return s.fs.Rename(staging, partial) })
	if errors.Is(err, syscall.EXDEV) { // another filesystem: copied
		err = s.copyCheckpoint(d, staging, partial)
	}
	if err != nil {
		return fail("move the checkpoint out of "+staging, err)
	}
	if err := d.call("a rename of "+partial+" to "+final, func() error { return s.fs.Rename(partial, final) }); err != nil {
		return fail("rename "+checkpointPartial+" to "+StoreDir, err)
	}
	if err := d.call("a sync of "+dir, func() error { return syncDir(s.fs, dir) }); err != nil {
		return fail("sync", err)
	}
	return nil
}

// copyCheckpoint copies the staged checkpoint's files (Pebble's checkpoint
// is one flat directory) into partial, each synced, then partial itself.
// The staged files are read as the store's own (s.pfs): they are on its
// volume, and a read of them that never returns is its fault.
func (s *Store) copyCheckpoint(d *destCalls, staging, partial string) error {
	names, err := s.pfs.List(staging)
	if err != nil {
		return err
	}
	if err := d.call("making "+partial, func() error { return s.fs.MkdirAll(partial, 0o755) }); err != nil {
		return err
	}
	buf := make([]byte, copyChunk)
	for _, name := range names {
		if err := s.copyFile(d, s.fs.PathJoin(staging, name), s.fs.PathJoin(partial, name), buf); err != nil {
			return err
		}
	}
	return d.call("a sync of "+partial, func() error { return syncDir(s.fs, partial) })
}

// copyFile copies src, a staged file, to dst, a chunk per timed call,
// each chunk flushed to the device as it is written (a call that waits
// for at most about a chunk: the stall bound is one call with no
// progress, not the file's total), and syncs it.
func (s *Store) copyFile(d *destCalls, src, dst string, buf []byte) (err error) {
	in, err := s.pfs.Open(src, vfs.SequentialReadsOption)
	if err != nil {
		return err
	}
	defer in.Close()
	var out vfs.File
	if err := d.call("a create of "+dst, func() (err error) {
		out, err = s.fs.Create(dst)
		return err
	}); err != nil {
		return err
	}
	defer func() {
		// Even once the checkpoint gave up: the file is closed, not leaked.
		if cerr := d.track("a close of "+dst, out.Close); err == nil {
			err = cerr
		}
	}()
	var written int64
	for {
		n, rerr := in.Read(buf)
		if n > 0 {
			if err := d.call("a write of "+dst, func() error {
				_, err := out.Write(buf[:n])
				return err
			}); err != nil {
				return err
			}
			written += int64(n)
			// Each chunk is flushed as it is written, so no call waits on
			// more than about a chunk of the device's work: a volume that
			// writes slowly but steadily answers every call within the
			// bound, whatever the file's size, where one sync at the end
			// would wait for the whole file.
			if err := d.call("a sync of "+dst, func() error {
				_, err := out.SyncTo(written)
				return err
			}); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	return d.call("a sync of "+dst, out.Sync)
}

// destCalls times a checkpoint's calls on its destination (onDest): the
// one out now, and when it began.
type destCalls struct {
	abandoned atomic.Bool // the checkpoint gave up on a call: no other starts

	mu    sync.Mutex
	name  string // "" between calls
	since time.Time
}

// errAbandoned ends the work of a checkpoint that gave up on a call, once
// that call has returned.
var errAbandoned = errors.New("checkpoint abandoned")

// call runs one call on the destination, named for the error and the
// refusals if it never returns; none once the checkpoint gave up.
func (d *destCalls) call(name string, call func() error) error {
	if d.abandoned.Load() {
		return errAbandoned
	}
	return d.track(name, call)
}

// tidy removes what a failed checkpoint wrote, even one that gave up:
// the call that held it has returned, and the destination is answering.
func (d *destCalls) tidy(name string, call func() error) { _ = d.track(name, call) }

func (d *destCalls) track(name string, call func() error) error {
	d.mu.Lock()
	d.name, d.since = name, time.Now()
	d.mu.Unlock()
	err := call()
	d.mu.Lock()
	d.name = ""
	d.mu.Unlock()
	return err
}

// out is the call in flight and when it began ("" for none).
func (d *destCalls) out() (string, time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.name, d.since
}

// onDest runs work, a checkpoint's calls on its destination dir, on a
// goroutine of its own, and returns its error; or, once one call has been
// out for the store's bound (MaxWriteStall; found within a third of it
// more), an ErrCheckpointStuck error naming it. Then work is abandoned
// (it starts no further call but its tidying) and, until it has ended,
// the store refuses checkpoints (CheckpointStuck).
func (s *Store) onDest(dir string, work func(*destCalls) error) error {
	d := &destCalls{}
	done := make(chan error, 1)
	go func() {
		err := work(d)
		s.ck.mu.Lock()
		if s.ck.stuckBy == d {
			s.ck.stuck, s.ck.stuckBy = "", nil
		}
		// Sent under the lock (done has room): the waiter that finds
		// done empty while it holds the lock knows this goroutine has not
		// looked at the mark yet, and will clear the one it sets. Sent
		// after the lock, a mark set between the two stays for good, and
		// every checkpoint is refused until a restart.
		done <- err
		s.ck.mu.Unlock()
	}()
	bound := s.disk.maxStall
	tick := time.NewTicker(readTick(bound))
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
		}
		name, since := d.out()
		if name == "" || time.Since(since) < bound {
			continue
		}
		s.ck.mu.Lock()
		select {
		case err := <-done: // it ended meanwhile
			s.ck.mu.Unlock()
			return err
		default:
		}
		d.abandoned.Store(true)
		s.ck.stuck, s.ck.stuckSince, s.ck.stuckBy = name, since, d
		s.ck.mu.Unlock()
		return fmt.Errorf("archive: checkpoint to %s: %w: %s has not returned for over %v with no error: the destination's volume is stuck or far too slow; the live store is not affected, and no checkpoint starts until that call returns",
			dir, ErrCheckpointStuck, name, time.Since(since).Round(time.Millisecond))
	}
}

// RoomToStage refuses a checkpoint (ErrCheckpointNoRoom) whose staged
// copies would take the store's volume below its free-space floor: Pebble
// links the tables into the staging dir and copies the rest it counts
// (stagedCopyBytes). Nil with room, with the floor off, or on a
// filesystem that is not the OS's (as the floor's own check).
func (s *Store) RoomToStage() error {
	sp, floor, on, err := s.spaceAndFloor()
	if !on || err != nil {
		return err
	}
	if need := s.stagedCopyBytes(); sp.Below(floor + need) {
		return fmt.Errorf("%w: staging it copies %d bytes (the write-ahead logs, the manifest, the options) to the volume of %s, which has %d bytes free and must keep %d (--min-free)",
			ErrCheckpointNoRoom, need, s.dataDir, sp.Free, floor)
	}
	return nil
}

// stagedCopyBytes is what Pebble's checkpoint copies rather than links:
// everything it counts on disk but the tables (live, obsolete, zombie, or
// being written by a compaction) and the obsolete logs, that is the live
// write-ahead logs, the manifest and the options file.
func (s *Store) stagedCopyBytes() uint64 {
	m := s.db.Metrics()
	n := m.DiskSpaceUsage() - m.WAL.ObsoletePhysicalSize - m.Table.ObsoleteSize - m.Table.ZombieSize - uint64(m.Compact.InProgressBytes)
	for _, lm := range m.Levels {
		n -= uint64(lm.Size)
	}
	return n
}

// CheckpointStuck names the call on a destination that a checkpoint gave
// up on (ErrCheckpointStuck) and that has not returned yet, and when it
// began; "" when there is none, and a checkpoint may start.
func (s *Store) CheckpointStuck() (call string, since time.Time) {
	s.ck.mu.Lock()
	defer s.ck.mu.Unlock()
	return s.ck.stuck, s.ck.stuckSince
}

// MaxWriteStall is the store's stall bound (Options.MaxWriteStall, or its
// default): what reads another store on its behalf (a checkpoint's
// read-back) is bounded by it too.
func (s *Store) MaxWriteStall() time.Duration { return s.disk.maxStall }

// checkCheckpointDest refuses a destination that would overwrite or nest in
// the live data dir's store or scratch, or that exists and is not empty.
// Its stat and listing of dir are timed as the checkpoint's other calls on
// it (onDest).
func (s *Store) checkCheckpointDest(dir string) error {
	refuse := func(format string, args ...any) error {
		return fmt.Errorf("archive: checkpoint to %s: %w: %s", dir, ErrCheckpointDest, fmt.Sprintf(format, args...))
	}
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return filepath.Clean(p)
	}
	d := abs(dir)
	for _, live := range []string{s.dir, s.scratch} {
		if within(d, abs(live)) {
			return refuse("it is inside the live store's %s", live)
		}
	}
	if d == abs(s.dataDir) {
		return refuse("it is the live data dir")
	}
	return s.onDest(dir, func(c *destCalls) error {
		var fi os.FileInfo
		var names []string
		err := c.call("a stat of "+dir, func() (err error) {
			fi, err = s.fs.Stat(dir)
			return err
		})
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil
		case err != nil:
			return fmt.Errorf("archive: checkpoint to %s: stat: %w", dir, err)
		case !fi.IsDir():
			return refuse("it exists and is not a directory")
		}
		if err := c.call("a listing of "+dir, func() (err error) {
			names, err = s.fs.List(dir)
			return err
		}); err != nil {
			return fmt.Errorf("archive: checkpoint to %s: list: %w", dir, err)
		}
		if len(names) > 0 {
			return refuse("it exists and is not empty (holds %q); checkpoints never overwrite anything — pick a new directory", names[0])
		}
		return nil
	})
}

// within reports whether path is base or lies under it.
func within(path, base string) bool {
	if path == base {
		return true
	}
	rel, err := filepath.Rel(base, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
