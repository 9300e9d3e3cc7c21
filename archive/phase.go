package archive

// phase.go owns the synced batches that are not rows: the end of merging
// (cleanup + phase) and the relay this store follows. Phase changes that
// must be ordered after rows (bootstrap → merging) go through the Writer as
// a Unit's Puts instead (bootstrap.EnterMerging).

import (
	"errors"
	"fmt"
	"time"

	"github.com/cockroachdb/pebble"
)

// CommitSteadyState ends merging in one synced batch (M7, C4): the capture
// log is range-deleted, the merge and listRepos cursors are deleted, and the
// phase becomes steady_state. The capture writer must be stopped.
func (s *Store) CommitSteadyState(now time.Time) error {
	phase, err := EncodePhase(PhaseSteadyState)
	if err != nil {
		return fmt.Errorf("archive: commit steady_state: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.DeleteRange(PrefixCapture, prefixEnd(PrefixCapture), nil)
	_ = b.Delete(KeyCursorMerge, nil)
	_ = b.Delete(KeyCursorListRepos, nil)
	_ = b.Delete(KeyCursorListLast, nil)
	_ = b.DeleteRange(PrefixCursorHostList, prefixEnd(PrefixCursorHostList), nil)
	_ = b.DeleteRange(PrefixCursorHostListLast, prefixEnd(PrefixCursorHostListLast), nil)
	_ = b.Set(KeyPhase, phase, nil)
	_ = b.Set(KeyPhaseEnteredAt, EncodeTime(now), nil)
	return s.commit("commit steady_state", b)
}

// commit commits one of the store's own batches synced; a failure is a
// persistence error naming op, a fatal one (Pebble's) the FatalError.
func (s *Store) commit(op string, b *pebble.Batch) error {
	err := s.checkCommit(op, b)
	if err == nil {
		err = commitSynced(b)
	}
	if err != nil {
		return s.persistErr(op, err)
	}
	return nil
}

// SetRelay records the relay this store follows (C6). With resetCursor, the
// relay cursor is deleted in the same batch: a different relay's seqs mean
// nothing here.
func (s *Store) SetRelay(host string, resetCursor bool) error {
	v, err := EncodeRelay(host)
	if err != nil {
		return fmt.Errorf("archive: set relay: %w", err)
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set(KeyRelay, v, nil)
	if resetCursor {
		_ = b.Delete(KeyCursorRelay, nil)
	}
	return s.commit("record the relay", b)
}

// MarkRelaySilent records (meta/relay_silent_at) that capture's wait for a
// first firehose frame expired with no cursor/relay durable: the relay had
// sent nothing, so a store without cursor/relay past bootstrap has no
// position to lose. A firehose consumer that starts from a cursor drops it
// (ClearRelaySilent).
func (s *Store) MarkRelaySilent(now time.Time) error {
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Set(KeyRelaySilentAt, EncodeTime(now), nil)
	return s.commit("record a silent relay", b)
}

// ClearRelaySilent deletes meta/relay_silent_at if it is there.
func (s *Store) ClearRelaySilent() error {
	if _, err := s.Time(KeyRelaySilentAt); errors.Is(err, ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	b := s.db.NewBatch()
	defer b.Close()
	_ = b.Delete(KeyRelaySilentAt, nil)
	return s.commit("clear the silent relay mark", b)
}
