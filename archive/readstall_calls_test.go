package archive

import (
	"bytes"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// callHold is a filesystem whose calls named call ("Open", "OpenDir",
// "Stat", "List", "GetDiskUsage"; "File.Stat", "File.Prefetch" on a file
// it opened) wait, while h is armed, until h lets them through: a disk or a
// network volume that stops answering them without an error.
type callHold struct {
	vfs.FS
	h    *readHold
	call string
}

func (c callHold) hold(call string) {
	if call == c.call {
		c.h.wait()
	}
}

func (c callHold) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	c.hold("Open")
	f, err := c.FS.Open(name, opts...)
	if err != nil {
		return nil, err
	}
	return callHoldFile{File: f, c: c}, nil
}

func (c callHold) OpenDir(name string) (vfs.File, error) {
	c.hold("OpenDir")
	return c.FS.OpenDir(name)
}

func (c callHold) Stat(name string) (os.FileInfo, error) {
	c.hold("Stat")
	return c.FS.Stat(name)
}

func (c callHold) List(dir string) ([]string, error) {
	c.hold("List")
	return c.FS.List(dir)
}

func (c callHold) GetDiskUsage(path string) (vfs.DiskUsage, error) {
	c.hold("GetDiskUsage")
	return c.FS.GetDiskUsage(path)
}

type callHoldFile struct {
	vfs.File
	c callHold
}

func (f callHoldFile) Stat() (os.FileInfo, error) {
	f.c.hold("File.Stat")
	return f.File.Stat()
}

func (f callHoldFile) Prefetch(off, n int64) error {
	f.c.hold("File.Prefetch")
	return f.File.Prefetch(off, n)
}

// guardedTable is a guard with bound on the fake clock over an in-memory
// filesystem holding the table /000007.sst, wrapped by wrap before the
// guard counts its calls.
func guardedTable(t *testing.T, log *slog.Logger, bound time.Duration, wrap func(vfs.FS) vfs.FS) (*diskGuard, vfs.FS) {
	t.Helper()
	g := newDiskGuard("/data", log, time.Now, bound, 0, nil)
	t.Cleanup(g.close)
	mem := vfs.NewMem()
	if w, err := mem.Create("/000007.sst"); err != nil {
		t.Fatal(err)
	} else if _, err := w.Write([]byte("table")); err != nil || w.Close() != nil {
		t.Fatal(err)
	}
	return g, g.timeReads(wrap(mem))
}

