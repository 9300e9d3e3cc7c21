package archive

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/backstream/backstream/oracle/world"
)

// BenchmarkWriterWorldRecords writes the simulated network's real record mix
// (posts with facets and embeds, likes, follows, profiles, ...; ~216-byte
// CBOR on average) as backfill rows, one unit per repo chunk, then compacts
// and reports the bytes on disk per archived record (sstables only: keys,
// event envelope, CIDs; rev/ and repo/ keys are not written here). Run with
// -v to log where the bytes go (see size_test.go). The 2000x200 shape is the
// target shape (≤ 80 B/record); 2000x50 is quicker.
func BenchmarkWriterWorldRecords(b *testing.B) {
	for _, sh := range []struct{ accounts, mean int }{{2000, 50}, {2000, 200}} {
		b.Run(fmt.Sprintf("%dx%d", sh.accounts, sh.mean), func(b *testing.B) {
			benchWorldRecords(b, sh.accounts, sh.mean)
		})
	}
}

func benchWorldRecords(b *testing.B, accounts, mean int) {
	w0, units, records, recBytes := worldUnits(b, accounts, mean)
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		dir := b.TempDir()
		s, err := Open(dir, testOptions(nil))
		if err != nil {
			b.Fatal(err)
		}
		bd := writeWorld(b, s, units)
		b.ReportMetric(float64(bd.FileBytes)/float64(records), "disk-B/record")
		b.ReportMetric(float64(recBytes)/float64(records), "cbor-B/record")
		b.ReportMetric(float64(records), "records")
		if n == 0 {
			b.Log("\n" + bd.String())
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		replay, miss, hot := readCosts(b, dir, int64(records), w0)
		b.ReportMetric(replay, "replay-ns/event")
		b.ReportMetric(miss, "miss-get-ns/op")
		b.ReportMetric(hot, "rev-get-ns/op")
	}
}

// TestRecordIndexBudget: the record index of a bootstrapped store (the
// simulated network's record mix, archived as downloads archive it) costs
// at most 6 bytes per record on disk after a compaction, half the 12 the
// design allows it: its run entries fold the per-record entries (4.4 bytes
// a record on this 300-account world; 13.1 without runs).
func TestRecordIndexBudget(t *testing.T) {
	_, units, records, _ := worldUnits(t, 300, 100)
	s, err := Open(t.TempDir(), testOptions(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bd := writeWorld(t, s, units)
	perRecord := float64(bd.Family[string(PrefixRecord)]) / float64(records)
	t.Logf("%d records: rec/ %.1f B, the store %.1f B a record", records, perRecord, float64(bd.FileBytes)/float64(records))
	if perRecord > 6 {
		t.Fatalf("the record index costs %.1f B a record on disk, want at most 6", perRecord)
	}
}

// worldUnits builds the simulated network's records as backfill units, one
// per repo chunk of at most 1,024 records in MST order.
func worldUnits(tb testing.TB, accounts, mean int) (w0 *world.World, units []*Unit, records, recBytes int) {
	w0, err := world.Build(world.Config{Seed: 3, Accounts: accounts, RecordsMean: mean, Hosts: 4})
	if err != nil {
		tb.Fatal(err)
	}
	for _, acc := range w0.Accounts() {
		var evs []Event
		recs := w0.Records(acc.DID)
		// MST order (sorted paths), as backfill emits them.
		for _, path := range slices.Sorted(maps.Keys(recs)) {
			c := recs[path]
			rec, _ := w0.RecordBytes(acc.DID, path)
			i := 0
			for i < len(path) && path[i] != '/' {
				i++
			}
			evs = append(evs, Event{Kind: KindCreate, DID: acc.DID, Collection: path[:i], RKey: path[i+1:], Rev: acc.Rev, CID: c.Bytes(), Record: rec, Source: SourceBackfill})
			records++
			recBytes += len(rec)
			if len(evs) == 1024 {
				units = append(units, &Unit{Events: evs})
				evs = nil
			}
		}
		if len(evs) > 0 {
			units = append(units, &Unit{Events: evs})
		}
	}
	return w0, units, records, recBytes
}

// writeWorld archives copies of units through a writer on s, then compacts
// s and measures where its bytes are.
func writeWorld(tb testing.TB, s *Store, units []*Unit) sizeBreakdown {
	w, _ := NewWriter(s, WriterOptions{Logger: quietLogger, LiveLogBytes: 1 << 20})
	acks := NewAcks()
	for _, u := range units {
		c := *u
		c.Events = append([]Event(nil), u.Events...)
		c.Acks = acks
		if err := w.Submit(context.Background(), &c); err != nil {
			tb.Fatal(err)
		}
		acks.Drain(nil)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	bd, err := measureSizes(s)
	if err != nil {
		tb.Fatal(err)
	}
	return bd
}

// readCosts reopens the compacted store and measures read costs:
//   - replay: iterate ev/ and decode every event (ns per event), production
//     cache size;
//   - miss: point reads of random ev/ keys through a 4 MiB block cache,
//     far smaller than the store (ns per Get): the cost of a block-cache
//     miss for any point read (rev/, repo/ on a large archive). Pebble
//     reserves memtable memory from the block cache, so the memtable is
//     kept small here;
//   - hot: point reads of every rev/<did> (the ratchet read of a live
//     commit) once their blocks are cached (ns per Get).
func readCosts(b *testing.B, dir string, events int64, w0 *world.World) (replayNS, missNS, hotNS float64) {
	b.StopTimer()
	defer b.StartTimer()
	open := func(cache int64) *Store {
		opts := testOptions(nil)
		opts.CacheSize, opts.MemTableSize = cache, 1<<20
		s, err := Open(dir, opts)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	s := open(256 << 20)
	it, err := s.DB().NewIter(nil)
	if err != nil {
		b.Fatal(err)
	}
	var ev Event
	n := 0
	t0 := time.Now()
	for it.SeekGE(PrefixEvent); it.Valid() && hasPrefix(it.Key(), PrefixEvent); it.Next() {
		seq, err := ParseSeqKey(PrefixEvent, it.Key())
		if err != nil {
			b.Fatal(err)
		}
		if err := DecodeEvent(it.Value(), seq, &ev); err != nil {
			b.Fatal(err)
		}
		n++
	}
	replayNS = float64(time.Since(t0).Nanoseconds()) / float64(n)
	if err := it.Close(); err != nil {
		b.Fatal(err)
	}
	var keys [][]byte
	for _, acc := range w0.Accounts() {
		if len(w0.Records(acc.DID)) > 0 { // accounts without records have no ratchet
			keys = append(keys, RevKey(acc.DID))
		}
	}
	get := func(s *Store, k []byte) {
		_, closer, err := s.DB().Get(k)
		if err != nil {
			b.Fatalf("get %q: %v", k, err)
		}
		closer.Close()
	}
	for _, k := range keys { // warm the cache
		get(s, k)
	}
	const rounds = 20
	t1 := time.Now()
	for i := 0; i < rounds; i++ {
		for _, k := range keys {
			get(s, k)
		}
	}
	hotNS = float64(time.Since(t1).Nanoseconds()) / float64(rounds*len(keys))
	s.Close()

	s = open(4 << 20)
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	const gets = 5000
	t2 := time.Now()
	for i := 0; i < gets; i++ {
		get(s, EventKey(1+uint64(rng.Int64N(events))))
	}
	missNS = float64(time.Since(t2).Nanoseconds()) / gets
	return replayNS, missNS, hotNS
}
