package archive

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cockroachdb/pebble"
)

// BenchmarkBottomLevelRead measures reads of a compacted store (everything
// in L6, the level store.go tunes for size): a hot point read of rev/<did>
// (the ratchet read of a live commit; blocks cached), a hot point read of
// ev/<seq> with decoding (an indexed replay reads each of its rows so) and
// a replay scan of ev/ with decoding. Use it to weigh L6 block size and restart interval
// against bytes per record (BenchmarkWriterWorldRecords, which also reports
// the cost of a block-cache miss on the real record mix: the synthetic rows
// here compress too well for that).
func BenchmarkBottomLevelRead(b *testing.B) {
	dir := b.TempDir()
	s, err := Open(dir, testOptions(nil))
	if err != nil {
		b.Fatal(err)
	}
	db := s.DB()
	const events, dids = 100_000, 20_000
	batch := db.NewBatch()
	ev := realisticEvent(0)
	var buf []byte
	for i := uint64(1); i <= events; i++ {
		ev.DID = didN(int(i % dids))
		ev.Seq, ev.TimeUS = i, 1700000000000000+int64(i) // the writer's stamps: the time reads back relative to the key's seq
		buf, _ = AppendEvent(buf[:0], &ev)
		_ = batch.Set(EventKey(i), buf, nil)
	}
	rev, _ := EncodeRev(ev.Rev)
	for i := 0; i < dids; i++ {
		_ = batch.Set(RevKey(didN(i)), rev, nil)
	}
	if err := batch.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		b.Fatal(err)
	}
	if err := db.Compact([]byte{0}, []byte{0xff}, true); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	// Pebble reserves memtable memory from the block cache: keep the
	// memtable small so the cache size below is what reads get.
	opts := testOptions(nil)
	opts.CacheSize, opts.MemTableSize = 256<<20, 1<<20
	if s, err = Open(dir, opts); err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	db = s.DB()
	b.Run("hot-rev-get", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < dids; i++ { // warm
			_, c, _ := db.Get(RevKey(didN(i)))
			c.Close()
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_, c, err := db.Get(RevKey(didN(rng.IntN(dids))))
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("hot-ev-get", func(b *testing.B) {
		get := func(seq uint64) {
			v, c, err := db.Get(EventKey(seq))
			if err != nil {
				b.Fatal(err)
			}
			var out Event
			if err := DecodeEvent(v, seq, &out); err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
		for seq := uint64(1); seq <= events; seq += 64 { // warm every block
			get(seq)
		}
		rng := rand.New(rand.NewPCG(1, 2))
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			get(1 + rng.Uint64N(events))
		}
	})
	b.Run("replay", func(b *testing.B) {
		it, err := db.NewIter(&pebble.IterOptions{LowerBound: PrefixEvent, UpperBound: prefixEnd(PrefixEvent)})
		if err != nil {
			b.Fatal(err)
		}
		defer it.Close()
		var out Event
		it.First()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if !it.Valid() {
				it.First()
			}
			seq, err := ParseSeqKey(PrefixEvent, it.Key())
			if err != nil {
				b.Fatal(err)
			}
			if err := DecodeEvent(it.Value(), seq, &out); err != nil {
				b.Fatal(fmt.Errorf("%x: %w", it.Key(), err))
			}
			it.Next()
		}
	})
}
