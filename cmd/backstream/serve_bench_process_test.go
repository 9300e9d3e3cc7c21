package main

// The bootstrap benchmark: the real binary bootstraps a
// simulated network; reported are the serve process's own CPU seconds
// (user+sys from its rusage: the network runs in the test process), records
// per CPU-second, records per wall second (backfill_started_at to
// backfill_completed_at), peak RSS, and store bytes per record. The process
// is stopped by the merging-committed crash point, so only bootstrap is
// measured. Opt-in: BENCH_SHAPES=2000x200,20000x50 (accounts x mean
// records); BENCH_HEAP=path saves a heap profile at the peak RSS seen.

import (
	"context"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/procstat"
	"github.com/backstream/backstream/oracle"
)

// scrape reads one unlabelled metric from /metrics on the admin listener
// (0 when unavailable).
func scrape(listen, name string) float64 {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + listen + "/metrics")
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// saveHeap writes the running process's heap profile (from the admin
// listener) to path.
func saveHeap(listen, path string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + listen + "/debug/pprof/heap")
	if err != nil {
		return
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		_ = os.WriteFile(path, b, 0o644)
	}
}

func TestBootstrapBenchmark(t *testing.T) {
	shapes := os.Getenv("BENCH_SHAPES")
	if shapes == "" || testing.Short() {
		t.Skip("opt-in: BENCH_SHAPES=2000x200,20000x50")
	}
	bin := buildBinary(t)
	for _, shape := range strings.Split(shapes, ",") {
		a, r, ok := strings.Cut(strings.TrimSpace(shape), "x")
		accounts, err1 := strconv.Atoi(a)
		records, err2 := strconv.Atoi(r)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("shape %q: want ACCOUNTSxRECORDS", shape)
		}
		t.Run(shape, func(t *testing.T) {
			n, err := oracle.Start(context.Background(), oracle.Config{Accounts: accounts, RecordsMean: records, Hosts: 4, Seed: 1, Traffic: oracle.TrafficNone})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			dir := t.TempDir()
			// Stop right after phase=merging is durable: bootstrap only. The
			// network sends no firehose traffic, so capture is not waited for.
			p := startServeEnv(t, bin, n.RelayURL(), dir, []string{"BACKSTREAM_CRASHPOINT=merging-committed"}, append(followArgs(n), "--capture-wait", "1ms")...)
			var peakHeap, peakRSS float64
			var peakHWM int64
			var runErr error
		poll:
			for {
				select {
				case runErr = <-p.done:
					break poll
				case <-time.After(200 * time.Millisecond):
				}
				heap, rss := scrape(p.admin, "go_memstats_heap_inuse_bytes"), scrape(p.admin, "process_resident_memory_bytes")
				peakHeap = max(peakHeap, heap)
				// (unreadable, 0: the process may have just exited)
				if hwm, err := procstat.PeakRSS(p.cmd.Process.Pid); err == nil && hwm > 0 {
					peakHWM = hwm
				}
				if rss > peakRSS {
					peakRSS = rss
					if out := os.Getenv("BENCH_HEAP"); out != "" {
						saveHeap(p.admin, out)
					}
				}
			}
			if !killed(runErr) {
				t.Fatalf("serve did not stop at merging-committed: %v\n%s", runErr, p.tail())
			}
			t.Logf("%s: peak Go heap in use (sampled) %d MiB", shape, int64(peakHeap)>>20)
			ps := p.cmd.ProcessState
			cpu := ps.UserTime() + ps.SystemTime()
			// Not the rusage Maxrss: exec carries over the high-water mark of
			// the forking test process (which holds the whole network).
			rss := peakHWM
			s := readStore(t, dir)
			tip, _ := s.Tip()
			counts, _ := s.Counts()
			started, err1 := s.Time(archive.KeyBackfillStartedAt)
			completed, err2 := s.Time(archive.KeyBackfillCompleteAt)
			if err1 != nil || err2 != nil {
				t.Fatalf("backfill timestamps: %v %v", err1, err2)
			}
			wall := completed.Sub(started) // bootstrap alone, from the store's own record
			s.Close()
			var disk int64
			_ = filepath.WalkDir(filepath.Join(dir, "data", archive.StoreDir), func(_ string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					if fi, err := d.Info(); err == nil {
						disk += fi.Size()
					}
				}
				return nil
			})
			t.Logf("%s: %d records in %d complete repos; serve CPU %.2fs (user %.2fs sys %.2fs) = %.0f records/CPU-s; wall %.2fs = %.0f records/s; peak RSS %d MiB; store %d MiB = %.0f bytes/record",
				shape, tip, counts.Get(archive.StatusComplete), cpu.Seconds(), ps.UserTime().Seconds(), ps.SystemTime().Seconds(),
				float64(tip)/cpu.Seconds(), wall.Seconds(), float64(tip)/wall.Seconds(), rss>>20, disk>>20, float64(disk)/float64(tip))
		})
	}
}
