//go:build linux

package archive

import (
	"os"
	"path/filepath"
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
