package archive

// This file owns Acks, the mailbox through which the writer tells a
// producer which of its units became durable.

import "sync"

// Acks is a producer-owned mailbox of receipts. The writer appends and
// signals without ever blocking; the producer waits on Ready and drains.
type Acks struct {
	mu    sync.Mutex
	q     []Receipt
	ready chan struct{}
}

// NewAcks returns an empty mailbox.
func NewAcks() *Acks { return &Acks{ready: make(chan struct{}, 1)} }

// Ready is signalled (capacity 1, coalescing) when receipts are waiting.
func (a *Acks) Ready() <-chan struct{} { return a.ready }

// Drain appends the waiting receipts to dst, in commit order, and empties the mailbox.
func (a *Acks) Drain(dst []Receipt) []Receipt {
	a.mu.Lock()
	dst = append(dst, a.q...)
	a.q = a.q[:0]
	a.mu.Unlock()
	return dst
}

func (a *Acks) push(r Receipt) {
	a.mu.Lock()
	a.q = append(a.q, r)
	a.mu.Unlock()
	select {
	case a.ready <- struct{}{}:
	default:
	}
}
