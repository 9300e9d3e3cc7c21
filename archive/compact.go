package archive

// This file owns the compaction pass: the physical removal of superseded
// rows below a watermark (meta/compaction), driven by the tombstones the
// writer lists in tomb/ and the record index it keeps in rec/, never by a
// scan of ev/.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/backstream/backstream/internal/crashpoint"
)

// DefaultCompactReclaimBytes is the bytes a pass must remove before it asks
// Pebble for a manual compaction of the range it removed from, so the disk
// really shrinks.
const DefaultCompactReclaimBytes = 64 << 20

// ErrCompactionState: the compaction state (a tomb/ or rec/ entry,
// compact/intent, meta/compaction) is malformed. The pass stopped before
// removing anything the bad value concerns and guessed nothing. The owner
// halts compaction (ingest and serving go on) and reports the key; the
// recovery path is `backstream compaction reset`, which deletes
// compact/intent (ResetCompactionIntent). The error also matches
// ErrMalformed and names the key.
var ErrCompactionState = errors.New("malformed compaction state: compaction halted")

// CompactOptions configure one pass.
type CompactOptions struct {
	// ReclaimBytes: a pass that removed more than this many bytes of ev/
	// values asks Pebble for a manual compaction of the ranges it removed
	// from. 0 is DefaultCompactReclaimBytes; negative never compacts.
	ReclaimBytes int64
	// Logger receives the pass's one summary line; nil is slog.Default().
	Logger *slog.Logger
	// Crash fires compaction-intent, compaction-batch and compaction-done
	// right after the batch each names (tests; nil in production).
	Crash *crashpoint.Set
	// Now is the clock of the intent's start time; nil is time.Now.
	Now func() time.Time
}

// CompactResult is what one pass did.
type CompactResult struct {
	From, To   uint64 // the watermark before and after the pass
	Accounts   int    // accounts whose tombstones were applied
	Tombstones int    // tomb/ entries applied and deleted
	Rows       int    // ev/ rows removed
	Bytes      int64  // bytes of the removed ev/ values
	Duration   time.Duration
	Reclaimed  bool // a manual compaction ran (Bytes > ReclaimBytes)
	RolledOver bool // the pass finished an intent a previous process left
}

// CompactionState is the durable compaction state.
type CompactionState struct {
	// Watermark: below it every superseded row is gone (0: never compacted).
	Watermark uint64
	// Intent is the pass in progress, nil when none is: a pass that did not
	// finish (a crash), which the next pass rolls forward.
	Intent *CompactIntent
}

// Compaction reads meta/compaction and compact/intent. A malformed value is
// an error matching ErrCompactionState and ErrMalformed, naming the key.
func (s *Store) Compaction() (CompactionState, error) {
	return CompactionState{}, errors.New("archive: Compaction: not implemented")
}

// ResetCompactionIntent deletes compact/intent in one synced batch: the
// recovery path of a malformed or unfinishable intent. Safe: a pass is
// defined by tomb/ and the watermark, so the next pass recomputes what it
// must remove.
func (s *Store) ResetCompactionIntent() error {
	return errors.New("archive: ResetCompactionIntent: not implemented")
}

// CompactionGeneration counts the compaction removal batches committed
// since the store was opened. A reader holding an iterator opened at
// another generation reopens it at its position before its next read, so
// it never reads a row a committed removal batch took away.
func (s *Store) CompactionGeneration() uint64 { return s.compactGen.Load() }

// ForgottenBelow is the highest seq below which a pass may have removed
// rows (the larger of the watermark and a pass's intent), as this process
// knows it: a gap in ev/ below it is compaction's, one above it is data
// lost.
func (s *Store) ForgottenBelow() uint64 { return s.forgottenBelow.Load() }

// Compact runs one compaction pass to W = max(watermark, w's durable tip +
// 1), or to the watermark of an intent a previous pass left (rolled
// forward). It removes every row superseded by a row below W (see
// Supersedes), one account per batch, marks the removed rows still in w's
// live log as forgotten, then commits the watermark and clears the intent
// in one synced batch. Only one pass may run at a time (one owner
// goroutine). A malformed compaction value stops it with an error matching
// ErrCompactionState; a store I/O error is returned wrapped as usual (fatal
// for the owner).
func (s *Store) Compact(ctx context.Context, w *Writer, opts CompactOptions) (CompactResult, error) {
	return CompactResult{}, errors.New("archive: Compact: not implemented")
}

// TombstonesWritten counts the tomb/ entries this writer committed since it
// started (an owner compares it with its value at the last pass to run an
// early pass).
func (w *Writer) TombstonesWritten() uint64 { return w.tombs.Load() }
