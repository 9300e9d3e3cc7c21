package storefault

import (
	"errors"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// TestCommitFaultNthAndSticky: only batches holding a key with the prefix
// count; the n-th fails with the fault's error, later ones only when
// Sticky; the counters say what fired.
func TestCommitFaultNthAndSticky(t *testing.T) {
	match, other := [][]byte{[]byte("x"), []byte("ev/1")}, [][]byte{[]byte("repo/a")}
	for _, sticky := range []bool{false, true} {
		f := FailNthCommit("ev/", 2).WithError(syscall.ENOSPC)
		if sticky {
			f.Sticky()
		}
		var failed []int
		for i, keys := range [][][]byte{match, other, match, match, other} {
			if err := f.Check("op", keys); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatalf("batch %d: %v, want ENOSPC", i, err)
				}
				failed = append(failed, i)
			}
		}
		want := []int{2}
		if sticky {
			want = []int{2, 3}
		}
		if len(failed) != len(want) || failed[0] != want[0] || f.Seen() != 3 || f.Fired() != len(want) || len(f.FiredOps()) != len(want) {
			t.Fatalf("sticky %v: failed %v (seen %d, fired %d), want %v", sticky, failed, f.Seen(), f.Fired(), want)
		}
	}
}

// TestReadFaultFailNth: only the n-th sstable data read after arming
// fails; writes and other files are never touched nor counted.
func TestReadFaultFailNth(t *testing.T) {
	f := NewReadFault()
	if f.MaybeError(errorfs.OpFileReadAt, "/d/000001.sst") != nil {
		t.Fatal("a disarmed injector failed a read")
	}
	f.FailNth(2)
	var errs []error
	for _, c := range []struct {
		op   errorfs.Op
		path string
	}{
		{errorfs.OpFileReadAt, "/d/000001.sst"},
		{errorfs.OpFileRead, "/d/MANIFEST-000001"},
		{errorfs.OpFileWrite, "/d/000002.sst"},
		{errorfs.OpFileRead, "/d/000002.sst"},
		{errorfs.OpFileReadAt, "/d/000003.sst"},
	} {
		errs = append(errs, f.MaybeError(c.op, c.path))
	}
	if errs[0] != nil || errs[1] != nil || errs[2] != nil || !errors.Is(errs[3], ErrInjected) || errs[4] != nil ||
		f.Fired() != 1 || f.Reads() != 3 {
		t.Fatalf("FailNth(2): %v (fired %d, reads %d)", errs, f.Fired(), f.Reads())
	}
}
