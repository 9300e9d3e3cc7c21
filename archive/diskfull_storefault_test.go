package archive

import (
	"context"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// TestDiskFullRestartResumes: the WAL write of a batch fails with ENOSPC.
// The writer stops with an error that says "disk full", names the data dir
// and what to do; nothing of the failed batch is published. Once space is
// freed (the fault is cleared), a restart on the same data dir opens, keeps
// every event that was durable before, continues the seqs after them, and
// accepts new writes.
func TestDiskFullRestartResumes(t *testing.T) {
	var full atomic.Bool
	fs := walFullFS(vfs.NewMem(), &full)
	s := openMem(t, fs)
	w := newWriter(t, s, WriterOptions{})
	for i := 0; i < 10; i++ {
		apply(t, w, &Unit{Events: []Event{realisticEvent(i)}})
	}
	full.Store(true)
	acks := NewAcks()
	_ = w.Submit(context.Background(), &Unit{Acks: acks, Events: []Event{realisticEvent(10)}})
	select {
	case <-w.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("writer did not stop on a full disk")
	}
	err := w.Err()
	for _, want := range []string{"disk full", "/data", "free space", "restart"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("writer error %q lacks %q", err, want)
		}
	}
	// Pebble reports the WAL failure through Fatalf(format, args), so the
	// errno survives as text only: errors.Is(err, syscall.ENOSPC) is false
	// here (it holds for a failure reported through the commit hook, see
	// write_storefault_test.go).
	if len(acks.Drain(nil)) != 0 || w.Live().Tip() != 10 {
		t.Fatalf("the failed batch was published (live tip %d)", w.Live().Tip())
	}
	func() {
		defer func() { recover() }()
		s.Close()
	}()

	// Space freed: restart on the same data dir.
	full.Store(false)
	s2, err := Open("/data", testOptions(fs))
	if err != nil {
		t.Fatalf("restart after freeing space: %v", err)
	}
	defer s2.Close()
	tip, err := s2.Tip()
	if err != nil || tip < 10 {
		t.Fatalf("tip after restart %d (%v): durable events lost", tip, err)
	}
	w2 := newWriter(t, s2, WriterOptions{})
	defer w2.Close()
	r := apply(t, w2, &Unit{Events: []Event{realisticEvent(11)}})
	if r.FirstSeq != tip+1 {
		t.Fatalf("seq after restart %d, want %d", r.FirstSeq, tip+1)
	}
	t.Logf("tip after restart %d", tip)
}

// walFullFS wraps fs so that, while full is set, every write and sync of a
// WAL file fails with ENOSPC: Pebble reports that through its Fatalf.
func walFullFS(fs vfs.FS, full *atomic.Bool) vfs.FS {
	return errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if full.Load() && (op == errorfs.OpFileWrite || op == errorfs.OpFileSync) && strings.HasSuffix(path, ".log") {
			return syscall.ENOSPC
		}
		return nil
	}))
}
