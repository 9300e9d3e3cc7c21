//go:build linux

package archive

import (
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/backstream/backstream/internal/citest"
	"github.com/cockroachdb/pebble/vfs"
)

// TestOpenScratchVolume: a volume of its own mounted at <data-dir>/scratch
// (the downloads' budget is sized from its free space) is emptied at
// Open, not removed: the mount point stays, and the store opens.
func TestOpenScratchVolume(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	scratch := filepath.Join(data, ScratchDir)
	citest.Tmpfs(t, scratch, 1<<20, "")
	for _, name := range []string{"repo-1.car", "sub/dir/partial"} {
		path := filepath.Join(scratch, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("leftover"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := testOptions(vfs.Default)
	opts.MinFree = -1
	s, err := Open(data, opts)
	if err != nil {
		t.Fatalf("open with a volume mounted on its scratch dir: %v", err)
	}
	defer s.Close()
	if left, err := os.ReadDir(scratch); err != nil || len(left) != 0 {
		t.Fatalf("after open the scratch volume holds %v (%v), want it emptied", left, err)
	}
}

// TestCheckpointScratchVolume: an operator may mount a volume of its own
// at <data-dir>/scratch (the downloads' budget is sized from its free
// space). A checkpoint of a store larger than that volume still succeeds,
// its tables hard-linked from the store (the staged copy is on the
// store's filesystem, not on scratch/), and leaves the scratch volume
// empty.
func TestCheckpointScratchVolume(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	const scratchSize = 1 << 20
	citest.Tmpfs(t, filepath.Join(data, ScratchDir), scratchSize, "")
	opts := testOptions(vfs.Default)
	opts.MinFree = -1
	s, err := Open(data, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	rng := rand.New(rand.NewSource(1))
	for i := 1; i <= 40; i++ { // 40 units of 25 incompressible 4 KiB records: 4 MiB
		u := fillUnit(didN(i), i, 25)
		for j := range u.Events {
			u.Events[j].Record = make([]byte, 4<<10)
			rng.Read(u.Events[j].Record)
		}
		apply(t, w, u)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if n := s.DB().Metrics().DiskSpaceUsage(); n < 2*scratchSize {
		t.Fatalf("the store takes %d bytes, want more than twice the scratch volume's %d", n, scratchSize)
	}
	dest := filepath.Join(t.TempDir(), "b1")
	if err := s.Checkpoint(dest); err != nil {
		t.Fatalf("checkpoint of a store larger than the scratch volume: %v", err)
	}
	// Each table of the checkpoint is the live store's own file, linked.
	names, err := os.ReadDir(filepath.Join(dest, StoreDir))
	if err != nil {
		t.Fatal(err)
	}
	var linked int
	for _, e := range names {
		if !strings.HasSuffix(e.Name(), ".sst") {
			continue
		}
		a, err := os.Stat(filepath.Join(dest, StoreDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.Stat(filepath.Join(data, StoreDir, e.Name()))
		if err != nil {
			t.Fatalf("the checkpoint's table %s is not in the live store: %v", e.Name(), err)
		}
		if !os.SameFile(a, b) {
			t.Fatalf("the checkpoint's table %s was copied, not hard-linked from the store", e.Name())
		}
		linked++
	}
	if linked == 0 {
		t.Fatalf("the checkpoint holds no table (%v)", names)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Join(data, ScratchDir), &st); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(filepath.Join(data, ScratchDir)); len(left) != 0 || st.Bfree != st.Blocks {
		t.Fatalf("after the checkpoint the scratch volume holds %v, %d of %d blocks used", left, st.Blocks-st.Bfree, st.Blocks)
	}
	ro := testOptions(vfs.Default)
	ro.ReadOnly = true
	ck, err := Open(dest, ro)
	if err != nil {
		t.Fatalf("open the checkpoint: %v", err)
	}
	defer ck.Close()
	if tip := sameEvents(t, ck, s); tip != 1000 {
		t.Fatalf("checkpoint tip %d, want 1000", tip)
	}
}
