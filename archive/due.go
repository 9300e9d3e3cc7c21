package archive

// This file owns the due index's marker and its one-time build for a store
// written before the writer kept the index (PrefixDue, KeyDueIndex). The
// writer keeps the index itself (indexDue).

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/cockroachdb/pebble"
)

// dueIndexBuilt is meta/due_index's only value.
var dueIndexBuilt = []byte{0x01}

// decodeDueMarker accepts exactly dueIndexBuilt.
func decodeDueMarker(b []byte) (struct{}, error) {
	if len(b) != 1 || b[0] != dueIndexBuilt[0] {
		return struct{}{}, malformed("due index marker %x (want 01)", truncateForError(b))
	}
	return struct{}{}, nil
}

// dueBuildBatch is how many due/ keys one batch of the build writes.
const dueBuildBatch = 16 << 10

// buildDueIndex builds the due index from repo/ when meta/due_index is
// absent: it clears due/, writes an entry for every retryable repo in
// synced batches, and writes the marker last, so a crash at any point
// leaves the marker absent and the next Open builds again. It runs before
// any writer exists, so repo/ cannot change under it. An unreadable or
// malformed marker stops Open.
func (s *Store) buildDueIndex(now func() time.Time) error {
	_, err := get(s.db, KeyDueIndex, decodeDueMarker)
	switch {
	case err == nil:
		return nil
	case !errors.Is(err, ErrNotFound):
		return fmt.Errorf("archive: read the due index marker: %w", err)
	}
	// Open waits for this read of every repo: say so before it, not after.
	repos := s.reposCounted()
	p := s.startup.Begin(s.log, now, StepAnnouncement{Step: StepDueIndex,
		Line:  "building the due index: reading every repo/ row once before the store opens (a store from an older build; about half a CPU-microsecond a repo, BenchmarkOpenBuildsDueIndex)",
		Args:  []any{"repos", repos},
		Still: "still building the due index from repo/; the store opens when it ends", Total: repos})
	defer p.End()
	start := time.Now()
	b := s.db.NewBatch()
	defer func() { b.Close() }()
	_ = b.DeleteRange(PrefixDue, prefixEnd(PrefixDue), nil)
	n, inBatch := 0, 0
	err = s.ScanRepos(func(did string, st RepoState) error {
		if p.Read() {
			p.Tick("retryable", n)
		}
		if !st.Retryable() {
			return nil
		}
		_ = b.Set(DueKey(st.NextAttemptUS, did), []byte(st.Host), nil)
		n++
		if inBatch++; inBatch < dueBuildBatch {
			return nil
		}
		if err := commitSynced(b); err != nil {
			return s.persistErr("build the due index", err)
		}
		b.Close()
		b, inBatch = s.db.NewBatch(), 0
		return nil
	})
	if err != nil {
		return fmt.Errorf("archive: build the due index: %w", err)
	}
	_ = b.Set(KeyDueIndex, dueIndexBuilt, nil)
	if err := commitSynced(b); err != nil {
		return s.persistErr("build the due index", err)
	}
	s.log.Info("built the due index from repo/", "retryable", n, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// reposCounted is the repo/ rows meta/counts counts, for a line that
// announces a read of them all; -1 when it cannot be read (the writer
// reports that when it starts).
func (s *Store) reposCounted() int64 {
	c, err := s.Counts()
	if err != nil {
		return -1
	}
	return c.Total()
}

// dueWritten lowers what TakeDueWritten reports to low, the earliest next
// attempt + 1 of a durable batch's due/ entries (0: the batch wrote none).
func (s *Store) dueWritten(low int64) {
	for low != 0 {
		cur := s.dueLow.Load()
		if cur != 0 && cur <= low || s.dueLow.CompareAndSwap(cur, low) {
			return
		}
	}
}

// TakeDueWritten reports the earliest next attempt among the due/ entries
// the writer has made durable since the last call (ok false: none), and
// starts counting again. The retry runner, its one caller, takes it before
// each pass reads: an entry written after an earlier pass read past its
// time (a mark stamped before a slow commit, or by a clock since stepped
// back) is where the next pass starts reading.
func (s *Store) TakeDueWritten() (nextUS int64, ok bool) {
	v := s.dueLow.Swap(0)
	return v - 1, v != 0
}

// DueEntry is one due/ entry: a retryable repo, its next attempt and the
// host its last download reached ("" when none).
type DueEntry struct {
	DID    string
	NextUS int64
	Host   string
}

// DuePage reads at most n due/ entries from from on (nil: the first)
// whose next attempt is at most nowUS, into buf. next is the key the
// following page starts at, nil when no entry due at nowUS follows. The
// iterator is closed before it returns, so no page pins memtables while
// the caller works. A malformed key stops it with ErrMalformed naming it.
func (s *Store) DuePage(from []byte, nowUS int64, n int, buf []DueEntry) (page []DueEntry, next []byte, err error) {
	page = buf[:0]
	if from == nil {
		from = PrefixDue
	}
	// Every key of a next attempt ≤ nowUS sorts below DueKey(nowUS+1, "").
	upper := DueKey(nowUS+1, "")
	if bytes.Compare(from, upper) >= 0 {
		return page, nil, nil // from is past nowUS (a clock that stepped back)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: upper})
	if err != nil {
		return page, nil, &KeyError{Key: "due/<scan>", Kind: ErrRead, Err: err}
	}
	ok := it.First()
	for ; ok && len(page) < n; ok = it.Next() {
		did, at, perr := ParseDueKey(it.Key())
		if perr != nil {
			key := string(it.Key())
			_ = it.Close()
			return page, nil, &KeyError{Key: key, Kind: ErrMalformed, Err: perr}
		}
		page = append(page, DueEntry{DID: did, NextUS: at, Host: string(it.Value())})
	}
	if ok {
		next = append([]byte(nil), it.Key()...)
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return page, nil, &KeyError{Key: "due/<scan>", Kind: ErrRead, Err: err}
	}
	if err := it.Close(); err != nil {
		return page, nil, &KeyError{Key: "due/<scan>", Kind: ErrRead, Err: err}
	}
	return page, next, nil
}

// ScanRetryable calls fn for every retryable repo (RepoState.Retryable)
// whose next attempt is from fromUS to toUS, soonest due first, reading
// the due index and each repo's state from one snapshot: its cost follows
// the repos due in that window, never the repos known. An entry whose
// repo has no state or is not retryable (only a build without the index,
// writing after this one, leaves such an entry) is skipped. fn returning
// an error stops the scan with it. read is the due/ keys it read.
func (s *Store) ScanRetryable(fromUS, toUS int64, fn func(did string, st RepoState) error) (read int, err error) {
	upper := prefixEnd(PrefixDue)
	if toUS < math.MaxInt64 {
		upper = DueKey(toUS+1, "")
	}
	lower := DueKey(fromUS, "")
	if bytes.Compare(lower, upper) >= 0 {
		return 0, nil
	}
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return 0, &KeyError{Key: "due/<scan>", Kind: ErrRead, Err: err}
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		read++
		did, _, err := ParseDueKey(it.Key())
		if err != nil {
			return read, &KeyError{Key: string(it.Key()), Kind: ErrMalformed, Err: err}
		}
		st, err := get(snap, RepoKey(did), DecodeRepoState)
		switch {
		case errors.Is(err, ErrNotFound):
			continue
		case err != nil:
			return read, err
		case !st.Retryable():
			continue
		}
		if err := fn(did, st); err != nil {
			return read, err
		}
	}
	if err := it.Error(); err != nil {
		return read, &KeyError{Key: "due/<scan>", Kind: ErrRead, Err: err}
	}
	return read, nil
}
