package archive

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backstream/backstream/internal/cputime"
)

// BenchmarkWriterLinger: a bootstrap's writer load on the real disk (a
// temp dir): 100 jobs, each submitting per account an ident/ put and its
// snapshot (9 rows and the repo update) and waiting for the snapshot to be
// durable, as backfill does, after 20 ms of its own work (a download and
// its verification; the 20,000 × 10 bootstrap's jobs take about 40 ms
// each). Without a linger and with BulkLinger, in
// alternating rounds (-count), reporting the process's CPU-µs and the
// synced batches per 1,000 accounts.
func BenchmarkWriterLinger(b *testing.B) {
	for _, c := range []struct {
		name   string
		linger time.Duration
	}{{"none", 0}, {"bulk", BulkLinger}} {
		b.Run(c.name, func(b *testing.B) { benchLinger(b, c.linger) })
	}
}

func benchLinger(b *testing.B, linger time.Duration) {
	const jobs, rows = 100, 9
	s := openDiskStore(b)
	defer s.Close()
	m := NewMetrics(prometheus.NewRegistry())
	w, err := NewWriter(s, WriterOptions{BulkLinger: linger, Metrics: m, Logger: quietLogger})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	ident, err := EncodeIdent(Ident{Key: "zQ3shYBDbcMoDEMtfSNBUMDtL6qE8TuX5UB2iECRqQg5NfMjr", PDS: "https://pds.example", FetchedUS: 1})
	if err != nil {
		b.Fatal(err)
	}
	accounts := b.N * 100
	next := make(chan int, jobs)
	go func() { // owned: ends once every account is handed out
		for i := range accounts {
			next <- i
		}
		close(next)
	}()
	ctx := context.Background()
	cpu0 := cputime.Process(b)
	b.ResetTimer()
	var wg sync.WaitGroup
	for range jobs {
		wg.Go(func() {
			for i := range next {
				time.Sleep(20 * time.Millisecond) // the job's download and verification
				did := didN(2_000_000 + i)
				if err := w.Submit(ctx, &Unit{Puts: []KV{{Key: IdentKey(did), Value: ident}}}); err != nil {
					b.Error(err)
					return
				}
				evs := make([]Event, rows)
				for j := range evs {
					evs[j] = realisticEvent(i*rows + j)
					evs[j].DID = did
				}
				up := RepoUpdate{DID: did, Func: func(cur RepoState, _ bool) (RepoState, bool) {
					cur.Status, cur.BackfillRev = StatusComplete, evs[0].Rev
					return cur, true
				}}
				if _, err := w.Apply(ctx, &Unit{Events: evs, Repos: []RepoUpdate{up}}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	cpu := (cputime.Process(b) - cpu0).Seconds()
	b.ReportMetric(cpu/float64(accounts)*1e6, "cpu-µs/account")
	b.ReportMetric(testutil.ToFloat64(m.batches)/float64(accounts)*1000, "syncs/1000accounts")
}
