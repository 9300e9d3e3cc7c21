package archive

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/internal/cputime"
)

// BenchmarkFillIndex measures the index backfill of an older store: the
// archive of BenchmarkCompact (BACKSTREAM_BENCH_EVENTS record rows, default
// 1,000,000, 1% of the records then deleted), its rec/ and tomb/ removed and
// meta/index set to cover nothing, settled; then FillIndex to the end:
// rows/s and the process's CPU-seconds per million rows. Run with
// -benchtime=1x.
func BenchmarkFillIndex(b *testing.B) {
	total := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("BACKSTREAM_BENCH_EVENTS")); err == nil && v > 0 {
		total = v
	}
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		s, w := buildBenchArchive(b, total, 100)
		if err := w.Close(); err != nil { // every queued unit committed: the tip is final
			b.Fatal(err)
		}
		tip, err := s.Tip()
		if err != nil {
			b.Fatal(err)
		}
		batch := s.DB().NewBatch()
		_ = batch.DeleteRange(PrefixRecord, prefixEnd(PrefixRecord), nil)
		_ = batch.DeleteRange(PrefixTomb, prefixEnd(PrefixTomb), nil)
		_ = batch.Set(KeyIndex, EncodeIndexMarker(IndexMarker{Next: 1, End: tip + 1}), nil)
		if err := batch.Commit(pebble.Sync); err != nil {
			b.Fatal(err)
		}
		if err := s.DB().Compact([]byte{0}, []byte{0xff}, true); err != nil {
			b.Fatal(err)
		}
		cpu0 := cputime.Process(b)
		b.StartTimer()
		res, err := s.FillIndex(context.Background(), 0, nil)
		b.StopTimer()
		cpu := (cputime.Process(b) - cpu0).Seconds()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Rows)/res.Duration.Seconds(), "rows/s")
		b.ReportMetric(cpu/float64(res.Rows)*1e6, "cpu-s/Mrows")
		b.ReportMetric(float64(res.Batches), "batches")
		b.Logf("%d rows in %v (%d batches), %.2f CPU-s", res.Rows, res.Duration, res.Batches, cpu)
	}
}
