package archive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// attr is the value of a record's attribute key, "" when absent.
func attr(r slog.Record, key string) string {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// TestBackgroundErrorLogRateLimit: a continuous stream of background errors
// (Pebble retries a failed flush ~400 times a second) is counted one by one
// by kind, and logged at ERROR once per kind per minute on the store's clock,
// the next line saying how many occurrences it stands for.
func TestBackgroundErrorLogRateLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		log := &errorLog{}
		g := newDiskGuard("/data", slog.New(log), time.Now, 0, 0, nil)
		enospc := fmt.Errorf("flush: write 000123.sst: %w", syscall.ENOSPC)
		for range 1000 {
			g.backgroundError(enospc)
		}
		g.backgroundError(fmt.Errorf("open: %w", syscall.EMFILE))
		g.backgroundError(errors.New("pebble: corruption (" + syscall.EIO.Error() + ")")) // errno as text only
		g.backgroundError(errors.New("something else"))
		if log.count() != 4 {
			t.Fatalf("%d ERROR lines for 1003 errors of 4 kinds, want 4 (one per kind): %v", log.count(), log.errors)
		}
		for kind, want := range map[string]uint64{KindENOSPC: 1000, KindEMFILE: 1, KindEIO: 1, KindOther: 1} {
			if got := g.errs[kindIndex(kind)].Load(); got != want {
				t.Fatalf("%s errors counted %d, want %d", kind, got, want)
			}
		}
		time.Sleep(59 * time.Second)
		g.backgroundError(enospc)
		if log.count() != 4 {
			t.Fatalf("a second ERROR line within the minute")
		}
		time.Sleep(time.Second)
		g.backgroundError(enospc)
		if log.count() != 5 {
			t.Fatalf("%d ERROR lines a minute later, want 5", log.count())
		}
		r := log.recs[4]
		if attr(r, "kind") != KindENOSPC || attr(r, "occurrences") != "1001" {
			t.Fatalf("the minute's line: kind %q occurrences %q, want enospc and 1001", attr(r, "kind"), attr(r, "occurrences"))
		}
	})
}

func kindIndex(kind string) int {
	for i, k := range errorKinds {
		if k == kind {
			return i
		}
	}
	return -1
}

// sstFS wraps fs so that writes of sstables (flushes, compactions) fail
// with the error in fail while it is set, and block while hold is set.
func sstFS(fs vfs.FS, fail *atomic.Pointer[error], hold chan struct{}) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if op != errorfs.OpFileWrite && op != errorfs.OpFileSync && op != errorfs.OpCreate || !strings.HasSuffix(path, ".sst") {
			return nil
		}
		if hold != nil {
			<-hold
		}
		if p := fail.Load(); p != nil {
			return *p
		}
		return nil
	}))
}

// fillMemtables writes until the commit blocks (a write stall) or stop is
// closed; it returns when a write returns.
func fillMemtables(db *pebble.DB, stop <-chan struct{}) {
	val := make([]byte, 4<<10)
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		if err := db.Set([]byte(fmt.Sprintf("x/%09d", i)), val, pebble.NoSync); err != nil {
			return
		}
	}
}

func waitFault(t *testing.T, s *Store, within time.Duration) error {
	t.Helper()
	select {
	case <-s.Faulted():
		return s.Fault()
	case <-time.After(within):
		t.Fatalf("no disk fault within %v (background errors: enospc %d, other %d)", within,
			s.BackgroundErrors(KindENOSPC), s.BackgroundErrors(KindOther))
		return nil
	}
}

