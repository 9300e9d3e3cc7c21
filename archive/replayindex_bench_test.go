package archive

import (
	"testing"

	"github.com/cockroachdb/pebble"
)

// BenchmarkWriterIndexPath measures the writer's index path alone for a
// batch of 16,384 rows (the backfill shape: 64 rows an account, in a
// repo's order: four collections, each's rkeys ascending; the live shape:
// 2,000 accounts that recur): staging each row's entries, sorting them and
// Setting them in a batch, without and with the replay index.
// ns/row is the index's writer-side cost per row; the rest of what the
// replay index costs is Pebble's, flushing and compacting its keys.
func BenchmarkWriterIndexPath(b *testing.B) {
	for _, shape := range []string{"backfill", "live"} {
		evs := make([]Event, 16384)
		rows := make([][]byte, len(evs))
		for i := range evs {
			evs[i] = realisticEvent(i)
			evs[i].Seq = uint64(i + 1)
			if shape == "backfill" {
				evs[i].DID = didN(1_000_000 + i/64)
				evs[i].Collection = benchCollections[i%64/16]
			}
			var err error
			if rows[i], err = AppendEvent(nil, &evs[i]); err != nil {
				b.Fatal(err)
			}
		}
		run := func(b *testing.B, replay bool) {
			var buf []byte
			var idx []idxEntry
			var r replayBatch
			var t tombResolver
			for b.Loop() {
				bt := new(pebble.Batch)
				for i := range evs {
					buf, idx, _, _ = appendIndex(buf, idx, &evs[i], 300)
					if replay {
						r.add(&evs[i], rows[i])
					}
				}
				t.setIndex(bt, buf, idx)
				r.write(bt)
				buf, idx = buf[:0], idx[:0]
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(evs)), "ns/row")
		}
		b.Run(shape+"/compaction", func(b *testing.B) { run(b, false) })
		b.Run(shape+"/replay", func(b *testing.B) { run(b, true) })
	}
}

// benchCollections are four collections in key order.
var benchCollections = [4]string{"app.bsky.feed.like", "app.bsky.feed.post", "app.bsky.feed.repost", "app.bsky.graph.follow"}
