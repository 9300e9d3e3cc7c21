package backfill

// job_memory.go owns the memory budget of concurrent CAR preparation: a
// byte-weighted semaphore over the CARs being verified and emitted (E5). A
// download streams to a scratch file and costs no memory; a job acquires its
// CAR's size before reading the file into memory and releases it when its
// last unit is durable (so rows queued at the writer are covered too). A CAR
// larger than the whole budget acquires the whole budget: it runs alone,
// never starved, because the semaphore is FIFO — once it waits, later
// smaller requests queue behind it.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// Memory is a byte budget for CAR preparation. Safe for concurrent use. A
// nil *Memory is an unbounded budget.
type Memory struct {
	budget  int64
	sem     *semaphore.Weighted
	metrics *Metrics

	mu   sync.Mutex
	held int64
	peak int64
}

// Bounds of DefaultMemoryBudget.
const (
	maxAutoBudget = 8 << 30
	minAutoBudget = 256 << 20
)

// NewMemory returns a budget of budget bytes (at least 1).
func NewMemory(budget int64, m *Metrics) *Memory {
	budget = max(budget, 1)
	mem := &Memory{budget: budget, sem: semaphore.NewWeighted(budget), metrics: m}
	m.memory(0, budget)
	return mem
}

// Budget is the total in bytes.
func (m *Memory) Budget() int64 {
	if m == nil {
		return 0
	}
	return m.budget
}

// Held is the number of bytes currently admitted.
func (m *Memory) Held() int64 {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.held
}

// Peak is the most bytes ever admitted at once.
func (m *Memory) Peak() int64 {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// Acquire admits n bytes, waiting in FIFO order until they fit; n larger
// than the budget takes the whole budget. The returned release must be
// called exactly once (later calls are no-ops).
func (m *Memory) Acquire(ctx context.Context, n int64) (release func(), err error) {
	if m == nil {
		return func() {}, nil
	}
	w := min(max(n, 1), m.budget)
	start := time.Now()
	if err := m.sem.Acquire(ctx, w); err != nil {
		return nil, fmt.Errorf("backfill: memory budget: %w", err)
	}
	m.metrics.memoryWait(time.Since(start).Seconds())
	m.add(w)
	var once sync.Once
	return func() {
		once.Do(func() {
			m.add(-w)
			m.sem.Release(w)
		})
	}, nil
}

func (m *Memory) add(d int64) {
	m.mu.Lock()
	m.held += d
	m.peak = max(m.peak, m.held)
	held := m.held
	m.mu.Unlock()
	m.metrics.memory(held, m.budget)
}

// DefaultMemoryBudget sizes the budget from the memory available to the
// process: a quarter of the smaller of MemAvailable (/proc/meminfo) and the
// cgroup limit, clamped to [256 MiB, 8 GiB]. 1 GiB when neither is readable.
func DefaultMemoryBudget() int64 {
	avail := int64(-1)
	if v, ok := memAvailable(); ok {
		avail = v
	}
	if v, ok := cgroupLimit(); ok && (avail < 0 || v < avail) {
		avail = v
	}
	if avail < 0 {
		return 1 << 30
	}
	return min(max(avail/4, minAutoBudget), maxAutoBudget)
}

func memAvailable() (int64, bool) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "MemAvailable:") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			return 0, false
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil || kb <= 0 {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}

func cgroupLimit() (int64, bool) {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 || v >= 1<<60 {
			return 0, false
		}
		return v, true
	}
	return 0, false
}