// TestFailedFlushesAreAFault: real Pebble on a filesystem whose sstable
// writes fail with ENOSPC. The listener Open installs counts the
// background errors as enospc, and MaxFailedFlushes consecutive failed
// flushes are a disk fault with the operator's message; the writer stuck
// behind them does not have to report anything itself.
func TestFailedFlushesAreAFault(t *testing.T) {
	var fail atomic.Pointer[error]
	log := &errorLog{}
	opts := testOptions(sstFS(vfs.NewMem(), &fail, nil))
	opts.Logger, opts.MaxFailedFlushes = slog.New(log), 20
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetRelay("relay.test", false); err != nil {
		t.Fatal(err)
	}
	enospc := error(syscall.ENOSPC)
	fail.Store(&enospc)
	if _, err := s.DB().AsyncFlush(); err != nil {
		t.Fatal(err)
	}
	err = waitFault(t, s, 20*time.Second)
	var fe *FatalError
	if !errors.As(err, &fe) || !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "disk full at /data: free space and restart") ||
		!strings.Contains(err.Error(), "20 consecutive memtable flushes failed") {
		t.Fatalf("fault %v, want a FatalError saying disk full at /data after 20 failed flushes", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewPebbleCollector(s))
	// Pebble reports a failed flush's end, which counts towards the fault,
	// before its background error: the 20th error may follow the fault.
	promtest.Eventually(t, 5*time.Second, "≥ 20 enospc background errors counted", func() bool {
		return promtest.Value(t, reg, "backstream_store_background_errors_total", map[string]string{"kind": KindENOSPC}) >= 20
	})
	if n := promtest.Value(t, reg, "backstream_store_disk_faults_total", map[string]string{"cause": FaultFailedFlushes}); n != 1 {
		t.Fatalf("failed_flushes faults %v, want 1", n)
	}
	if log.count() == 0 || log.count() > 3 { // the enospc line, the fault line, and maybe Pebble's own
		t.Fatalf("%d ERROR lines: %v", log.count(), log.errors)
	}
	t.Logf("%d enospc background errors, %d ERROR lines", s.BackgroundErrors(KindENOSPC), log.count())
	fail.Store(nil) // space freed: the flush goes through and Close can finish
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestWriteStallBound: a write stall that lasts MaxWriteStall is a disk
// fault, not before; the message names the cause — the disk full when the
// flushes behind the stall fail with ENOSPC, a stuck disk when they just
// never finish. A stall that ends in time is none.
func TestWriteStallBound(t *testing.T) {
	const bound = 300 * time.Millisecond
	for _, tc := range []struct {
		name  string
		full  bool
		wants []string
	}{
		{"enospc", true, []string{"disk full at /data: free space and restart", "pebble write stall"}},
		{"stuck", false, []string{"no error from the disk holding /data", "pebble write stall"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fail atomic.Pointer[error]
			hold := make(chan struct{})
			if tc.full {
				enospc := error(syscall.ENOSPC)
				fail.Store(&enospc)
				close(hold)
				hold = nil
			}
			opts := testOptions(sstFS(vfs.NewMem(), &fail, hold))
			opts.MemTableSize, opts.MaxWriteStall, opts.MaxFailedFlushes = 1<<20, bound, 1<<30
			stalls := make(chan time.Time, 1)
			s, err := Open("/data", opts)
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			wrote := make(chan struct{})
			go func() { defer close(wrote); fillMemtables(s.DB(), stop) }()
			// The stall begins once both memtables are full; the
			// guard's own record of it is the start of the bound.
			deadline := time.Now().Add(20 * time.Second)
			for {
				s.disk.mu.Lock()
				since := s.disk.stallSince
				s.disk.mu.Unlock()
				if !since.IsZero() {
					stalls <- since
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("no write stall")
				}
				time.Sleep(5 * time.Millisecond)
			}
			begun := <-stalls
			err = waitFault(t, s, 10*time.Second)
			if waited := time.Since(begun); waited < bound {
				t.Fatalf("fault %v after the stall began, before the bound %v", waited, bound)
			}
			for _, want := range tc.wants {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("fault %v lacks %q", err, want)
				}
			}
			// Unblock the disk: the stalled write returns and the store closes.
			fail.Store(nil)
			if hold != nil {
				close(hold)
			}
			close(stop)
			<-wrote
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestShortStallIsNoFault: a stall that ends within the bound is no fault.
func TestShortStallIsNoFault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newDiskGuard("/data", quietLogger, time.Now, time.Minute, 0, nil)
		g.stallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
		time.Sleep(59 * time.Second)
		g.stallEnd()
		g.stallBegin(pebble.WriteStallBeginInfo{Reason: "L0 file count limit exceeded"})
		time.Sleep(59 * time.Second)
		g.stallEnd()
		time.Sleep(time.Hour)
		if fe := g.fault.Load(); fe != nil {
			t.Fatalf("two stalls of 59 s were a fault: %v", fe)
		}
		g.stallBegin(pebble.WriteStallBeginInfo{Reason: "memtable count limit reached"})
		time.Sleep(time.Minute)
		synctest.Wait()
		if g.fault.Load() == nil {
			t.Fatal("a stall of a minute was no fault")
		}
		g.close()
	})
}

// TestOpenOnFullDisk: Open on a volume that cannot take the WAL replay's
// flush (or its new WAL) says "disk full at <dir>: free space and restart",
// not Pebble's raw error; once space is back it opens with every event.
func TestOpenOnFullDisk(t *testing.T) {
	mem := vfs.NewMem()
	var full atomic.Bool
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if full.Load() && (op == errorfs.OpFileWrite || op == errorfs.OpFileSync || op == errorfs.OpCreate) && !strings.HasSuffix(path, "LOCK") {
			return syscall.ENOSPC
		}
		return nil
	}))
	s := openMem(t, fs)
	w := newWriter(t, s, WriterOptions{})
	for i := 0; i < 10; i++ {
		apply(t, w, &Unit{Events: []Event{realisticEvent(i)}})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Close does not flush the memtable: the next Open replays the WAL.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	_, err := Open("/data", testOptions(fs))
	if err == nil || !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "disk full at /data: free space and restart") {
		t.Fatalf("Open on a full disk: %v, want \"disk full at /data: free space and restart\"", err)
	}
	t.Logf("Open on a full disk: %v", err)
	full.Store(false)
	s2 := openMem(t, fs)
	defer s2.Close()
	if tip, err := s2.Tip(); err != nil || tip != 10 {
		t.Fatalf("tip after space came back %d (%v), want 10", tip, err)
	}
}

