package bootstrap

// slots.go owns prioritySlots, the request slots the hosts' listRepos
// requests share: a host that has answered in the run is served before a
// host that has not, and no slot is ever idle while a request waits.

import (
	"container/list"
	"context"
	"sync"
)

// prioritySlots is a counting semaphore of n slots with two classes of
// waiters, each served first come, first served: when a slot frees, the
// longest-waiting high request gets it, else the longest-waiting low one;
// a slot is free only when no request waits (work-conserving). A low
// request waits as long as high ones keep coming; in bootstrap the high
// ones are the next pages of hosts that have answered, a bounded listing
// each.
type prioritySlots struct {
	mu        sync.Mutex
	free      int
	size      int
	high, low list.List // of chan struct{}, closed when handed a slot
}

func newPrioritySlots(n int) *prioritySlots {
	s := &prioritySlots{free: n, size: n}
	s.high.Init()
	s.low.Init()
	return s
}

// Acquire takes a slot, waiting for one (in its class's queue) until ctx
// is done. On error it holds no slot: one handed to it as ctx ended is
// passed on.
func (s *prioritySlots) Acquire(ctx context.Context, high bool) error {
	s.mu.Lock()
	if s.free > 0 {
		s.free--
		s.mu.Unlock()
		return nil
	}
	q := &s.low
	if high {
		q = &s.high
	}
	ready := make(chan struct{})
	e := q.PushBack(ready)
	s.mu.Unlock()

	select {
	case <-ready:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	select {
	case <-ready:
		// Handed a slot as ctx ended: pass it on.
		s.mu.Unlock()
		s.Release()
	default:
		q.Remove(e)
		s.mu.Unlock()
	}
	return ctx.Err()
}

// Release gives back a slot taken by Acquire: to the first high waiter,
// else the first low one, else it is free.
func (s *prioritySlots) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range []*list.List{&s.high, &s.low} {
		if e := q.Front(); e != nil {
			close(q.Remove(e).(chan struct{}))
			return
		}
	}
	if s.free == s.size {
		panic("bootstrap: a request slot released that was not taken")
	}
	s.free++
}
