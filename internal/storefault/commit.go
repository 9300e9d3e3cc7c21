package storefault

// commit.go owns CommitFault, the write-path injector behind
// archive.Options.CommitHook.

import (
	"errors"
	"fmt"
	"sync"
)

// ErrInjected is the default error of an injected storage fault.
var ErrInjected = errors.New("injected storage fault")

// CommitFault fails synced commits: the n-th batch (1-based) holding a key
// with the given prefix fails with the fault's error, and the batch is not
// applied. Sticky makes every later matching batch fail too (a disk that
// stays broken). Its Check method is the archive.Options.CommitHook.
type CommitFault struct {
	prefix []byte
	n      int

	mu     sync.Mutex
	err    error
	sticky bool
	seen   int      // matching batches seen
	fired  int      // batches failed
	ops    []string // ops of the failed batches
}

// FailNthCommit fails the n-th synced batch touching prefix (n ≥ 1) with
// ErrInjected. An empty prefix matches every non-empty batch.
func FailNthCommit(prefix string, n int) *CommitFault {
	if n < 1 {
		n = 1
	}
	return &CommitFault{prefix: []byte(prefix), n: n, err: ErrInjected}
}

// WithError makes the fault fail with err (e.g. syscall.ENOSPC for a full
// disk, syscall.EIO).
func (f *CommitFault) WithError(err error) *CommitFault {
	f.mu.Lock()
	f.err = err
	f.mu.Unlock()
	return f
}

// Sticky makes every matching batch after the n-th fail as well.
func (f *CommitFault) Sticky() *CommitFault {
	f.mu.Lock()
	f.sticky = true
	f.mu.Unlock()
	return f
}

// Check is the commit hook: op names the batch (for messages), keys are its
// keys. It returns the injected error when this batch must fail.
func (f *CommitFault) Check(op string, keys [][]byte) error {
	match := false
	for _, k := range keys {
		if len(k) >= len(f.prefix) && string(k[:len(f.prefix)]) == string(f.prefix) {
			match = true
			break
		}
	}
	if !match {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen++
	if f.seen == f.n || (f.sticky && f.seen > f.n) {
		f.fired++
		f.ops = append(f.ops, op)
		return fmt.Errorf("%s: batch %d touching %q: %w", op, f.seen, f.prefix, f.err)
	}
	return nil
}

// Seen is the number of matching batches so far (failed ones included).
func (f *CommitFault) Seen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen
}

// Fired is the number of batches the fault failed.
func (f *CommitFault) Fired() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired
}

// FiredOps names the failed batches, in order.
func (f *CommitFault) FiredOps() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ops...)
}
