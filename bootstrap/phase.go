package bootstrap

// phase.go owns the bootstrap → merging commit point (C3): phase=merging,
// its entry time and both backfill timestamps in one synced unit.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
)

// EnterMerging makes phase=merging durable together with
// meta/phase_entered_at=now, meta/backfill_started_at (when bootstrap was
// entered, from meta/phase_entered_at) and meta/backfill_completed_at=now,
// in one unit, hence one synced batch (C3). Call it only after Run returned
// nil, while capture still runs. It is idempotent: a store already past
// bootstrap is left alone. The caller fires crashpoint.MergingCommitted
// when it returns nil.
func EnterMerging(ctx context.Context, s *archive.Store, w backfill.Writer, now time.Time) error {
	phase, err := s.Phase()
	if err != nil {
		return fmt.Errorf("bootstrap: enter merging: %w", err)
	}
	if phase != archive.PhaseBootstrap {
		return nil
	}
	started, err := s.Time(archive.KeyPhaseEnteredAt)
	if errors.Is(err, archive.ErrNotFound) {
		started, err = now, nil
	}
	if err != nil {
		return fmt.Errorf("bootstrap: enter merging: %w", err)
	}
	pv, err := archive.EncodePhase(archive.PhaseMerging)
	if err != nil {
		return fmt.Errorf("bootstrap: enter merging: %w", err)
	}
	u := &archive.Unit{Puts: []archive.KV{
		{Key: archive.KeyPhase, Value: pv},
		{Key: archive.KeyPhaseEnteredAt, Value: archive.EncodeTime(now)},
		{Key: archive.KeyBackfillStartedAt, Value: archive.EncodeTime(started)},
		{Key: archive.KeyBackfillCompleteAt, Value: archive.EncodeTime(now)},
	}}
	if err := applyUnit(ctx, w, u); err != nil {
		return fmt.Errorf("bootstrap: enter merging: %w", err)
	}
	return nil
}