// TestStuckCallIsAFault: on the fake clock, each call other than a read
// that Pebble makes on the store while it serves and that a dying disk or
// a hung network volume can leave without an answer — opening a table
// (a read or a compaction missing the table cache, a long scan reopening
// it for readahead), the table's size (file Stat, on every open),
// readahead (Prefetch), a file's Stat, the directory listing and
// directory open (at the start), the free-space query (after every flush,
// compaction and deletion) — is a read-stall fault once it has lasted the
// bound, at most one tick later, saying which call it is.
func TestStuckCallIsAFault(t *testing.T) {
	for _, tc := range []struct {
		call string
		do   func(fs vfs.FS, f vfs.File) error
		want string
	}{
		{"Open", func(fs vfs.FS, _ vfs.File) error {
			f, err := fs.Open("/000007.sst")
			if err == nil {
				err = f.Close()
			}
			return err
		}, "an open of a file of the store"},
		{"OpenDir", func(fs vfs.FS, _ vfs.File) error {
			f, err := fs.OpenDir("/")
			if err == nil {
				err = f.Close()
			}
			return err
		}, "an open of a directory of the store"},
		{"Stat", func(fs vfs.FS, _ vfs.File) error { _, err := fs.Stat("/000007.sst"); return err }, "a stat of a file of the store"},
		{"List", func(fs vfs.FS, _ vfs.File) error { _, err := fs.List("/"); return err }, "a listing of a directory of the store"},
		{"GetDiskUsage", func(fs vfs.FS, _ vfs.File) error { _, _ = fs.GetDiskUsage("/"); return nil }, "a free-space query of the store's volume"},
		{"File.Stat", func(_ vfs.FS, f vfs.File) error { _, err := f.Stat(); return err }, "a stat of /000007.sst"},
		{"File.Prefetch", func(_ vfs.FS, f vfs.File) error { return f.Prefetch(0, 5) }, "a prefetch of /000007.sst"},
	} {
		t.Run(tc.call, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const bound = time.Minute
				h := newReadHold()
				defer h.unhold()
				g, fs := guardedTable(t, quietLogger, bound, func(fs vfs.FS) vfs.FS { return callHold{fs, h, tc.call} })
				f, err := fs.Open("/000007.sst")
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				held := h.arm()
				done := make(chan error, 1)
				go func() { done <- tc.do(fs, f) }()
				<-held
				begun := time.Now()
				select {
				case <-g.failed:
				case <-time.After(10 * bound):
					t.Fatalf("%s held for %v (MaxWriteStall %v) and the store records no fault", tc.call, 10*bound, bound)
				}
				if waited := time.Since(begun); waited < bound || waited > bound+readTick(bound) {
					t.Fatalf("a stuck %s was a fault %v after it began, want within [%v, %v]", tc.call, waited, bound, bound+readTick(bound))
				}
				err = g.fault.Load()
				if want := tc.want + " has not returned for over 1m"; err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("fault %v, want %q", err, want)
				}
				h.unhold()
				if err := <-done; err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// lockedBuffer is a log destination safe for concurrent use.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines are the lines written holding s.
func (b *lockedBuffer) lines(s string) []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, l := range strings.Split(b.buf.String(), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// TestSlowReadIsCounted: on the fake clock, a read slower than a third
// of the bound but well under it is no fault, and until now was recorded
// nowhere. A read still out two ticks of the read timer after it began
// (over two thirds of the bound) is counted as slow and logged at WARN,
// naming the file, at most once a minute (the next line saying how many
// ticks found slow calls meanwhile); one under a third of the bound never
// is.
func TestSlowReadIsCounted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound = time.Minute
		const msg = "store read slow"
		var log lockedBuffer
		h := newReadHold()
		defer h.unhold()
		g, fs := guardedTable(t, slog.New(slog.NewTextHandler(&log, nil)), bound, h.wrap)
		f, err := fs.Open("/000007.sst")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		readFor := func(d time.Duration) {
			held := h.arm()
			done := make(chan error, 1)
			go func() {
				_, err := f.ReadAt(make([]byte, 5), 0)
				done <- err
			}()
			<-held
			time.Sleep(d)
			h.unhold()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		check := func(what string, slow uint64, lines int) {
			t.Helper()
			// A read that lasts two ticks is counted at the second, before
			// it returns; one that lasts less than a tick never is.
			if n := g.slowReads.Load(); n != slow {
				t.Fatalf("%s: %d slow reads counted, want %d", what, n, slow)
			}
			if l := log.lines(msg); len(l) != lines {
				t.Fatalf("%s: %d %q lines, want %d: %q", what, len(l), msg, lines, l)
			}
		}
		readFor(2*bound/3 + time.Second)
		check("a read of 41s (bound 1m)", 1, 1)
		if l := log.lines(msg)[0]; !strings.Contains(l, "level=WARN") || !strings.Contains(l, "call=\"a read of /000007.sst\"") {
			t.Fatalf("the slow read's line %q lacks the level or the call", l)
		}
		readFor(2*bound/3 + time.Second)
		check("a second read of 41s within the minute", 2, 1)
		readFor(bound/3 - time.Second)
		check("a read of 19s", 2, 1)
		time.Sleep(time.Minute)
		readFor(2*bound/3 + time.Second)
		check("a third read of 41s a minute on", 3, 2)
		if l := log.lines(msg)[1]; !strings.Contains(l, "occurrences=2") {
			t.Fatalf("the minute's line %q does not say it stands for two ticks' slow reads (one unlogged)", l)
		}
		if err := g.fault.Load(); err != nil {
			t.Fatalf("reads under the bound are a fault: %v", err)
		}
	})
}
