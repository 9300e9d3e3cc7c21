package merge

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
)

// TestWalkCommitFaultSweep (M4, M2): the n-th merge batch touching each
// prefix — cursor/merge, the ratchet rev/, repo/ (side effects), ev/ — fails
// to commit. The walk stops with the error (never reports success over a
// lost batch); a restarted walk without the fault converges to exactly the
// archive of a fault-free walk: nothing merged twice, nothing skipped.
func TestWalkCommitFaultSweep(t *testing.T) {
	base := vfs.NewMem()
	buildMergeStore(t, base)
	refFS := vfs.NewMem()
	copyFS(t, base, refFS)
	if _, err := walkOnce(t, refFS, func() {}); err != nil {
		t.Fatal(err)
	}
	want := outcomeOf(t, refFS)
	for _, prefix := range []string{"cursor/merge", "rev/", "repo/", "ev/"} {
		for _, n := range []int{1, 2, 5, 9} {
			t.Run(fmt.Sprintf("%s#%d", prefix, n), func(t *testing.T) {
				mem := vfs.NewMem()
				copyFS(t, base, mem)
				f := storefault.FailNthCommit(prefix, n)
				s, err := archive.Open("/data", func() archive.Options { o := sfOpts(mem); o.CommitHook = f.Check; return o }())
				if err != nil {
					t.Fatal(err)
				}
				w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
				if err != nil {
					t.Fatal(err)
				}
				_, err = Walk(t.Context(), Config{Store: s, Writer: w, MaxRows: 3, InFlight: 2, Logger: quiet, Now: func() time.Time { return time.Unix(1000, 0) }})
				w.Close()
				s.Close()
				if f.Fired() == 0 {
					if f.Seen() >= n {
						t.Fatalf("matching batch %d seen but not failed", n)
					}
					t.Skipf("only %d batches touch %s", f.Seen(), prefix)
				}
				if err == nil || !errors.Is(err, storefault.ErrInjected) {
					t.Fatalf("walk over a failed commit: %v", err)
				}
				if _, err := walkOnce(t, mem, func() {}); err != nil {
					t.Fatalf("restarted walk: %v", err)
				}
				if got := outcomeOf(t, mem); got != want {
					t.Fatalf("after the restart the archive differs from a fault-free walk:\n got %s\nwant %s", got, want)
				}
			})
		}
	}
}

// TestCleanupCommitFault (M7, C4): the cleanup batch fails as a whole:
// Cleanup returns the error, the store is still merging with its capture
// and cursors; a second Cleanup succeeds.
func TestCleanupCommitFault(t *testing.T) {
	mem := vfs.NewMem()
	buildMergeStore(t, mem)
	f := storefault.FailNthCommit("meta/phase", 1)
	o := sfOpts(mem)
	o.CommitHook = f.Check
	s, err := archive.Open("/data", o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, _ := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	defer w.Close()
	if _, err := Walk(t.Context(), Config{Store: s, Writer: w, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	tip, _ := s.CaptureTip()
	err = Cleanup(Config{Store: s, Writer: w, Logger: quiet})
	if !errors.Is(err, storefault.ErrInjected) || f.Fired() != 1 {
		t.Fatalf("cleanup over a failed commit: %v (fired %d)", err, f.Fired())
	}
	if t2, _ := s.CaptureTip(); t2 != tip || tip == 0 {
		t.Fatalf("capture tip %d → %d after a failed cleanup", tip, t2)
	}
	if _, err := s.MergeCursor(); err != nil {
		t.Fatalf("cursor/merge after a failed cleanup: %v", err)
	}
	if err := Cleanup(Config{Store: s, Writer: w, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Phase(); p != archive.PhaseSteadyState {
		t.Fatalf("phase %s", p)
	}
}
