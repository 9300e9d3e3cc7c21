package check

import (
	"fmt"
	"sort"

	"github.com/backstream/backstream/archive"
)

// Vanished returns the seqs of rows in before (rows a reader was handed, or
// a store read earlier) that are missing from after (a later read) without
// compaction to explain it: rows that Survivors, over every row either read
// holds, says a compaction to watermark w must keep. Rows vanish legitimately
// only when a row below w supersedes them, and the rows that supersede
// (delete, sync, account) are never removed, so the union of the two reads
// holds every superseding row that matters. Empty means every gap is
// compaction's.
func Vanished(before, after []archive.Event, w uint64) []uint64 {
	present := make(map[uint64]bool, len(after))
	for _, ev := range after {
		present[ev.Seq] = true
	}
	keep := Survivors(union(before, after), w)
	var out []uint64
	for _, ev := range before {
		if !present[ev.Seq] && keep[ev.Seq] {
			out = append(out, ev.Seq)
		}
	}
	return out
}

// Rows reads every row of s's ev/ (cloned), in seq order.
func Rows(s *archive.Store) ([]archive.Event, error) {
	it, err := s.Events(0)
	if err != nil {
		return nil, err
	}
	defer it.Close()
	var out []archive.Event
	for it.Next() {
		out = append(out, it.Event().Clone())
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("check: read rows: %w", err)
	}
	return out, nil
}

// CompareSurvivors checks a store's rows after compaction (after) against
// an earlier read of it (before) and the watermark w: no row of before is
// gone unless superseded below w (Vanished), and no row of after below w
// is one that Survivors says a pass to w must have removed.
func CompareSurvivors(before, after []archive.Event, w uint64) error {
	if gone := Vanished(before, after, w); len(gone) > 0 {
		return fmt.Errorf("check: %d rows gone that nothing below the watermark %d supersedes (first seq %d)", len(gone), w, gone[0])
	}
	keep := Survivors(union(before, after), w)
	for _, ev := range after {
		if ev.Seq < w && !keep[ev.Seq] {
			return fmt.Errorf("check: seq %d (%s %s %s/%s) is superseded below the watermark %d and still stored", ev.Seq, ev.Kind, ev.DID, ev.Collection, ev.RKey, w)
		}
	}
	return nil
}

// union is every row of the two reads in seq order (after's copy of a seq
// both hold).
func union(before, after []archive.Event) []archive.Event {
	bySeq := make(map[uint64]archive.Event, len(before)+len(after))
	for _, ev := range before {
		bySeq[ev.Seq] = ev
	}
	for _, ev := range after {
		bySeq[ev.Seq] = ev
	}
	rows := make([]archive.Event, 0, len(bySeq))
	for _, ev := range bySeq {
		rows = append(rows, ev)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Seq < rows[j].Seq })
	return rows
}
