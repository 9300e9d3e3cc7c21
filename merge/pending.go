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
	started := false
	total, err := eachPendingChunk(cfg.Store, pendingChunk, func(dids []string) error {
		if !started {
			started = true
			cfg.Logger.Info("pending pass: replacing interrupted repos wholesale", "first_chunk", len(dids))
			for range min(cfg.PendingWorkers, len(dids)) {
				wg.Go(func() {
					for did := range work {
						replacePending(ctx, cancel, cfg, did, &deferred)
					}
				})
			}
		}
		for _, did := range dids {
			select {
			case work <- did:
			case <-ctx.Done():
				return errPassStopped
			}
		}
		return nil
	})
	close(work)
	wg.Wait()
	if err != nil && !errors.Is(err, errPassStopped) {
		return fmt.Errorf("merge: pending pass: %w", err)
	}
	if n := deferred.Load(); n > 0 {
		cfg.Logger.Warn("pending pass: the record index is still being backfilled; repos left pending for the retry runner", "repos", n)
	}
	if total > 0 {
		cfg.Logger.Info("pending pass: done", "repos", total)
	}
	return context.Cause(ctx)
}

// replacePending runs did's whole-repo replacement; a failure to make a
// state durable cancels the pass with its error.
func replacePending(ctx context.Context, cancel context.CancelCauseFunc, cfg Config, did string, deferred *atomic.Int64) {
	res, err := cfg.Jobs.Run(ctx, backfill.Request{DID: did, Replace: true, Active: true})
	switch {
	case errors.Is(err, archive.ErrIndexPending):
		// A store archived before the record index: the replacement
		// cannot be diffed until the index backfill is done. It stays
		// pending, for the retry runner.
		deferred.Add(1)
	case errors.Is(err, backfill.ErrStale):
		// The archive already holds a newer rev than the snapshot
		// served: the repo stays pending, and the retry runner fetches it
		// again in steady state.
		cfg.Logger.Warn("pending pass: snapshot older than the archive; left for the retry runner", "did", did)
	case err != nil:
		cancel(fmt.Errorf("merge: pending pass: replace %s: %w", did, err))
	default:
		cfg.Logger.Debug("pending repo replaced", "did", did, "status", res.Status)
		cfg.Crash.Hit(crashpoint.PendingReplaced)
	}
}

// pendingChunk bounds the DIDs the pending pass holds at once (some 256
// KiB): a restart in bootstrap leaves only the repos in flight pending, but
// the walk creates pending every account no listing named whose captured
// commit had a since (after a listing cut short, millions over a
// bootstrap of days: 50-60 bytes a DID held, a hundred MB or more), and
// the pass takes hours.
const pendingChunk = 4096

// errPassStopped ends the walk of repo/ when the pass is cancelled.
var errPassStopped = errors.New("pending pass stopped")

// errChunkFull ends one read of repo/ at a full chunk.
var errChunkFull = errors.New("chunk full")

// eachPendingChunk calls fn with the active pending repos in DID order, at
// most size at a time, each chunk read by its own iterator from after the
// last DID read (a replacement changes only its own repo/ row, behind the
// walk), and returns how many it found. fn's error stops the walk.
func eachPendingChunk(s *archive.Store, size int, fn func([]string) error) (int, error) {
	total, after := 0, ""
	for {
		dids := make([]string, 0, size)
		err := s.ScanReposAfter(after, func(did string, st archive.RepoState) error {
			if st.Status == archive.StatusPending && st.Active {
				dids = append(dids, did)
				if len(dids) == size {
					return errChunkFull
				}
			}
			return nil
		})
		if err != nil && !errors.Is(err, errChunkFull) {
			return total, err
		}
		total += len(dids)
		if len(dids) > 0 {
			if ferr := fn(dids); ferr != nil {
				return total, ferr
			}
			after = dids[len(dids)-1]
		}
		if err == nil { // the read reached the end of repo/
			return total, nil
		}
	}
}
