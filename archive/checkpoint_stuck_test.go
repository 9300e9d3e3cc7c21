package archive

import (
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/internal/storefault"
)

// TestCheckpointStuckDestination: a checkpoint whose destination volume
// stops answering (with no error and no end) in its stat, in the
// directory made for it, or in a write of a copied file (another
// filesystem: the rename out of the staging dir fails with EXDEV) ends within
// the bound with ErrCheckpointStuck naming the call, and the live store
// records no fault and goes on taking writes; every checkpoint is refused
// (ErrCheckpointStuck) while the call is out; once it returns, the next
// checkpoint is whole and the abandoned destination holds no store.
func TestCheckpointStuckDestination(t *testing.T) {
	const bound = 200 * time.Millisecond
	for _, tc := range []struct {
		name  string
		match func(op errorfs.Op, path string) bool
		want  string
	}{
		{"stat", func(op errorfs.Op, path string) bool { return op == errorfs.OpStat && path == "/backup/b1" }, "a stat of /backup/b1"},
		{"mkdir", func(op errorfs.Op, path string) bool {
			return op == errorfs.OpMkdirAll && strings.HasPrefix(path, "/backup/b1")
		}, "making /backup/b1"},
		{"copied-write", func(op errorfs.Op, path string) bool {
			return op == errorfs.OpFileWrite && strings.HasPrefix(path, "/backup/b1/")
		}, "a write of /backup/b1/store.partial/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := vfs.NewMem()
			stuck := storefault.Hold(elsewhere(mem), tc.match)
			defer stuck.Release()
			s, w := storeOver(t, stuck, bound)
			for i := 1; i <= 5; i++ {
				apply(t, w, fillUnit(didN(i), i, 5))
			}
			done := make(chan error, 1)
			go func() { done <- s.Checkpoint("/backup/b1") }()
			select {
			case err := <-done:
				if !errors.Is(err, ErrCheckpointStuck) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("checkpoint to a destination that stops answering: %v; want ErrCheckpointStuck naming %q", err, tc.want)
				}
				t.Logf("checkpoint: %v", err)
			case <-time.After(30 * time.Second):
				fault := s.Fault()
				stuck.Release() // let it end before the store closes
				<-done
				t.Fatalf("checkpoint still blocked 30 s into a destination that stopped answering (MaxWriteStall %v, %d calls held); the live store's fault: %v",
					bound, stuck.Holds(), fault)
			}
			if f := s.Fault(); f != nil {
				t.Fatalf("a stuck backup volume is a fault of the live store: %v", f)
			}
			apply(t, w, fillUnit(didN(6), 6, 5)) // the live store goes on
			if err := s.Checkpoint("/backup/b2"); !errors.Is(err, ErrCheckpointStuck) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkpoint while the last one's call is out: %v; want it refused naming %q", err, tc.want)
			}
			if call, _ := s.CheckpointStuck(); !strings.Contains(call, strings.TrimSuffix(tc.want, "/")) {
				t.Fatalf("CheckpointStuck = %q, want the call %q", call, tc.want)
			}
			stuck.Release()
			waitUnstuck(t, s)
			if _, err := mem.Stat("/backup/b1/" + StoreDir); err == nil {
				t.Fatalf("the abandoned checkpoint completed into /backup/b1 after the request gave up on it")
			}
			if err := s.Checkpoint("/backup/b3"); err != nil {
				t.Fatalf("checkpoint once the volume answers again: %v", err)
			}
			ro := testOptions(mem)
			ro.ReadOnly = true
			ck, err := Open("/backup/b3", ro)
			if err != nil {
				t.Fatalf("checkpoint after the stuck one does not open: %v", err)
			}
			defer ck.Close()
			if tip, err := ck.Tip(); err != nil || tip != 30 {
				t.Fatalf("checkpoint tip %d (%v), want 30", tip, err)
			}
		})
	}
}

// storeOver opens a store at /data over fs with the stall bound, and a
// writer on it; both are closed when the test ends (after its own
// deferred calls: a held call is released first).
func storeOver(t *testing.T, fs vfs.FS, bound time.Duration) (*Store, *Writer) {
	t.Helper()
	opts := testOptions(fs)
	opts.MaxWriteStall = bound
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w := newWriter(t, s, WriterOptions{})
	t.Cleanup(func() { w.Close() })
	return s, w
}

// waitUnstuck waits, once the held call is released, for it to return and
// for the checkpoint work that gave up on it to end.
func waitUnstuck(t *testing.T, s *Store) {
	t.Helper()
	promtest.Eventually(t, 10*time.Second, "the abandoned checkpoint's work to end", func() bool {
		call, _ := s.CheckpointStuck()
		return call == ""
	})
}

// elsewhere is fs as seen when checkpoints go to another filesystem than
// the store's: the rename of a staged checkpoint out of the staging dir
// fails with EXDEV, as across mounts, so it is copied.
func elsewhere(fs vfs.FS) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if rest, ok := strings.CutPrefix(path, "/data/"+StoreDir+"/"+checkpointStaging+"/"); ok && op == errorfs.OpRename && !strings.Contains(rest, "/") {
			return &os.LinkError{Op: "rename", Old: path, Err: syscall.EXDEV}
		}
		return nil
	}))
}

// TestCheckpointStuckWriteClosesItsFile: a checkpoint that gave up on a
// write of a copied file closes that file once the write returns: the
// abandoned work starts no further call on the destination, but a close
// of what it opened is tidying, not a call it may skip (else every stuck
// checkpoint leaks a file handle on the backup volume for the process's
// life).
func TestCheckpointStuckWriteClosesItsFile(t *testing.T) {
	const bound = 200 * time.Millisecond
	mem := vfs.NewMem()
	files := &openFiles{FS: mem, under: "/backup/"}
	stuck := storefault.Hold(elsewhere(files), func(op errorfs.Op, path string) bool {
		return op == errorfs.OpFileWrite && strings.HasPrefix(path, "/backup/b1/")
	})
	defer stuck.Release()
	s, w := storeOver(t, stuck, bound)
	apply(t, w, fillUnit(didN(1), 1, 5))
	if err := s.Checkpoint("/backup/b1"); !errors.Is(err, ErrCheckpointStuck) {
		t.Fatalf("checkpoint to a destination whose write is held: %v; want ErrCheckpointStuck", err)
	}
	stuck.Release()
	waitUnstuck(t, s)
	if open := files.open(); len(open) > 0 {
		t.Fatalf("the abandoned checkpoint's work ended with files on the destination still open: %q", open)
	}
}

// openFiles is fs counting the files created under a path prefix and not
// closed yet.
type openFiles struct {
	vfs.FS
	under string
	mu    sync.Mutex
	files map[string]int
}

func (o *openFiles) Create(name string) (vfs.File, error) {
	f, err := o.FS.Create(name)
	if err != nil || !strings.HasPrefix(name, o.under) {
		return f, err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.files == nil {
		o.files = make(map[string]int)
	}
	o.files[name]++
	return &countedFile{File: f, name: name, of: o}, nil
}

func (o *openFiles) open() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var names []string
	for n, c := range o.files {
		if c > 0 {
			names = append(names, n)
		}
	}
	return names
}

type countedFile struct {
	vfs.File
	name string
	of   *openFiles
}

func (f *countedFile) Close() error {
	f.of.mu.Lock()
	f.of.files[f.name]--
	f.of.mu.Unlock()
	return f.File.Close()
}
