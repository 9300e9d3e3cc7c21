package archive

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// slowVolume is a backup volume that is healthy but slow, as a disk (or a
// network mount) seen through the page cache: a write under its prefix
// lands at once, and a sync takes perMiB for each MiB written to the file
// since the last one and not yet flushed; a SyncTo flushes up to the
// length it names. With stopAt > 0 it stops answering instead: a write
// that would take a file past stopAt bytes blocks until stop is closed.
type slowVolume struct {
	vfs.FS
	under  string
	perMiB time.Duration
	stopAt int64
	stop   chan struct{}

	mu          sync.Mutex
	longestSync time.Duration // the longest sync call
	largest     int64         // the largest file written
}

func (v *slowVolume) Create(name string) (vfs.File, error) {
	f, err := v.FS.Create(name)
	if err != nil || !strings.HasPrefix(name, v.under) {
		return f, err
	}
	return &slowFile{File: f, v: v}, nil
}

type slowFile struct {
	vfs.File
	v                *slowVolume
	written, flushed int64
}

func (f *slowFile) Write(p []byte) (int, error) {
	if f.v.stopAt > 0 && f.written+int64(len(p)) > f.v.stopAt {
		<-f.v.stop
	}
	n, err := f.File.Write(p)
	f.written += int64(n)
	f.v.mu.Lock()
	f.v.largest = max(f.v.largest, f.written)
	f.v.mu.Unlock()
	return n, err
}

// flush is the device writing the file's bytes up to to: perMiB a MiB.
func (f *slowFile) flush(to int64) {
	to = min(to, f.written)
	if to <= f.flushed {
		return
	}
	d := time.Duration(float64(f.v.perMiB) * float64(to-f.flushed) / (1 << 20))
	time.Sleep(d) // the device at work, not a wait for a condition
	f.flushed = to
	f.v.mu.Lock()
	f.v.longestSync = max(f.v.longestSync, d)
	f.v.mu.Unlock()
}

func (f *slowFile) Sync() error     { f.flush(f.written); return f.File.Sync() }
func (f *slowFile) SyncData() error { f.flush(f.written); return f.File.SyncData() }
func (f *slowFile) SyncTo(length int64) (bool, error) {
	f.flush(length)
	return f.File.SyncTo(length)
}

// TestCheckpointSlowDestination: the stall bound of a checkpoint's
// destination is a bound on one call with no progress, not on the copy's
// total. A backup volume that writes steadily at 1 MiB per eighth of the
// bound (another filesystem: every file copied) takes the checkpoint of a
// store holding a file of over 8 MiB, longer than the bound in total, and
// the checkpoint is written whole, no call of it out for the bound; the
// same volume once it stops answering part way through a file ends the
// checkpoint with ErrCheckpointStuck naming the write.
func TestCheckpointSlowDestination(t *testing.T) {
	// A bound that a loaded machine (the race detector, other tests)
	// leaves room under for a MiB's write and flush.
	const bound = time.Second
	for _, stops := range []bool{false, true} {
		name := "steady"
		if stops {
			name = "stops"
		}
		t.Run(name, func(t *testing.T) {
			mem := vfs.NewMem()
			v := &slowVolume{FS: mem, under: "/backup/", perMiB: bound / 8, stop: make(chan struct{})}
			if stops {
				v.stopAt = 2 << 20
			}
			defer close(v.stop)
			opts := testOptions(elsewhere(v))
			opts.MaxWriteStall, opts.MemTableSize = bound, 64<<20
			s, err := Open("/data", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			w := newWriter(t, s, WriterOptions{})
			defer w.Close()
			// 12 MiB of records that do not compress, flushed to one table.
			rng := rand.New(rand.NewPCG(1, 2))
			for i := 1; i <= 12; i++ {
				u := fillUnit(didN(i), i, 16)
				for j := range u.Events {
					rec := make([]byte, 64<<10)
					for k := range rec {
						rec[k] = byte(rng.Uint32())
					}
					u.Events[j].Record = rec
				}
				apply(t, w, u)
			}
			if err := s.DB().Flush(); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err = s.Checkpoint("/backup/b1")
			took := time.Since(start)
			v.mu.Lock()
			largest, longest := v.largest, v.longestSync
			v.mu.Unlock()
			t.Logf("checkpoint: %v in %v; largest file copied %d bytes, longest sync %v", err, took, largest, longest)
			if stops {
				if !errors.Is(err, ErrCheckpointStuck) || !strings.Contains(err.Error(), "a write of /backup/b1/store.partial/") {
					t.Fatalf("checkpoint to a slow volume that stopped answering: %v; want ErrCheckpointStuck naming the write", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("checkpoint to a slow but steady volume (1 MiB per %v, bound %v; largest file %d bytes): %v; want it written",
					v.perMiB, bound, largest, err)
			}
			if largest < 8<<20 || took < bound {
				t.Fatalf("the test copied at most %d bytes a file in %v: want a file of 8 MiB or more, copied over longer than the bound %v", largest, took, bound)
			}
			if f := s.Fault(); f != nil {
				t.Fatalf("the live store's fault: %v", f)
			}
			ck, err := Open("/backup/b1", Options{FS: mem, Logger: quietLogger, CacheSize: 8 << 20, ReadOnly: true})
			if err != nil {
				t.Fatalf("the checkpoint does not open: %v", err)
			}
			defer ck.Close()
			if tip := sameEvents(t, ck, s); tip == 0 {
				t.Fatalf("the checkpoint holds no event")
			}
		})
	}
}
