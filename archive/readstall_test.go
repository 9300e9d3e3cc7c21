package archive

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/promtest"
)

// readHold is a filesystem whose sstable data reads (Read, ReadAt) block,
// while armed, until released: a disk that stops answering reads without
// an error (a dying disk, a hung network volume).
type readHold struct {
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed when a read is being held
	release chan struct{} // closed to let held reads through
}

func newReadHold() *readHold { return &readHold{} }

func (h *readHold) wrap(fs vfs.FS) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if (op != errorfs.OpFileRead && op != errorfs.OpFileReadAt) || !strings.HasSuffix(path, ".sst") {
			return nil
		}
		h.wait()
		return nil
	}))
}

// wait holds the caller, while h is armed, until released.
func (h *readHold) wait() {
	h.mu.Lock()
	armed, held, release := h.armed, h.held, h.release
	if armed {
		select {
		case <-held:
		default:
			close(held)
		}
	}
	h.mu.Unlock()
	if armed {
		<-release
	}
}

// arm holds every sstable read from now on; held is closed by the first.
func (h *readHold) arm() (held <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.armed, h.held, h.release = true, make(chan struct{}), make(chan struct{})
	return h.held
}

// unhold lets every held read through and holds no more (idempotent).
func (h *readHold) unhold() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.armed {
		h.armed = false
		close(h.release)
	}
}

