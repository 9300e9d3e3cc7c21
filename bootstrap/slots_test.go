package bootstrap

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// state is what s holds: free slots and waiters of each class.
func (s *prioritySlots) state() (free, high, low int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.free, s.high.Len(), s.low.Len()
}

// TestPrioritySlotsOrder: a freed slot goes to the first high waiter,
// else the first low one, each class first come, first served; a slot is
// never left free while a request of either class waits.
func TestPrioritySlotsOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newPrioritySlots(2)
		for range 2 {
			if err := s.Acquire(context.Background(), false); err != nil {
				t.Fatal(err)
			}
		}
		var mu sync.Mutex
		var got []string
		for _, w := range []string{"low1", "high1", "low2", "high2", "low3"} {
			go func() {
				if err := s.Acquire(context.Background(), w[0] == 'h'); err != nil {
					t.Error(err)
				}
				mu.Lock()
				got = append(got, w)
				mu.Unlock()
			}()
			synctest.Wait() // each waiter queued before the next comes
		}
		if free, high, low := s.state(); free != 0 || high != 2 || low != 3 {
			t.Fatalf("both slots taken, 5 waiting: free %d, high waiting %d, low %d; want 0, 2, 3", free, high, low)
		}
		want := []string{"high1", "high2", "low1", "low2", "low3"}
		for i := range want {
			s.Release()
			synctest.Wait()
			mu.Lock()
			g := slices.Clone(got)
			mu.Unlock()
			if !slices.Equal(g, want[:i+1]) {
				t.Fatalf("after %d releases the slots went to %v, want %v", i+1, g, want[:i+1])
			}
		}
		// A low request with no high one waiting takes a slot that frees,
		// and one that finds a slot free takes it at once.
		for range 2 {
			s.Release()
		}
		if free, high, low := s.state(); free != 2 || high != 0 || low != 0 {
			t.Fatalf("everything released: free %d, high waiting %d, low %d; want 2, 0, 0", free, high, low)
		}
		if err := s.Acquire(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	})
}

// TestPrioritySlotsCancelWhileWaiting: a request whose context ends while
// it waits returns the context's error and holds no slot, leaves its queue,
// and a slot handed to it as its context ended goes on to the next waiter
// (or back to the free ones): none is lost, none taken twice.
func TestPrioritySlotsCancelWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newPrioritySlots(1)
		if err := s.Acquire(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		errs := make(chan error, 2)
		for _, high := range []bool{true, false} {
			go func() { errs <- s.Acquire(ctx, high) }()
		}
		synctest.Wait()
		cancel()
		for range 2 {
			if err := <-errs; !errors.Is(err, context.Canceled) {
				t.Fatalf("a waiter whose context was canceled: %v, want context.Canceled", err)
			}
		}
		if free, high, low := s.state(); free != 0 || high != 0 || low != 0 {
			t.Fatalf("two waiters canceled, the slot still held: free %d, high waiting %d, low %d; want 0, 0, 0", free, high, low)
		}
		s.Release()
		if free, _, _ := s.state(); free != 1 {
			t.Fatalf("the held slot released after the waiters left: %d free, want 1", free)
		}

		// The slot handed to a waiter in the same moment its context ends
		// (released, then canceled; or canceled, then released before the
		// waiter runs): either it holds the slot (nil), or it passed it on
		// to the next waiter.
		outcomes := map[string]int{}
		for i := range 200 {
			if err := s.Acquire(context.Background(), false); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			first, next := make(chan error, 1), make(chan error, 1)
			go func() { first <- s.Acquire(ctx, true) }()
			synctest.Wait()
			go func() { next <- s.Acquire(context.Background(), false) }()
			synctest.Wait()
			if i%2 == 0 {
				s.Release()
				cancel()
			} else {
				cancel()
				s.Release()
			}
			synctest.Wait()
			err := <-first
			select {
			case nerr := <-next:
				if err == nil || nerr != nil {
					t.Fatalf("the first waiter %v, the next %v: want the slot held by exactly one", err, nerr)
				}
				outcomes["passed on"]++
			default:
				if err != nil {
					t.Fatalf("the first waiter %v and the next still waiting: the slot lost", err)
				}
				outcomes["kept"]++
				s.Release() // the first's; the next takes it
				if nerr := <-next; nerr != nil {
					t.Fatal(nerr)
				}
			}
			s.Release()
			if free, high, low := s.state(); free != 1 || high != 0 || low != 0 {
				t.Fatalf("after %v: free %d, high waiting %d, low %d; want 1, 0, 0", outcomes, free, high, low)
			}
		}
		if outcomes["kept"] == 0 || outcomes["passed on"] == 0 {
			t.Fatalf("a slot handed as the context ended, 200 times: %v; want both outcomes", outcomes)
		}
	})
}

// TestPrioritySlotsManyGoroutines: 64 goroutines take and give back 4
// slots 300 times each, high or low at random, holding a slot for a
// moment or none, a third of their waits cut short by a context timing
// out; never more than 4 held at once, and in the end every slot free and
// no one waiting. In a synctest bubble, so a slot lost shows as a
// deadlock at once, not as a hang; under -race, the goroutines run on
// real threads.
func TestPrioritySlotsManyGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const size, goroutines, rounds = 4, 64, 300
		s := newPrioritySlots(size)
		var held, peak, acquired, canceled atomic.Int64
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 1))
				for range rounds {
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if r.IntN(3) == 0 {
						ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(50))*time.Microsecond)
					}
					err := s.Acquire(ctx, r.IntN(2) == 0)
					cancel()
					if err != nil {
						canceled.Add(1)
						continue
					}
					acquired.Add(1)
					n := held.Add(1)
					for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
					}
					if r.IntN(2) == 0 {
						time.Sleep(time.Duration(r.IntN(20)) * time.Microsecond)
					}
					held.Add(-1)
					s.Release()
				}
			})
		}
		wg.Wait()
		free, high, low := s.state()
		if peak.Load() > size || free != size || high != 0 || low != 0 {
			t.Fatalf("%d slots, %d goroutines: at most %d held at once, in the end free %d, waiting %d high and %d low; want at most %d, %d free, none waiting",
				size, goroutines, peak.Load(), free, high, low, size, size)
		}
		if acquired.Load() == 0 || canceled.Load() == 0 {
			t.Fatalf("acquired %d, canceled %d: want both", acquired.Load(), canceled.Load())
		}
		t.Logf("acquired %d, canceled while waiting %d, at most %d held", acquired.Load(), canceled.Load(), peak.Load())
	})
}
