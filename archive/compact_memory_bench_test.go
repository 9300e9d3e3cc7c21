package archive

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
)

// BenchmarkCompactLargeAccount measures what one pass holds while it
// removes the history of one very large account, per removed row: the
// peak live heap above the heap before the pass (sampled every
// millisecond with the GC at GOGC=25, so the live heap follows what the
// pass holds, not its garbage), the bytes it allocated, and its largest
// removal batch (CompactResult.LargestBatch). Shapes:
//
//   - named: N records created one by one (two collections alternating:
//     no run entries), then deleted: N named tombstones, one row each;
//   - unnamed: the same store rewritten as a writer before named
//     tombstones wrote it (the pass looks each record up in rec/);
//   - purge: N records downloaded (run entries of 4,096 creates), then
//     the account taken down: one account tombstone removes them all.
//
// N is BACKSTREAM_BENCH_ACCOUNT_ROWS (default 100,000 for named and
// unnamed, 10 times that for purge). Run with -benchtime=1x.
func BenchmarkCompactLargeAccount(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("BACKSTREAM_BENCH_ACCOUNT_ROWS")); err == nil && v > 0 {
		n = v
	}
	for _, shape := range []struct {
		name  string
		build func(b testing.TB, w *Writer, n int)
		n     int
	}{
		{"named", buildDeletedAccount, n},
		{"unnamed", buildDeletedAccount, n},
		{"purge", buildPurgedAccount, 10 * n},
	} {
		b.Run(fmt.Sprintf("%s/rows=%d", shape.name, shape.n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s, w := openBenchStore(b)
				shape.build(b, w, shape.n)
				if shape.name == "unnamed" {
					unnameBenchTombs(b, s)
				}
				settleBenchStore(b, s)
				b.StartTimer()
				res, peak, alloc, end := measurePass(b, s, w)
				b.StopTimer()
				if res.Rows < shape.n {
					b.Fatalf("the pass removed %d rows, want %d: %+v", res.Rows, shape.n, res)
				}
				rows := float64(res.Rows)
				b.ReportMetric(float64(peak)/rows, "held-B/row")
				b.ReportMetric(float64(end)/rows, "own-held-B/row")
				b.ReportMetric(float64(alloc)/rows, "alloc-B/row")
				b.ReportMetric(float64(res.LargestBatch)/rows, "batch-B/row")
				b.ReportMetric(rows, "rows")
				b.ReportMetric(float64(res.Batches), "batches")
				w.Close()
				s.Close()
			}
		})
	}
}

// openBenchStore opens an empty store on disk (an in-memory one would put
// its files in the heap the benchmark measures) with a writer.
func openBenchStore(b testing.TB) (*Store, *Writer) {
	s, err := Open(b.TempDir(), testOptions(nil))
	if err != nil {
		b.Fatal(err)
	}
	w, err := NewWriter(s, WriterOptions{Logger: quietLogger, LiveLogBytes: 1 << 20})
	if err != nil {
		s.Close()
		b.Fatal(err)
	}
	return s, w
}

// measurePass runs one pass and returns its result, the peak live heap
// above the live heap before it, the bytes it allocated, and the bytes
// the pass's own code (a compactPass method on the stack, no Pebble
// function) allocated and still holds when it logs its summary line: the
// log handler, on the pass's goroutine, reads the heap profile (every
// allocation sampled during the pass) after two GCs.
func measurePass(b testing.TB, s *Store, w *Writer) (res CompactResult, peak, alloc, own uint64) {
	defer debug.SetGCPercent(debug.SetGCPercent(25))
	defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
	samples := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/heap/allocs:bytes"}}
	runtime.GC()
	metrics.Read(samples)
	base, alloc0 := samples[0].Value.Uint64(), samples[1].Value.Uint64()
	peak = base
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
		for {
			metrics.Read(s)
			peak = max(peak, s[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	probe := &heapProbe{}
	runtime.MemProfileRate = 1
	res, err := s.Compact(context.Background(), w, CompactOptions{Logger: slog.New(probe), ReclaimBytes: -1})
	runtime.MemProfileRate = 512 << 10
	// The GC that follows the pass reports the live heap at its end.
	runtime.GC()
	close(done)
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	metrics.Read(samples)
	return res, peak - base, samples[1].Value.Uint64() - alloc0, probe.own
}

// heapProbe is a slog.Handler that sums, when it handles a record, the
// bytes in use that a compactPass method allocated, not through Pebble.
type heapProbe struct{ own uint64 }

func (h *heapProbe) Enabled(context.Context, slog.Level) bool { return true }
func (h *heapProbe) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *heapProbe) WithGroup(string) slog.Handler            { return h }

func (h *heapProbe) Handle(context.Context, slog.Record) error {
	// The profile is as of the GC before the last one.
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, false)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, false); ok {
			recs = recs[:n]
			break
		}
	}
	for _, r := range recs {
		if passOwns(r.Stack()) {
			h.own += uint64(r.InUseBytes())
		}
	}
	return nil
}

