package archive

import (
	"context"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/cputime"
)

// BenchmarkWriterHoldLatency measures what a large whole-repo replacement
// costs the live stream: while one account is replaced (5M records in
// 1024-row chunks, 4 in flight, as backfill submits them; 100k under
// -short; BACKSTREAM_BENCH_RECORDS overrides), a live producer submits one
// unit every 2 ms with cursor/relay, one in 50 of them for the replaced
// account (as a real firehose would), the others for 2,000 other accounts.
// It reports the Submit → receipt latency of the other accounts' units
// (p50, p99, max), the replacement's duration and the process CPU-seconds
// it took. Run with -benchtime=1x.
//
// It only uses the writer API that predates the per-account barrier,
// except setRelayCursor (writer_cursor_bench_test.go), so it can be run
// against an older writer with that one function swapped for a Put.
func BenchmarkWriterHoldLatency(b *testing.B) {
	records := 5_000_000
	if testing.Short() {
		records = 100_000
	}
	if v, err := strconv.Atoi(os.Getenv("BACKSTREAM_BENCH_RECORDS")); err == nil && v > 0 {
		records = v
	}
	for range b.N {
		benchHoldLatency(b, records)
	}
}

func benchHoldLatency(b *testing.B, records int) {
	s := openDiskStore(b)
	defer s.Close()
	w, err := NewWriter(s, WriterOptions{Logger: quietLogger, LiveLogBytes: 16 << 20})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	const (
		chunkRows = 1024
		inFlight  = 4
		replaced  = "did:plc:replacedreplacedreplaced"
		snapRev   = "2222222222222"
	)
	template := make([]Event, chunkRows)
	for i := range template {
		ev := realisticEvent(i)
		ev.DID, ev.Rev, ev.Source = replaced, snapRev, SourceRetry
		template[i] = ev
	}
	ctx := context.Background()
	job := NewAcks()
	chunk := func(n int, first, final bool) *Unit {
		evs := make([]Event, 0, n+1)
		if first {
			evs = append(evs, Event{Kind: KindSync, DID: replaced, Rev: snapRev, Source: SourceRetry})
		}
		evs = append(evs, template[:n]...)
		return &Unit{Events: evs, Acks: job, Replace: &Replacement{DID: replaced, Rev: snapRev, Final: final}}
	}
	waitJob := func() int {
		<-job.Ready()
		return len(job.Drain(nil))
	}
	// The first chunk opens the replacement before the live producer starts
	// (a live row of the account first would make the snapshot stale).
	if err := w.Submit(ctx, chunk(min(chunkRows, records), true, records <= chunkRows)); err != nil {
		b.Fatal(err)
	}
	waitJob()

	var (
		mu       sync.Mutex
		sent     = map[uint64]time.Time{}
		latency  []time.Duration
		replDone = make(chan struct{}) // the replacement's last unit is durable
		liveDone = make(chan struct{}) // the live producer has stopped
		collDone = make(chan struct{}) // every measured unit is durable
	)
	live := NewAcks()
	go func() { // collects the live receipts
		for {
			select {
			case <-live.Ready():
			case <-collDone:
				return
			}
			now := time.Now()
			mu.Lock()
			for _, r := range live.Drain(nil) {
				seq := r.Token.(uint64)
				if t, ok := sent[seq]; ok {
					latency = append(latency, now.Sub(t))
					delete(sent, seq)
				}
			}
			mu.Unlock()
		}
	}()
	go func() { // the live producer
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for seq := uint64(1); ; seq++ {
			select {
			case <-tick.C:
			case <-replDone:
				close(liveDone)
				return
			}
			ev := realisticEvent(int(seq))
			ev.Source, ev.Rev = SourceLive, revN(int(seq))
			u := &Unit{Events: []Event{ev}, Token: seq, Acks: live}
			if seq%50 == 0 {
				u.Events[0].DID = replaced
			} else {
				mu.Lock()
				sent[seq] = time.Now()
				mu.Unlock()
			}
			setRelayCursor(u, seq)
			if err := w.Submit(ctx, u); err != nil {
				b.Error(err)
				close(liveDone)
				return
			}
		}
	}()

	cpu0 := cputime.Process(b)
	start := time.Now()
	b.ResetTimer()
	submitted, received := 1, 1
	for left := records - chunkRows; left > 0; left -= chunkRows {
		for submitted-received >= inFlight {
			received += waitJob()
		}
		n := min(chunkRows, left)
		if err := w.Submit(ctx, chunk(n, false, left <= chunkRows)); err != nil {
			b.Fatal(err)
		}
		submitted++
	}
	for received < submitted {
		received += waitJob()
	}
	took := time.Since(start)
	cpu := (cputime.Process(b) - cpu0).Seconds()
	close(replDone)
	<-liveDone
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) {
		mu.Lock()
		n := len(sent)
		mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d live units not durable a minute after the replacement", n)
		}
	}
	close(collDone)
	b.StopTimer()
	mu.Lock()
	defer mu.Unlock()
	if len(latency) == 0 {
		b.Fatal("no live unit of another account became durable")
	}
	slices.Sort(latency)
	q := func(p float64) float64 { return latency[int(p*float64(len(latency)-1))].Seconds() * 1e3 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(float64(len(latency)), "live-units")
	b.ReportMetric(took.Seconds(), "replace-s")
	b.ReportMetric(cpu, "cpu-s")
}
