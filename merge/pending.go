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
	dids, err := pendingRepos(cfg.Store)
	if err != nil {
		return fmt.Errorf("merge: pending pass: %w", err)
	}
	if len(dids) == 0 {
		return nil
	}
	cfg.Logger.Info("pending pass: replacing interrupted repos wholesale", "repos", len(dids))
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	work := make(chan string)
	var wg sync.WaitGroup
	var deferred atomic.Int64 // repos left pending: the index backfill runs
	for range min(cfg.PendingWorkers, len(dids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for did := range work {
				res, err := cfg.Jobs.Run(ctx, backfill.Request{DID: did, Replace: true, Active: true})
				if errors.Is(err, archive.ErrIndexPending) {
					// A store archived before the record index: the
					// replacement cannot be diffed until the index
					// backfill is done. It stays pending, for the retry
					// runner.
					deferred.Add(1)
					continue
				}
				if errors.Is(err, backfill.ErrStale) {
					// The archive already holds a newer rev than the
					// snapshot served: the repo stays pending, and the
					// retry runner fetches it again in steady state.
					cfg.Logger.Warn("pending pass: snapshot older than the archive; left for the retry runner", "did", did)
					continue
				}
				if err != nil {
					cancel(fmt.Errorf("merge: pending pass: replace %s: %w", did, err))
					continue
				}
				cfg.Logger.Debug("pending repo replaced", "did", did, "status", res.Status)
				cfg.Crash.Hit(crashpoint.PendingReplaced)
			}
		}()
	}
feed:
	for _, did := range dids {
		select {
		case work <- did:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if n := deferred.Load(); n > 0 {
		cfg.Logger.Warn("pending pass: the record index is still being backfilled; repos left pending for the retry runner", "repos", n)
	}
	return context.Cause(ctx)
}

// pendingRepos lists the active pending repos.
func pendingRepos(s *archive.Store) ([]string, error) {
	var dids []string
	err := s.ScanRepos(func(did string, st archive.RepoState) error {
		if st.Status == archive.StatusPending && st.Active {
			dids = append(dids, did)
		}
		return nil
	})
	return dids, err
}
