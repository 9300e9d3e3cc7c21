package archive

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestOpenLockedByAnotherProcess: the LOCK file held the way another
// process holds it. An open-file-description lock (Linux) conflicts with
// Pebble's fcntl lock even within one process, so fcntl answers as it would
// for another process (EAGAIN or EACCES), past Pebble's in-process table.
func TestOpenLockedByAnotherProcess(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger, CacheSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, err := os.OpenFile(filepath.Join(dir, StoreDir, "LOCK"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &lk); err != nil {
		t.Fatalf("take an OFD lock: %v", err)
	}
	_, err = Open(dir, Options{Logger: quietLogger, CacheSize: 1 << 20})
	if !errors.Is(err, ErrLocked) || !(errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES)) {
		t.Fatalf("open of a store another holder locked: %v, want ErrLocked from fcntl", err)
	}
}