// TestStuckReadIsAFault: a point read of a key in an sstable, with nothing
// in the block cache, whose read of the table never returns and never
// fails (a stuck device) leaves the reader blocked for good, and no write
// stalls: once the read has been outstanding for MaxWriteStall the store
// records a disk fault naming the table (read_stall), which fails the
// probes and stops the process.
func TestStuckReadIsAFault(t *testing.T) {
	const bound = 300 * time.Millisecond
	mem := vfs.NewMem()
	buildFaultStore(t, mem)
	h := newReadHold()
	defer h.unhold()
	opts := faultOptions(h.wrap(mem))
	opts.MaxWriteStall = bound
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	held := h.arm()
	type result struct {
		st  RepoState
		err error
	}
	read := make(chan result, 1)
	go func() {
		st, err := s.RepoState(faultDID)
		read <- result{st, err}
	}()
	select {
	case <-held:
	case r := <-read:
		t.Fatalf("RepoState returned %+v, %v without reading an sstable", r.st, r.err)
	}
	// The read timer looks every third of the bound; 30 s only turns a
	// miss into a failure.
	select {
	case <-s.Faulted():
	case <-time.After(30 * time.Second):
		t.Fatalf("an sstable read held for 30s (MaxWriteStall %v) and the store records no fault", bound)
	}
	err = s.Fault()
	t.Logf("fault: %v", err)
	for _, want := range []string{"a read of /data/store/", ".sst has not returned for over", "no error from the disk holding /data"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("fault %v lacks %q", err, want)
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewPebbleCollector(s))
	if n := promtest.Value(t, reg, "backstream_store_disk_faults_total", map[string]string{"cause": "read_stall"}); n != 1 {
		t.Fatalf("read_stall faults %v, want 1", n)
	}
	// Out for the bound, it was first out for two thirds of it: slow.
	if n := promtest.Value(t, reg, "backstream_store_slow_reads_total", nil); n != 1 {
		t.Fatalf("slow reads %v, want the stuck read counted once", n)
	}
	// The disk answers again: the read completes and the store closes.
	h.unhold()
	if r := <-read; r.err != nil || r.st.Status != StatusComplete {
		t.Fatalf("RepoState after the release: %+v, %v", r.st, r.err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReadStallBound: on the fake clock, a read that is merely slow (held
// for just under MaxWriteStall, while the read timer ticks over it) records
// nothing, however long the store runs on; a read that never returns is a
// read-stall fault once it has lasted the bound, at most one tick (a third
// of it) later, naming the file.
func TestReadStallBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const bound = time.Minute
		g := newDiskGuard("/data", quietLogger, time.Now, bound, 0, nil)
		defer g.close()
		mem := vfs.NewMem()
		if w, err := mem.Create("/000007.sst"); err != nil {
			t.Fatal(err)
		} else if _, err := w.Write([]byte("table")); err != nil || w.Close() != nil {
			t.Fatal(err)
		}
		h := newReadHold()
		defer h.unhold()
		fs := g.timeReads(h.wrap(mem))
		f, err := fs.Open("/000007.sst")
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		read := func() <-chan error {
			done := make(chan error, 1)
			go func() {
				_, err := f.ReadAt(make([]byte, 5), 0)
				done <- err
			}()
			return done
		}

		done := checkStallBound(t, g, h, bound, "read", read)
		err = g.fault.Load()
		if err == nil || !strings.Contains(err.Error(), "a read of /000007.sst has not returned for over 1m") {
			t.Fatalf("fault %v, want the stuck read named", err)
		}
		if n := g.faults[1].Load(); faultCauses[1] != FaultReadStall || n != 1 {
			t.Fatalf("%s faults %d, want 1", faultCauses[1], n)
		}
		h.unhold()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	})
}

// TestReadOnlyStuckReadIsAFault: a store opened read-only (`backstream
// status`, a checkpoint read back, the check before a command opens a
// store read-write) over a disk that stops answering its table reads
// does not block for ever unseen: once the read has been out for
// MaxWriteStall the store records the read-stall fault and hands it to
// OnFault, while its open is still blocked in that read.
func TestReadOnlyStuckReadIsAFault(t *testing.T) {
	const bound = 300 * time.Millisecond
	mem := vfs.NewMem()
	buildFaultStore(t, mem)
	h := newReadHold()
	defer h.unhold()
	opts := faultOptions(h.wrap(mem))
	opts.ReadOnly = true
	opts.MaxWriteStall = bound
	faulted := make(chan error, 1)
	opts.OnFault = func(err error) { faulted <- err }
	held := h.arm()
	opened := make(chan error, 1)
	go func() {
		s, err := Open("/data", opts)
		if err == nil {
			_, err = s.RepoState(faultDID)
			err = errors.Join(err, s.Close())
		}
		opened <- err
	}()
	select {
	case <-held:
	case err := <-opened:
		t.Fatalf("a read-only open and a read returned %v without reading an sstable", err)
	}
	select {
	case err := <-faulted:
		if want := ".sst has not returned for over"; !strings.Contains(err.Error(), want) {
			t.Fatalf("fault %v, want %q", err, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a read-only store's sstable read held for 30s (MaxWriteStall %v) and the store records no fault", bound)
	}
	h.unhold()
	if err := <-opened; err != nil {
		t.Fatalf("the read-only open after the disk answers again: %v", err)
	}
}

// checkStallBound runs, on the fake clock of a synctest bubble, the two
// calls start begins through h: one held just under bound is no fault of
// g; one held for good is a fault (g.failed) within [bound, bound + one
// tick of the read timer] of its start. It returns the held call's result,
// which comes once the test lets it go (h.unhold).
func checkStallBound(t *testing.T, g *diskGuard, h *readHold, bound time.Duration, what string, start func() <-chan error) <-chan error {
	t.Helper()
	held := h.arm()
	done := start()
	<-held
	time.Sleep(bound - time.Second)
	h.unhold()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * bound)
	if err := g.fault.Load(); err != nil {
		t.Fatalf("a %s that took %v (bound %v) is a fault: %v", what, bound-time.Second, bound, err)
	}

	held = h.arm()
	done = start()
	<-held
	begun := time.Now()
	select {
	case <-g.failed:
	case <-time.After(10 * bound):
		t.Fatalf("a %s held for %v (MaxWriteStall %v) and the store records no fault", what, 10*bound, bound)
	}
	if waited := time.Since(begun); waited < bound || waited > bound+readTick(bound) {
		t.Fatalf("a stuck %s was a fault %v after it began, want within [%v, %v]", what, waited, bound, bound+readTick(bound))
	}
	return done
}
