package archive

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// BenchmarkReadGuard is the read guard's cost per call (readstall.go):
// each call Pebble makes to read the store, on a table of 4 KiB, through
// the filesystem as it is ("plain") and through the guard's counting
// ("guarded"), on the OS's filesystem (the page cache holds the file:
// the cost beside a real system call) and on an in-memory one (the
// counting's cost alone). Run it alone: the OS rows vary by tens of
// percent between runs on a shared machine.
func BenchmarkReadGuard(b *testing.B) {
	for _, base := range []struct {
		name string
		fs   vfs.FS
		dir  string
	}{{"os", vfs.Default, b.TempDir()}, {"mem", vfs.NewMem(), "/"}} {
		path := filepath.Join(base.dir, "000007.sst")
		w, err := base.fs.Create(path)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := w.Write(make([]byte, 4<<10)); err != nil || w.Close() != nil {
			b.Fatal(err)
		}
		g := newDiskGuard(base.dir, quietLogger, time.Now, time.Minute, 0, nil)
		defer g.close()
		for _, fs := range []struct {
			name string
			fs   vfs.FS
		}{{"plain", base.fs}, {"guarded", g.timeReads(base.fs)}} {
			f, err := fs.fs.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := make([]byte, 4<<10)
			for _, op := range []struct {
				name string
				call func() error
			}{
				{"ReadAt", func() error { _, err := f.ReadAt(buf, 0); return err }},
				{"File.Stat", func() error { _, err := f.Stat(); return err }},
				// Pebble ignores Prefetch's error (readahead(2) on Linux
				// fails with errno 0 through Pebble v1's vfs).
				{"Prefetch", func() error { _ = f.Prefetch(0, 4<<10); return nil }},
				{"Stat", func() error { _, err := fs.fs.Stat(path); return err }},
				{"Open+Close", func() error {
					f, err := fs.fs.Open(path)
					if err != nil {
						return err
					}
					return f.Close()
				}},
			} {
				b.Run(base.name+"/"+fs.name+"/"+op.name, func(b *testing.B) {
					for b.Loop() {
						if err := op.call(); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}
