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
	if !strings.Contains(out.String(), "index backfill\t7 of 10 seqs left") {
		t.Fatalf("report:\n%s", out.String())
	}
}
