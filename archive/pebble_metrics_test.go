package archive

import (
	"strings"
	"testing"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestPebbleCollector(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	for i := 0; i < 50; i++ {
		apply(t, w, &Unit{Events: []Event{realisticEvent(i)}})
	}
	w.Close()
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewPebbleCollector(s))
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 9+4+len(errorKinds)+len(faultCauses)+1 { // +1: the slow reads
		t.Fatalf("%d metrics, %v", n, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP backstream_pebble_flushes_total Memtable flushes since the store was opened.
# TYPE backstream_pebble_flushes_total counter
backstream_pebble_flushes_total 1
`), "backstream_pebble_flushes_total"); err != nil {
		t.Fatal(err)
	}
}

// TestPebbleCollectorWritten: the bytes committed and the bytes written for
// them, by what wrote them, follow the store's work: the WAL writes at least
// what was committed, a flush writes a table, a compaction rewrites it.
func TestPebbleCollectorWritten(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewPebbleCollector(s))
	written := func(by string) float64 {
		return promtest.Value(t, reg, "backstream_pebble_written_bytes_total", map[string]string{"by": by})
	}
	in0, wal0 := promtest.Value(t, reg, "backstream_pebble_wal_in_bytes_total", nil), written("wal")
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	for i := 0; i < 50; i++ {
		apply(t, w, &Unit{Events: []Event{realisticEvent(i)}})
	}
	in := promtest.Value(t, reg, "backstream_pebble_wal_in_bytes_total", nil) - in0
	if wal := written("wal") - wal0; in < 50*100 || wal < in {
		t.Fatalf("50 events committed: %.0f bytes in, %.0f written to the WAL", in, wal)
	}
	if f, c := written("flush"), written("compaction"); f != 0 || c != 0 {
		t.Fatalf("before any flush: %.0f flushed, %.0f compacted", f, c)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if f := written("flush"); f <= 0 {
		t.Fatalf("after a flush: %.0f bytes flushed", f)
	}
	// A second table overlapping the first (meta/counts, the rev ratchet),
	// so that the compaction rewrites rather than moves.
	for i := 50; i < 60; i++ {
		apply(t, w, &Unit{Events: []Event{realisticEvent(i)}})
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Compact([]byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	if c := written("compaction"); c <= 0 {
		t.Fatalf("after a compaction: %.0f bytes compacted", c)
	}
	if i := written("ingest"); i != 0 {
		t.Fatalf("%.0f bytes ingested; nothing ingests", i)
	}
}
