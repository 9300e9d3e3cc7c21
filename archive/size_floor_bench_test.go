//go:build cgo

// The block compression measured here is libzstd's (DataDog/zstd), which
// needs cgo; without cgo the package's other tests still build.

package archive

// How small ev/ rows can get under block compression: the simulated
// network's bootstrap rows (the 2,000 × 200 world, as the downloads write
// them) compressed in blocks of each size at each zstd level, as Pebble
// compresses a data block (Pebble v1 always uses level 3; its L6 blocks
// here are 64 KiB). Keys and Pebble's per-block overhead are left out, so
// these are lower bounds on the ev/ family's bytes. The rows' record
// bodies alone are reported beside them: they are the floor under any
// envelope.

import (
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/DataDog/zstd"
)

func BenchmarkEventBlockCompression(b *testing.B) {
	_, units, _, _ := worldUnits(b, 2000, 200)
	var rows, bodies [][]byte
	for _, u := range units {
		for i := range u.Events {
			ev := &u.Events[i]
			v, err := AppendEvent(nil, ev)
			if err != nil {
				b.Fatal(err)
			}
			rows = append(rows, v)
			bodies = append(bodies, ev.Record)
		}
	}
	for _, block := range []int{32 << 10, 64 << 10, 256 << 10, 1 << 20} {
		for _, level := range []int{1, 3, 9} {
			b.Run(fmt.Sprintf("block=%dKiB/zstd=%d", block>>10, level), func(b *testing.B) {
				for n := 0; n < b.N; n++ {
					b.ReportMetric(compressedPerItem(b, rows, block, level), "row-B/event")
					b.ReportMetric(compressedPerItem(b, bodies, block, level), "body-B/event")
				}
			})
		}
	}
}

// compressedPerItem packs items, each behind a uvarint length, into blocks
// of at least block bytes, compresses each block at the zstd level and
// returns the compressed bytes per item.
func compressedPerItem(tb testing.TB, items [][]byte, block, level int) float64 {
	var total int
	buf := make([]byte, 0, block+4096)
	flush := func() {
		if len(buf) == 0 {
			return
		}
		c, err := zstd.CompressLevel(nil, buf, level)
		if err != nil {
			tb.Fatal(err)
		}
		total += len(c)
		buf = buf[:0]
	}
	for _, it := range items {
		buf = binary.AppendUvarint(buf, uint64(len(it)))
		buf = append(buf, it...)
		if len(buf) >= block {
			flush()
		}
	}
	flush()
	return float64(total) / float64(len(items))
}
