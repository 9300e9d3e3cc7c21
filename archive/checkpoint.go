package archive

// This file owns online backup: a consistent copy of the open store as a new
// data dir (Pebble's checkpoint: sstables hard-linked when on the same
// filesystem, copied otherwise; MANIFEST, OPTIONS and the WALs copied; every
// file and directory synced).

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble"
)

// ErrCheckpointDest: the checkpoint destination is refused: it exists and is
// not an empty directory, or it lies inside the data dir's store/ or
// scratch/ (or is the data dir itself). Nothing was written.
var ErrCheckpointDest = errors.New("checkpoint destination refused")

// ErrCheckpointReadOnly: the store was opened read-only, which Pebble cannot
// checkpoint; open it read-write (no other process may hold it).
var ErrCheckpointReadOnly = errors.New("a store opened read-only cannot be checkpointed")

// checkpointPartial is where a checkpoint is built inside its destination
// before it is renamed to store/: a crash mid-way leaves a directory that
// Open does not mistake for a store.
const checkpointPartial = "store.partial"

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
// Sstables are hard-linked when dir is on the store's filesystem (cheap, and
// the checkpoint then pins files that compactions would delete: its disk use
// grows as the live store diverges); elsewhere they are copied.
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
	if err := s.checkCheckpointDest(dir); err != nil {
		return err
	}
	created := false
	if _, err := s.fs.Stat(dir); errors.Is(err, os.ErrNotExist) {
		created = true
	}
	partial := s.fs.PathJoin(dir, checkpointPartial)
	final := s.fs.PathJoin(dir, StoreDir)
	fail := func(op string, err error) error {
		_ = s.fs.RemoveAll(partial)
		if created {
			_ = s.fs.RemoveAll(dir)
		}
		return fmt.Errorf("archive: checkpoint to %s: %s: %w", dir, op, err)
	}
	// Every Writer commit is synced already; the flush makes the guarantee
	// independent of that: everything committed before this call is in the
	// checkpoint. Pebble creates partial (and dir and any missing parents),
	// syncing each created directory's parent, and syncs every file it
	// writes.
	if err := s.db.Checkpoint(partial, pebble.WithFlushedWAL()); err != nil {
		return fail("pebble checkpoint", err)
	}
	if err := s.fs.Rename(partial, final); err != nil {
		return fail("rename "+checkpointPartial+" to "+StoreDir, err)
	}
	if err := syncDir(s.fs, dir); err != nil {
		return fail("sync", err)
	}
	return nil
}

// checkCheckpointDest refuses a destination that would overwrite or nest in
// the live data dir's store or scratch, or that exists and is not empty.
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
	fi, err := s.fs.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("archive: checkpoint to %s: stat: %w", dir, err)
	case !fi.IsDir():
		return refuse("it exists and is not a directory")
	}
	names, err := s.fs.List(dir)
	if err != nil {
		return fmt.Errorf("archive: checkpoint to %s: list: %w", dir, err)
	}
	if len(names) > 0 {
		return refuse("it exists and is not empty (holds %q); checkpoints never overwrite anything — pick a new directory", names[0])
	}
	return nil
}

// within reports whether path is base or lies under it.
func within(path, base string) bool {
	if path == base {
		return true
	}
	rel, err := filepath.Rel(base, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
