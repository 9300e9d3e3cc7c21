//go:build !storefault

package retry_test

import "github.com/backstream/backstream/archive"

// setCommitHook is a no-op until the CommitHook seam lands (see
// runner_write_storefault_test.go); only nil hooks are passed without it.
func setCommitHook(o *archive.Options, hook func(string, [][]byte) error) {
	if hook != nil {
		panic("retry tests: a commit hook needs the storefault build tag")
	}
}
