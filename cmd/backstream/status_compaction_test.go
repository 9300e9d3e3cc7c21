package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
)

// TestStatusIndexBackfill: `backstream status` shows an unfinished index
// backfill (a store archived before the compaction index) and nothing for
// a store whose index covers it. Dropping the marker read fails the first
// case.
func TestStatusIndexBackfill(t *testing.T) {
	s, err := archive.Open(t.TempDir(), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c, err := readCompaction(s)
	if err != nil || c.Index != nil {
		t.Fatalf("new store: %+v, %v", c, err)
	}
	if err := s.DB().Set(archive.KeyIndex, archive.EncodeIndexMarker(archive.IndexMarker{Next: 3, End: 10}), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if c, err = readCompaction(s); err != nil || c.Index == nil || c.Index.Next != 3 || c.Index.End != 10 {
		t.Fatalf("store being backfilled: %+v, %v", c, err)
	}
	var out bytes.Buffer
	printCompaction(&out, c)
	if !strings.Contains(out.String(), "index backfill\t7 of 9 seqs left") {
		t.Fatalf("report:\n%s", out.String())
	}
}

// TestStatusIndexBackfillCounts: `backstream status` counts both
// backfills' seqs alike, from seq 1 (the first archived) up to the marker's
// end, which is one past the tip, with thousands separators; a store whose
// markers are absent (one an older build wrote, read before the first start
// of this build) reads as every row from 1 to its tip left, and an empty
// one as nothing to backfill.
func TestStatusIndexBackfillCounts(t *testing.T) {
	s, err := archive.Open(t.TempDir(), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range [][]byte{archive.KeyIndex, archive.KeyReplayIndex} {
		if err := s.DB().Set(k, archive.EncodeIndexMarker(archive.IndexMarker{Next: 1, End: 24219}), pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	c, err := readCompaction(s)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printCompaction(&out, c)
	for _, want := range []string{"index backfill\t24,218 of 24,218 seqs left", "replay index backfill\t24,218 of 24,218 seqs left"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("a store of 24,218 rows none of which is indexed: report\n%s\nwant %q", out.String(), want)
		}
	}
	for _, k := range [][]byte{archive.KeyIndex, archive.KeyReplayIndex} {
		if err := s.DB().Delete(k, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if c, err = readCompaction(s); err != nil || c.Index != nil || c.ReplayIndex != nil {
		t.Fatalf("an empty store without markers: index %+v, replay index %+v (%v), want nothing to backfill", c.Index, c.ReplayIndex, err)
	}
}
