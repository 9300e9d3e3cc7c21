package world

import (
	"os"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/cputime"
)

// TestBuild_Speed10kx20: a 10,000-account world with 20 records per account
// on average builds in under 15 s.
func TestBuild_Speed10kx20(t *testing.T) {
	if os.Getenv("ORACLE_SPEED") == "" {
		t.Skip("a measurement of the world's build against the wall clock: ORACLE_SPEED=1 runs it")
	}
	cfg := Config{Seed: 1, Accounts: 10_000, RecordsMean: 20, Hosts: 4}
	cpu0, t0 := cputime.Process(t), time.Now()
	w := mustBuild(t, cfg)
	wall, cpu := time.Since(t0), cputime.Process(t)-cpu0
	total, biggest := 0, 0
	for _, a := range w.Accounts() {
		total += a.Records
		biggest = max(biggest, a.Records)
	}
	t.Logf("built %d accounts, %d records (biggest repo %d) in %s wall, %.1f CPU-s", cfg.Accounts, total, biggest, wall.Round(time.Millisecond), cpu.Seconds())
	if wall > 15*time.Second {
		t.Errorf("build took %s, want < 15s", wall)
	}
	// Lazily exported CARs: time exporting all of them once.
	t1 := time.Now()
	bytes := 0
	for _, a := range w.Accounts() {
		if b, _, err := w.RepoCAR(a.DID); err == nil {
			bytes += len(b)
		}
	}
	t.Logf("exported every CAR (%d MB) in %s", bytes>>20, time.Since(t1).Round(time.Millisecond))
}

func BenchmarkBuild(b *testing.B) {
	cfg := Config{Seed: 1, Accounts: 1000, RecordsMean: 20, Hosts: 4}
	for b.Loop() {
		if _, err := Build(cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(cfg.Accounts*cfg.RecordsMean)*float64(b.N)/b.Elapsed().Seconds(), "records/s")
}

func BenchmarkTraffic(b *testing.B) {
	w, err := Build(Config{Seed: 1, Accounts: 1000, RecordsMean: 20, Hosts: 4})
	if err != nil {
		b.Fatal(err)
	}
	tr := w.NewTraffic(TrafficFull, 1)
	for b.Loop() {
		if _, err := tr.Next(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRepoCAR(b *testing.B) {
	w, err := Build(Config{Seed: 1, Accounts: 100, RecordsMean: 200, Hosts: 4})
	if err != nil {
		b.Fatal(err)
	}
	accts := w.Accounts()
	i := 0
	for b.Loop() {
		a := accts[i%len(accts)]
		i++
		if _, _, err := w.RepoCAR(a.DID); err != nil && a.Status != StatusDeleted {
			b.Fatal(err)
		}
	}
}
