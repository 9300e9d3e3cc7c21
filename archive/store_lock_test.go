package archive

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	crdberrors "github.com/cockroachdb/errors"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// TestOpenTwiceIsLocked: a second Open of a data dir this process holds
// (real Pebble, the OS filesystem) is ErrLocked, read-write or read-only,
// with the operator's message; closing the first releases the lock.
func TestOpenTwiceIsLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, ro := range []bool{false, true} {
		_, err := Open(dir, Options{Logger: quietLogger, CacheSize: 1 << 20, ReadOnly: ro})
		if !errors.Is(err, ErrLocked) {
			t.Fatalf("second open (read-only %v): %v, want ErrLocked", ro, err)
		}
		if !strings.Contains(err.Error(), "another backstream process") || !strings.Contains(err.Error(), dir) {
			t.Fatalf("locked message %q does not tell the operator", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{Logger: quietLogger, CacheSize: 1 << 20})
	if err != nil {
		t.Fatalf("open after the holder closed: %v", err)
	}
	s.Close()
}

// TestOpenLockedOnMemFS: Pebble's MemFS reports a held lock as a bare
// EAGAIN, like fcntl for another process's lock: ErrLocked, cause kept.
func TestOpenLockedOnMemFS(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	defer s.Close()
	_, err := Open("/data", testOptions(mem))
	if !errors.Is(err, ErrLocked) || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("second open on a MemFS: %v, want ErrLocked wrapping EAGAIN", err)
	}
}

// TestOpenErrorsThatLookLikeLocks: failures whose text contains "lock"
// ("block", "clock") or whose errno could mean a held lock (EACCES inside a
// failed create) are reported as they are, never as ErrLocked.
func TestOpenErrorsThatLookLikeLocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   errorfs.Op
		file string
		err  error
	}{
		{"taking the LOCK: clock", errorfs.OpLock, "LOCK", errors.New("clock skew detected while locking")},
		{"taking the LOCK: permission", errorfs.OpLock, "LOCK", &fs.PathError{Op: "open", Path: "/data/store/LOCK", Err: syscall.EACCES}},
		{"reading the manifest: block", errorfs.OpFileRead, "MANIFEST", errors.New("bad block checksum")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			openMem(t, mem).Close()
			inj := errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
				if op == tc.op && strings.Contains(path, tc.file) {
					return tc.err
				}
				return nil
			})
			_, err := Open("/data", testOptions(errorfs.Wrap(mem, inj)))
			if err == nil || !errors.Is(err, tc.err) {
				t.Fatalf("open: %v, want the injected %v", err, tc.err)
			}
			if errors.Is(err, ErrLocked) {
				t.Fatalf("%v reported as a held lock", err)
			}
		})
	}
}

// TestLockHeld pins the classification of what taking the LOCK file can
// return (Pebble v1.1.5, vfs.Default and MemFS).
func TestLockHeld(t *testing.T) {
	for _, tc := range []struct {
		err  error
		held bool
	}{
		{crdberrors.New("lock held by current process"), true},                // vfs.Default, this process
		{syscall.EAGAIN, true},                                                // fcntl, another process; MemFS
		{syscall.EACCES, true},                                                // fcntl, another process (POSIX allows either)
		{&fs.PathError{Op: "open", Path: "LOCK", Err: syscall.EACCES}, false}, // cannot create the file
		{&fs.PathError{Op: "open", Path: "LOCK", Err: syscall.ENOENT}, false},
		{errors.New("lock held by current process"), false}, // the same text, not Pebble's error
		{errors.New("clock skew"), false},
		{crdberrors.New("bad block"), false},
		{syscall.ENOLCK, false}, // no locks available: not held by anyone
	} {
		if got := lockHeld(tc.err); got != tc.held {
			t.Errorf("lockHeld(%#v) = %v, want %v", tc.err, got, tc.held)
		}
	}
}

// TestOpenLockedLeavesScratch: a second Open of a held data dir used to
// empty scratch/ before it found the lock, deleting the running process's
// spilled downloads under it. It fails with ErrLocked and the file is still
// there; once the holder closes, the next Open empties scratch as before.
func TestOpenLockedLeavesScratch(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	spill := filepath.Join(s.ScratchDir(), "getRepo-123.car")
	if err := os.WriteFile(spill, []byte("a download in progress"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{Logger: quietLogger, CacheSize: 1 << 20}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second open: %v, want ErrLocked", err)
	}
	if b, err := os.ReadFile(spill); err != nil || string(b) != "a download in progress" {
		t.Fatalf("the held store's scratch file after a refused open: %q, %v", b, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, Options{Logger: quietLogger, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := os.Stat(spill); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("scratch not emptied by the holder's open: %v", err)
	}
}
