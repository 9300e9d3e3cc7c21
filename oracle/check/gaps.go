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
	union := make(map[uint64]archive.Event, len(after)+len(before))
	for _, ev := range after {
		present[ev.Seq] = true
		union[ev.Seq] = ev
	}
	for _, ev := range before {
		if _, ok := union[ev.Seq]; !ok {
			union[ev.Seq] = ev
		}
	}
	rows := make([]archive.Event, 0, len(union))
	for _, ev := range union {
		rows = append(rows, ev)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Seq < rows[j].Seq })
	keep := Survivors(rows, w)
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
