package retry_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/retry"
)

func setCommitHook(o *archive.Options, hook func(string, [][]byte) error) { o.CommitHook = hook }

// TestRetryCommitFaultSweep (S6, S5): the n-th synced batch of a retry pass
// touching each prefix fails — a replacement's rows (ev/), its ratchet
// (rev/), its completion or failure state (repo/), a host park (host/). The
// pass stops with ErrFatal carrying the failure, never a silent per-repo
// outcome; fault-free passes after it (a restart) converge: every repo
// complete and folding to the world's records.
func TestRetryCommitFaultSweep(t *testing.T) {
	e := newSFEnv(t)
	base := vfs.NewMem()
	e.seed(base)
	for _, prefix := range []string{"ev/", "rev/", "repo/"} {
		for _, n := range []int{1, 2, 3, 4} {
			t.Run(fmt.Sprintf("%s#%d", prefix, n), func(t *testing.T) {
				mem := vfs.NewMem()
				copyMemFS(t, base, mem)
				f := storefault.FailNthCommit(prefix, n)
				ps, err := e.pass(mem, f.Check, func() {})
				if f.Fired() == 0 && f.Seen() < n {
					t.Skipf("only %d batches touch %s (group commit)", f.Seen(), prefix)
				}
				if f.Fired() == 0 {
					t.Fatalf("fault never fired (%d matching batches); pass %+v %v", f.Seen(), ps, err)
				}
				if !errors.Is(err, retry.ErrFatal) || !errors.Is(err, storefault.ErrInjected) {
					t.Fatalf("pass over a failed commit: %+v %v; want ErrFatal carrying the failure", ps, err)
				}
				e.converged(mem)
			})
		}
	}
}
