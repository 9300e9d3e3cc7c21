package merge

import (
	"fmt"

	"github.com/backstream/backstream/internal/crashpoint"
)

// Cleanup ends the merging phase in one synced batch (M7): cap/ range-deleted,
// the merge and listRepos cursors deleted, phase=steady_state. Every merging
// step before it must be done; a crash before it redoes only what is left
// (the walk resumes from cursor/merge), a crash after it is steady state.
func Cleanup(cfg Config) error {
	cfg.defaults()
	if err := cfg.Store.CommitSteadyState(cfg.Now()); err != nil {
		return fmt.Errorf("merge: cleanup: %w", err)
	}
	cfg.Crash.Hit(crashpoint.SteadyCommitted)
	return nil
}