// TestFreeSpaceFloor: Open below the floor is refused with the message;
// CheckSpace above it is nil, below it records a min_free disk fault that
// says what is free and the floor; a negative MinFree turns it off.
func TestFreeSpaceFloor(t *testing.T) {
	var free atomic.Uint64
	free.Store(10 << 30)
	opts := testOptions(vfs.NewMem())
	opts.Space = func(string) (diskspace.Space, error) {
		return diskspace.Space{Free: free.Load(), Total: 100 << 30}, nil
	}
	opts.MinFree = 2 << 30
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CheckSpace(); err != nil {
		t.Fatalf("10 GiB free above a 2 GiB floor: %v", err)
	}
	free.Store(1 << 30)
	err = s.CheckSpace()
	for _, want := range []string{"disk full at /data: free space and restart", "1073741824 bytes free", "floor of 2147483648 bytes"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("CheckSpace below the floor: %v, lacks %q", err, want)
		}
	}
	select {
	case <-s.Faulted():
	default:
		t.Fatal("below the floor is no fault")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewPebbleCollector(s))
	if n := promtest.Value(t, reg, "backstream_store_disk_faults_total", map[string]string{"cause": FaultMinFree}); n != 1 {
		t.Fatalf("min_free faults %v, want 1", n)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("/data", opts); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Open below the floor: %v, want ErrDiskFull", err)
	}
	// The default floor: the smaller of 1 GiB and 2 % (2 GiB here).
	opts.MinFree = 0
	free.Store(1<<30 - 1)
	if _, err := Open("/data", opts); !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "floor of 1073741824 bytes") {
		t.Fatalf("Open at the default floor: %v", err)
	}
	opts.MinFree = -1
	s, err = Open("/data", opts)
	if err != nil {
		t.Fatalf("Open with the floor off: %v", err)
	}
	if err := s.CheckSpace(); err != nil {
		t.Fatalf("CheckSpace with the floor off: %v", err)
	}
	s.Close()
}

