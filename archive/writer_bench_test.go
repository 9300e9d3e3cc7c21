package archive

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/cputime"
)

// BenchmarkWriter measures sustained group-commit throughput on the real
// disk (a temp dir): producers submit units of 64 realistic events as fast
// as the writer takes them. Report events/s and CPU-seconds per million.
// BACKSTREAM_BENCH_EVENTS (default b.N) sets the total; run with e.g.
// BACKSTREAM_BENCH_EVENTS=10000000 -benchtime=1x for the sustained figure.
func BenchmarkWriter(b *testing.B) {
	total := b.N
	if v, err := strconv.Atoi(os.Getenv("BACKSTREAM_BENCH_EVENTS")); err == nil && v > 0 {
		total = v
	}
	for _, shape := range []string{"backfill", "live", "live-deletes", "backfill-deletes"} {
		for _, rows := range []int{1024, 4096, 16384} {
			b.Run(shape+"/batch"+strconv.Itoa(rows), func(b *testing.B) { benchWriter(b, total, rows, shape) })
		}
	}
}

// benchWriter: the backfill shape submits units of 64 rows of one repo, every
// repo new (ratchet reads miss: the bloom-filter path); the live shape
// submits units of 64 rows of 64 accounts out of 2,000 that recur; the
// live-deletes shape is live with every record new and one row in ten a
// delete of an earlier record picked at random (its tombstone names the
// create: a read of rec/, in the memtable or not); the backfill-deletes
// shape is backfill, each unit followed by a live unit of 7 deletes of
// earlier records picked at random (records of a run entry: the tombstone
// names the create after a hash match and a read of its ev/ row).
func benchWriter(b *testing.B, total, maxRows int, shape string) {
	backfill, deletes := shape == "backfill" || shape == "backfill-deletes", shape == "live-deletes"
	bfDeletes := shape == "backfill-deletes"
	rng := rand.New(rand.NewPCG(1, 2))
	s := openDiskStore(b)
	defer s.Close()
	w, err := NewWriter(s, WriterOptions{MaxBatchRows: maxRows, Logger: quietLogger, LiveLogBytes: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	const unit = 64
	template := make([]Event, 4096)
	for i := range template {
		template[i] = realisticEvent(i)
	}
	ctx := context.Background()
	cpu0 := cputime.Process(b)
	start := time.Now()
	b.ResetTimer()
	acks := NewAcks()
	submitted := 0
	var created [][2]string // backfill-deletes: (DID, rkey) of every create
	for submitted < total {
		n := min(unit, total-submitted)
		evs := make([]Event, n)
		for j := range evs {
			evs[j] = template[(submitted+j)%len(template)]
			if backfill {
				evs[j].DID = didN(1_000_000 + submitted/unit)
				if bfDeletes {
					evs[j].RKey = benchRKey(submitted + j)
					created = append(created, [2]string{evs[j].DID, evs[j].RKey})
				}
			} else {
				evs[j].Source = SourceLive
				evs[j].Rev = revN(submitted + j)
			}
			if i := submitted + j; deletes {
				evs[j].RKey = benchRKey(i)
				if i%10 == 9 {
					k := rng.IntN(i)
					k -= k % 10 // a create
					evs[j] = Event{Kind: KindDelete, DID: template[k%len(template)].DID, Collection: template[0].Collection,
						RKey: benchRKey(k), Rev: evs[j].Rev, Source: SourceLive}
				}
			}
		}
		if err := w.Submit(ctx, &Unit{Events: evs, Acks: acks}); err != nil {
			b.Fatal(err)
		}
		submitted += n
		if bfDeletes && submitted < total {
			dels := make([]Event, min(7, total-submitted))
			for j := range dels {
				c := created[rng.IntN(len(created))]
				dels[j] = Event{Kind: KindDelete, DID: c[0], Collection: template[0].Collection,
					RKey: c[1], Rev: revN(submitted + j), Source: SourceLive}
			}
			if err := w.Submit(ctx, &Unit{Events: dels, Acks: acks}); err != nil {
				b.Fatal(err)
			}
			submitted += len(dels)
		}
		acks.Drain(nil)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	el := time.Since(start)
	cpu := (cputime.Process(b) - cpu0).Seconds()
	b.ReportMetric(float64(total)/el.Seconds(), "events/s")
	b.ReportMetric(cpu/float64(total)*1e6, "cpu-s/Mevents")
	if total >= 100000 {
		// Bytes per event on disk after a manual compaction.
		if err := s.DB().Compact(PrefixEvent, prefixEnd(PrefixEvent), true); err != nil {
			b.Fatal(err)
		}
		m := s.DB().Metrics()
		var size int64
		for _, l := range m.Levels {
			size += l.Size
		}
		b.ReportMetric(float64(size)/float64(total), "disk-B/event")
		b.ReportMetric(float64(len(template[0].Record)), "record-B")
	}
}

// openDiskStore opens a store on the real disk (a temp dir) with a 64 MiB
// cache, for the writer's benchmarks.
func openDiskStore(b *testing.B) *Store {
	b.Helper()
	opts := testOptions(nil)
	opts.CacheSize = 64 << 20
	s, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func benchRKey(i int) string { return "3l" + strconv.FormatInt(int64(1e10+i), 10) }

func BenchmarkEventEncode(b *testing.B) {
	ev := realisticEvent(1)
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		buf, _ = AppendEvent(buf[:0], &ev)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkEventDecode(b *testing.B) {
	ev := realisticEvent(1)
	buf, _ := AppendEvent(nil, &ev)
	var out Event
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := DecodeEvent(buf, ev.Seq, &out); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
}

// revN is a rev that increases with i (fixed-width, so string order = numeric order).
func revN(i int) string { return "3m" + strconv.FormatInt(int64(1e10+i), 10) }
