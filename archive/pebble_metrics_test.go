package archive

import (
	"strings"
	"testing"

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
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 8+len(errorKinds)+len(faultCauses) {
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
