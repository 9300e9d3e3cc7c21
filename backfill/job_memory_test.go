package backfill

import (
	"context"
	"errors"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/promtest"
)

// peakPrepare runs one attempt (download, memory admission, verification)
// and one pass over the records, as the emitter does, and returns the peak
// of live heap above the baseline, sampled every millisecond with the
// collector kept tight so the sample is close to live bytes.
func peakPrepare(t *testing.T, src *fileSource, did string, budget int64) (peak uint64, records int, err error) {
	t.Helper()
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	r, err := NewRunner(Options{Source: src, Writer: nopWriter{}, Memory: NewMemory(budget, nil)})
	if err != nil {
		t.Fatal(err)
	}
	base := heapLive()
	h := startHeapSampler()
	p, err := r.attempt(context.Background(), did, "")
	if err == nil {
		err = p.snap.Records(func(Record) error { records++; return nil })
		p.release()
	}
	peak = h.Stop()
	peak -= min(base, peak)
	runtime.KeepAlive(p)
	return peak, records, err
}

// TestJobMemoryTrueBound (E5): the memory budget bounds what preparing a
// CAR holds, whatever the CAR: a CAR far larger than the budget is not read
// whole into memory (it is verified from its file), and a CAR of tiny blocks
// is charged for its block index, in memory or from its file. Measured as
// the peak of live heap while one job verifies and iterates the CAR,
// against what the job was charged (at most the budget); a CAR whose index
// alone exceeds the budget fails too_large instead.
func TestJobMemoryTrueBound(t *testing.T) {
	type tc struct {
		name     string
		blocks   int
		pad      int
		budget   int64
		fromFile bool
	}
	cases := []tc{
		{"large CAR", 8 << 10, 4 << 10, 4 << 20, true},         // 32 MiB of 4 KiB blocks, 4 MiB budget
		{"tiny blocks", 200_000, 8, 8 << 20, true},             // 200k blocks of 8 bytes (~9 MiB), 8 MiB budget
		{"tiny blocks in memory", 200_000, 8, 32 << 20, false}, // the same within a 32 MiB budget
		{"tiny blocks over budget", 200_000, 8, 2 << 20, true}, // its 3 MiB file index alone is over 2 MiB
	}
	if !testing.Short() {
		cases = []tc{
			{"large CAR", 64 << 10, 4 << 10, 32 << 20, true},          // 256 MiB, 32 MiB budget
			{"tiny blocks", 1_000_000, 8, 64 << 20, true},             // 1M blocks (~43 MiB), 64 MiB budget
			{"tiny blocks in memory", 1_000_000, 8, 160 << 20, false}, // the same within 160 MiB
			{"tiny blocks over budget", 1_000_000, 8, 8 << 20, true},  // its 16 MiB file index alone is over 8 MiB
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "repo.car")
			did, size := writePaddedCAR(t, path, c.blocks, c.pad)
			charge := min(c.budget, memoryCost(size, int64(c.blocks+52)))
			if (charge == c.budget) != c.fromFile {
				t.Fatalf("charge %d of budget %d: the case is not the mode it names", charge, c.budget)
			}
			src := &fileSource{path: path}
			peak, recs, err := peakPrepare(t, src, did, c.budget)
			if c.name == "tiny blocks over budget" {
				if !errors.Is(err, ErrOverBudget) || decide(err).class != ClassTooLarge {
					t.Fatalf("got %v, want over budget (too_large)", err)
				}
				t.Logf("CAR %.1f MiB, %d blocks, budget %.1f MiB: refused (%v); peak live heap %.1f MiB",
					float64(size)/(1<<20), c.blocks, float64(c.budget)/(1<<20), err, float64(peak)/(1<<20))
			} else if err != nil {
				t.Fatal(err)
			} else if recs != 50 {
				t.Fatalf("%d records, want 50", recs)
			} else {
				t.Logf("CAR %.1f MiB, %d blocks, budget %.1f MiB, charged %.1f MiB: peak live heap %.1f MiB (%.2f× the charge, %.2f× CAR)",
					float64(size)/(1<<20), c.blocks, float64(c.budget)/(1<<20), float64(charge)/(1<<20), float64(peak)/(1<<20),
					float64(peak)/float64(charge), float64(peak)/float64(size))
			}
			// Slack for the sampler (garbage not yet collected) and the
			// runtime's own allocations.
			if limit := uint64(charge) + uint64(charge)/8 + 1<<20; peak > limit {
				t.Errorf("peak live heap %d bytes, charged %d (limit with slack %d)", peak, charge, limit)
			}
		})
	}
}

// TestJobDeadlinePausesForMemory (E8): the attempt deadline covers the
// download and the verification, not the wait for memory: a job that waits
// longer than its whole deadline for the budget still verifies and succeeds.
func TestJobDeadlinePausesForMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "repo.car")
	did, _ := writePaddedCAR(t, path, 100, 8)
	src := &fileSource{path: path}
	mem := NewMemory(64<<20, nil)
	hold, err := mem.Acquire(context.Background(), 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	const deadline = 100 * time.Millisecond
	r, err := NewRunner(Options{Source: src, Writer: nopWriter{}, Memory: mem, AttemptTimeout: deadline})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		p, err := r.attempt(context.Background(), did, "")
		if err == nil {
			p.release()
		}
		done <- err
	}()
	promtest.Eventually(t, 10*time.Second, "the download", func() bool { return src.n.Load() == 1 })
	time.Sleep(3 * deadline) // the job waits for memory past its whole deadline
	hold()
	if err := <-done; err != nil {
		t.Fatalf("a job that waited for memory failed: %v", err)
	}
}