// TestFreeSpaceFloorAboveTheVolume: a --min-free floor at or above the
// size of the volume itself (2GiB on a 64 MiB volume, empty) can never be
// met, whatever is freed: the start is refused as below the floor
// (ErrDiskFull, the same exit), saying to lower --min-free, not "free
// space and restart".
func TestFreeSpaceFloorAboveTheVolume(t *testing.T) {
	opts := testOptions(vfs.NewMem())
	opts.Space = func(string) (diskspace.Space, error) {
		return diskspace.Space{Free: 64 << 20, Total: 64 << 20}, nil
	}
	opts.MinFree = 2 << 30
	_, err := Open("/data", opts)
	if !errors.Is(err, ErrDiskFull) || !strings.Contains(err.Error(), "lower --min-free") || strings.Contains(err.Error(), "free space and restart") {
		t.Fatalf("Open with a floor of 2 GiB on an empty 64 MiB volume: %v; want ErrDiskFull saying to lower --min-free", err)
	}
}

// slowLines signals the store's "disk slow" WARN line, and notes whether
// the store's fault line ("store disk fault") was logged before it.
type slowLines struct {
	once sync.Once
	seen chan struct{}

	mu         sync.Mutex
	faulted    bool // the fault line was logged
	afterFault bool // the first disk slow line came after the fault line
}

func (l *slowLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *slowLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *slowLines) WithGroup(string) slog.Handler            { return l }
func (l *slowLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case strings.HasPrefix(r.Message, "store disk fault"):
		l.faulted = true
	case strings.HasPrefix(r.Message, "store disk slow"):
		l.once.Do(func() {
			l.afterFault = l.faulted
			close(l.seen)
		})
	}
	return nil
}

// TestHungSyncIsAFault: a commit whose WAL sync never returns, and never
// fails (a stuck device), is no Pebble write stall, yet no write goes
// through: Pebble's disk-health checker reports the outstanding sync (the
// "disk slow" line), and once it has lasted MaxWriteStall the store
// records a write-stall fault, which stops the process.
func TestHungSyncIsAFault(t *testing.T) {
	const bound = 200 * time.Millisecond
	g := &gateFS{FS: vfs.NewMem()}
	lines := &slowLines{seen: make(chan struct{})}
	opts := testOptions(g)
	opts.MaxWriteStall = bound
	opts.Logger = slog.New(lines)
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, s, WriterOptions{})
	apply(t, w, &Unit{Events: []Event{commitEv(didN(1), "3k1", KindCreate, SourceLive, "a")}})
	g.arm()
	if err := w.Submit(context.Background(), &Unit{Events: []Event{commitEv(didN(1), "3k2", KindCreate, SourceLive, "b")}, Acks: NewAcks()}); err != nil {
		t.Fatal(err)
	}
	<-g.held // the batch's sync hangs
	defer func() {
		g.release()
		_ = w.Close()
		_ = s.Close()
	}()
	// The checker looks every 2 s; a minute only turns a miss into a failure.
	select {
	case <-s.Faulted():
	case <-time.After(time.Minute):
		t.Fatalf("a WAL sync hung for a minute (MaxWriteStall %v) and the store records no fault", bound)
	}
	if err := s.Fault(); err == nil || !strings.Contains(err.Error(), "has not returned") {
		t.Fatalf("fault %v, want the stuck operation named", err)
	}
	// The line is logged before the fault is recorded: the fault stops the
	// process, and the line naming the stuck operation must not be left to
	// what runs after it.
	select {
	case <-lines.seen:
	default:
		t.Fatal("no disk slow line before the fault")
	}
	lines.mu.Lock()
	defer lines.mu.Unlock()
	if lines.afterFault {
		t.Fatal("the disk slow line was logged after the fault line, not before it")
	}
}
