package backfill_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/oracle"
)

// BenchmarkBootstrapVerify: every active repo of a simulated network
// backfilled by 8 concurrent jobs into a real store, with verification off
// and strict (resolution through the network's PLC endpoint, the durable
// ident/ rows, a signature check per repo). Reports records per CPU-second
// of the process (the network's own CPU included, alike in both modes) and
// network resolutions per repo. The world is BENCH_ACCOUNTS × BENCH_RECORDS
// (default 500 × 50).
func BenchmarkBootstrapVerify(b *testing.B) {
	accounts, records := envInt("BENCH_ACCOUNTS", 500), envInt("BENCH_RECORDS", 50)
	for _, mode := range []ident.Mode{ident.ModeOff, ident.ModeStrict} {
		b.Run(fmt.Sprintf("%s/%dx%d", mode, accounts, records), func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				e := newEnv(b, oracle.Config{Accounts: accounts, RecordsMean: records, Hosts: 4, Seed: 5, Traffic: oracle.TrafficNone})
				var id *ident.Resolver
				if mode != ident.ModeOff {
					id = e.resolver(mode)
				}
				r := e.runner(func(o *backfill.Options) { o.Identity, o.TrustedHosts = id, []string{e.relayHost()} })
				var dids []string
				for _, a := range e.accounts() {
					if a.Active {
						dids = append(dids, a.DID)
					}
				}
				b.StartTimer()
				cpu0, t0 := cputime.Process(b), time.Now()
				recs := runAll(b, r, dids, 8)
				cpu := cputime.Process(b) - cpu0
				b.ReportMetric(float64(recs)/cpu.Seconds(), "records/cpu-s")
				b.ReportMetric(float64(recs)/time.Since(t0).Seconds(), "records/s")
				b.ReportMetric(counter(b, e.reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"})/float64(len(dids)), "resolutions/repo")
			}
		})
	}
}

func runAll(b *testing.B, r *backfill.Runner, dids []string, workers int) int {
	var mu sync.Mutex
	total := 0
	next := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for did := range next {
				res, err := r.Run(context.Background(), backfill.Request{DID: did})
				if err != nil || res.Class != "" {
					b.Errorf("%s: %v %s", did, err, res.Class)
				}
				mu.Lock()
				total += res.Records
				mu.Unlock()
			}
		}()
	}
	for _, d := range dids {
		next <- d
	}
	close(next)
	wg.Wait()
	return total
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
