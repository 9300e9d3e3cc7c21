package merge

// pending.go owns the pending pass (M5): every repo left pending by a
// restart inside bootstrap is replaced wholesale, above the merged tail.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/crashpoint"
)

// PendingPass replaces every active pending repo wholesale with a pool of
// cfg.PendingWorkers jobs. A repo the job cannot finish ends failed with a
// next attempt (the job's own terminal state); a snapshot older than the
// archive's rev leaves the repo pending, due for the retry runner. Only a
// failure to make a state durable stops the pass, with that error.
func PendingPass(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if cfg.Jobs == nil {
		return errors.New("merge: pending pass: no Jobs configured")
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan string)
	var wg sync.WaitGroup
	var deferred atomic.Int64 // repos left pending: the index backfill runs
	var stale atomic.Int64    // repos left pending: a snapshot older than the archive
	// repo/ is read a page at a time (archive.ScanReposPage), no iterator
	// open while a DID waits for a worker: a merge walk after a listing
	// cut short can leave millions pending, and the pass takes hours.
	total := 0
	err := cfg.Store.ScanRepos(func(did string, st archive.RepoState) error {
		if st.Status != archive.StatusPending || !st.Active {
			return nil
		}
		if total == 0 {
			cfg.Logger.Info("pending pass: replacing interrupted repos wholesale")
			for range cfg.PendingWorkers {
				wg.Go(func() {
					for did := range work {
						replacePending(ctx, cancel, cfg, did, &deferred, &stale)
					}
				})
			}
		}
		total++
		select {
		case work <- did:
			return nil
		case <-ctx.Done():
			return errPassStopped
		}
	})
	close(work)
	wg.Wait()
	if err != nil && !errors.Is(err, errPassStopped) {
		return fmt.Errorf("merge: pending pass: %w", err)
	}
	if n := deferred.Load(); n > 0 {
		cfg.Logger.Warn("pending pass: the record index is still being backfilled; repos left pending for the retry runner", "repos", n)
	}
	if n := stale.Load(); n > 0 {
		cfg.Logger.Warn(staleLine, "repos", n)
	}
	if total > 0 {
		cfg.Logger.Info("pending pass: done", "repos", total)
	}
	return context.Cause(ctx)
}

// replacePending runs did's whole-repo replacement; a failure to make a
// state durable cancels the pass with its error. A repo left pending is counted (backstream_merge_pending_total) and
// summed for one line at the pass's end, never logged one by one: a
// lagging PDS serves every account it holds stale.
func replacePending(ctx context.Context, cancel context.CancelCauseFunc, cfg Config, did string, deferred, stale *atomic.Int64) {
	res, err := cfg.Jobs.Run(ctx, backfill.Request{DID: did, Replace: true, Active: true})
	switch {
	case errors.Is(err, archive.ErrIndexPending):
		// A store archived before the record index: the replacement
		// cannot be diffed until the index backfill is done. It stays
		// pending, for the retry runner.
		deferred.Add(1)
		cfg.Metrics.pending(pendingDeferred)
	case errors.Is(err, backfill.ErrStale):
		// The archive already holds a newer rev than the snapshot
		// served: the repo stays pending, and the retry runner fetches it
		// again in steady state.
		stale.Add(1)
		cfg.Metrics.pending(pendingStale)
	case err != nil:
		cancel(fmt.Errorf("merge: pending pass: replace %s: %w", did, err))
	default:
		cfg.Metrics.pending(pendingReplaced)
		cfg.Logger.Debug("pending repo replaced", "did", did, "status", res.Status)
		cfg.Crash.Hit(crashpoint.PendingReplaced)
	}
}

// staleLine sums the pending repos whose snapshot was older than the
// archive.
const staleLine = "pending pass: snapshots older than the archive; repos left pending for the retry runner"

// errPassStopped ends the walk of repo/ when the pass is cancelled.
var errPassStopped = errors.New("pending pass stopped")
