package backfill

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atdata"

	"github.com/backstream/backstream/internal/citest"
)

var (
	benchFixturesMu sync.Mutex
	benchFixtures   = map[int]*fixture{}
)

func benchFixture(b testing.TB, n int) *fixture {
	benchFixturesMu.Lock()
	defer benchFixturesMu.Unlock()
	if f := benchFixtures[n]; f != nil {
		return f
	}
	f := buildFixture(b, fixtureSpec{posts: n})
	benchFixtures[n] = f
	return f
}

// consume touches every record the way an emitter would (collection, key,
// CID, bytes) without keeping any.
func consume(s *Snapshot) (int, error) {
	n := 0
	err := s.Records(func(r Record) error {
		n += len(r.Collection) + len(r.RKey) + len(r.CBOR)
		if !r.CID.Defined() {
			return fmt.Errorf("undefined CID")
		}
		return nil
	})
	return n, err
}

// BenchmarkVerify: the whole per-repository cost, verification plus one
// iteration of every record.
func BenchmarkVerify(b *testing.B) {
	for _, n := range []int{20, 200} {
		b.Run(fmt.Sprintf("records=%d", n), func(b *testing.B) {
			f := benchFixture(b, n)
			car := f.car(b)
			b.SetBytes(int64(len(car)))
			b.ReportAllocs()
			var ms0, ms1 runtime.MemStats
			runtime.ReadMemStats(&ms0)
			b.ResetTimer()
			for b.Loop() {
				s, err := VerifyBytes(context.Background(), car, f.did, VerifyOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := consume(s); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&ms1)
			recs := float64(b.N) * float64(n)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/recs, "ns/record")
			b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/recs, "allocs/record")
		})
	}
}

// BenchmarkRecordsIterate: iteration alone over a verified snapshot.
func BenchmarkRecordsIterate(b *testing.B) {
	f := benchFixture(b, 200)
	s, err := VerifyBytes(context.Background(), f.car(b), f.did, VerifyOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := consume(s); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*200), "ns/record")
}

// BenchmarkRecordCheck compares the structural scan with atdata decoding,
// the choice behind VerifyOptions.StrictRecords.
func BenchmarkRecordCheck(b *testing.B) {
	body := fixtureBody(b, 12345)
	b.Run("scan", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !WellFormedRecord(body) {
				b.Fatal("rejected")
			}
		}
	})
	b.Run("atdata", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := atdata.UnmarshalCBOR(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// heapSampler records the peak of live heap objects while it runs.
type heapSampler struct {
	stop chan struct{}
	done chan struct{}
	peak uint64
}

func startHeapSampler() *heapSampler {
	h := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(h.done)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			h.peak = max(h.peak, sample[0].Value.Uint64())
			select {
			case <-h.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return h
}

func (h *heapSampler) Stop() uint64 {
	close(h.stop)
	<-h.done
	return h.peak
}

func heapLive() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestVerifyLargeRepoMemory: a 100k-record repository read from a file.
// Retained memory is about the CAR itself, the peak stays within a small
// multiple of it, and iterating allocates a constant per record.
func TestVerifyLargeRepoMemory(t *testing.T) {
	citest.Long(t, "builds a 100k-record repository")
	const n = 100_000
	p := filepath.Join(t.TempDir(), "big.car")
	did := writeFixtureFile(t, p, n) // the fixture is garbage once written
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	carBytes := uint64(fi.Size())
	fh, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()

	base := heapLive()
	h := startHeapSampler()
	start := time.Now()
	s, err := Verify(context.Background(), fh, did, VerifyOptions{})
	verifyTime := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	peakVerify := h.Stop() - base
	retained := heapLive() - base

	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	h = startHeapSampler()
	start = time.Now()
	if _, err := consume(s); err != nil {
		t.Fatal(err)
	}
	iterTime := time.Since(start)
	peakIter := h.Stop() - base
	runtime.ReadMemStats(&ms1)
	allocsPerRecord := float64(ms1.Mallocs-ms0.Mallocs) / n
	bytesPerRecord := float64(ms1.TotalAlloc-ms0.TotalAlloc) / n

	t.Logf("CAR %.1f MiB, %d blocks; verify %v (%.2f µs/record), iterate %v (%.2f µs/record)",
		float64(carBytes)/(1<<20), s.Blocks, verifyTime, float64(verifyTime.Microseconds())/n, iterTime, float64(iterTime.Microseconds())/n)
	t.Logf("heap above the pre-verify baseline: retained by the snapshot %.1f MiB (%.2f× CAR), peak during verify %.1f MiB, peak during iteration %.1f MiB",
		float64(retained)/(1<<20), float64(retained)/float64(carBytes), float64(peakVerify)/(1<<20), float64(peakIter)/(1<<20))
	t.Logf("iteration: %.2f allocs/record, %.0f bytes/record", allocsPerRecord, bytesPerRecord)

	if s.RecordCount != n {
		t.Fatalf("RecordCount %d", s.RecordCount)
	}
	if retained > carBytes*3/2 {
		t.Errorf("snapshot retains %d bytes for a %d-byte CAR", retained, carBytes)
	}
	if peakVerify > carBytes*3 {
		t.Errorf("verify peaked at %d bytes for a %d-byte CAR", peakVerify, carBytes)
	}
	// Two objects per record (key string, CID) beyond the record, which is
	// never copied: a copy of a ~150-byte record would break the byte bound.
	if allocsPerRecord > 3 || bytesPerRecord > 128 {
		t.Errorf("iteration allocates %.2f objects, %.0f bytes per record", allocsPerRecord, bytesPerRecord)
	}
	runtime.KeepAlive(s)
}

func writeFixtureFile(t *testing.T, path string, n int) string {
	f := buildFixture(t, fixtureSpec{posts: n})
	if err := os.WriteFile(path, f.car(t), 0o600); err != nil {
		t.Fatal(err)
	}
	return f.did
}