// passOwns reports whether stack is a compactPass method's allocation
// that no Pebble function made.
func passOwns(stack []uintptr) bool {
	pass := false
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		switch {
		case strings.Contains(f.Function, "cockroachdb/pebble"):
			return false
		case strings.Contains(f.Function, "archive.(*compactPass)"):
			pass = true
		}
		if !more {
			return pass
		}
	}
}

// buildDeletedAccount archives n records of one account created one by
// one, alternating two collections (no run entries), then their deletes.
func buildDeletedAccount(b testing.TB, w *Writer, n int) {
	rec := func(i int) (string, string) {
		return [2]string{"app.bsky.feed.like", "app.bsky.feed.post"}[i%2], fmt.Sprintf("3l%011d", i)
	}
	submitBench(b, w, n, func(i int) Event {
		c, r := rec(i)
		ev := commitEv(testDID, fmt.Sprintf("3m%011d", i), KindCreate, SourceLive, r)
		ev.Collection = c
		return ev
	})
	submitBench(b, w, n, func(i int) Event {
		c, r := rec(i)
		ev := commitEv(testDID, fmt.Sprintf("3n%011d", i), KindDelete, SourceLive, r)
		ev.Collection = c
		return ev
	})
}

// buildPurgedAccount archives n records of one account as a download
// archives them (units of 4,096 creates of one collection in rkey order:
// run entries), then takes the account down.
func buildPurgedAccount(b testing.TB, w *Writer, n int) {
	submitBench(b, w, n, func(i int) Event {
		return commitEv(testDID, fmt.Sprintf("3m%011d", i), KindCreate, SourceBackfill, fmt.Sprintf("3l%011d", i))
	})
	submitBench(b, w, 1, func(int) Event {
		return Event{Kind: KindAccount, DID: testDID, Status: "takendown", Source: SourceLive}
	})
}

// submitBench archives the n events ev(0..n-1) in units of 4,096 and
// waits until they are durable.
func submitBench(b testing.TB, w *Writer, n int, ev func(int) Event) {
	ctx := context.Background()
	acks := NewAcks()
	units := 0
	for i := 0; i < n; i += 4096 {
		evs := make([]Event, 0, min(4096, n-i))
		for j := i; j < min(i+4096, n); j++ {
			evs = append(evs, ev(j))
		}
		if err := w.Submit(ctx, &Unit{Events: evs, Acks: acks, Token: len(evs)}); err != nil {
			b.Fatal(err)
		}
		units++
	}
	rs, err := acks.Wait(ctx, w, units)
	if err != nil {
		b.Fatal(err)
	}
	for _, r := range rs {
		if r.Refused != nil || r.Kept != r.Token.(int) {
			b.Fatalf("a build unit was not archived: %+v", r)
		}
	}
}

// TestCompactLargeAccountHoldsItsBatch: a pass removing the history of
// one large account (the deletes of its 50,000 records; or its 200,000
// downloaded records, then its takedown) holds, beyond its removal batch,
// less than 4 bytes per removed row when it ends (what its own code
// allocated and still holds): not the account's tombstones, nor a list of
// every row it removed (the live log holds few of them). (What the process holds at the pass's peak, the
// batch with it, is what BenchmarkCompactLargeAccount measures.)
func TestCompactLargeAccountHoldsItsBatch(t *testing.T) {
	citest.Long(t, "builds 300,000 rows")
	for _, shape := range []struct {
		name  string
		build func(b testing.TB, w *Writer, n int)
		n     int
	}{{"deletes", buildDeletedAccount, 50_000}, {"purge", buildPurgedAccount, 200_000}} {
		t.Run(shape.name, func(t *testing.T) {
			s, w := openBenchStore(t)
			defer s.Close()
			defer w.Close()
			shape.build(t, w, shape.n)
			settleBenchStore(t, s)
			res, peak, _, own := measurePass(t, s, w)
			rows := float64(res.Rows)
			t.Logf("%d rows: the pass's own code holds %.1f B/row; the process at the peak %.0f B/row; batch %.0f B/row", res.Rows,
				float64(own)/rows, float64(peak)/rows, float64(res.LargestBatch)/rows)
			if float64(own)/rows >= 4 {
				t.Fatalf("the pass's own code held %d bytes (%.1f per removed row) when it ended, want under 4 per row",
					own, float64(own)/rows)
			}
		})
	}
}
