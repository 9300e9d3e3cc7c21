//go:build linux

package upstream

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/backstream/backstream/internal/citest"
)

// TestGetRepoScratchENOSPC: a scratch volume with free bytes but no free
// inode (the kernel answers ENOSPC while statfs shows space, so the floor
// lets the spill start): the download fails local, never permanent, and
// holds nothing; a retry meets the same and still fills nothing.
func TestGetRepoScratchENOSPC(t *testing.T) {
	vol := t.TempDir()
	citest.Tmpfs(t, vol, 8<<20, "nr_inodes=1")
	pds := newServer(t, endlessBody)
	c, _ := testClient(t, pds.URL, func(o *Options) {
		o.ScratchDir = vol
		o.MinFree = 1
	})
	for i := range 2 {
		_, err := c.GetRepo(context.Background(), testDID)
		if Classify(err) != ClassLocal || !errors.Is(err, ErrLocal) || !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("download %d: %v (class %v), want local with ENOSPC", i, err, Classify(err))
		}
		assertScratchEmpty(t, vol)
		if c.ScratchHeld() != 0 {
			t.Fatalf("download %d: %d bytes held", i, c.ScratchHeld())
		}
	}
}

// TestGetRepoScratchDefaultFloorOnSmallVolume: on a real 8.5 MiB volume with
// the default floor (2 % of it), a never-ending body is stopped by the
// floor, before the volume is full (no ENOSPC), and fails local.
func TestGetRepoScratchDefaultFloorOnSmallVolume(t *testing.T) {
	// 8.5 MiB: the half MiB left after 8 MiB is above the floor but
	// below the next MiB of the spill.
	vol := t.TempDir()
	citest.Tmpfs(t, vol, 17<<19, "")
	pds := newServer(t, endlessBody)
	c, scratch := testClient(t, pds.URL, func(o *Options) {
		o.ScratchDir = filepath.Join(vol, "scratch")
		o.ScratchBudget = 1 << 30
		o.MaxCARBytes = 1 << 30
	})
	_, err := c.GetRepo(context.Background(), testDID)
	if Classify(err) != ClassLocal || !errors.Is(err, ErrLocal) || errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("got %v (class %v), want local, stopped by the floor before ENOSPC", err, Classify(err))
	}

	assertScratchEmpty(t, scratch)
}
