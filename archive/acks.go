package archive

// This file owns Acks, the mailbox through which the writer tells a
// producer which of its units became durable, and Wait, the one way a
// producer waits for them.

import (
	"context"
	"fmt"
	"sync"
)

// Acks is a producer-owned mailbox of receipts. The writer appends and
// signals without ever blocking; the producer waits for its receipts with
// Wait. Ready and Drain serve a producer that listens for receipts inside
// its own event loop instead of waiting for a number of them.
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
	return a.take(dst, -1)
}

// Stopper is what Wait watches of a writer (*Writer, or a wrapper of it):
// Done is closed once the writer has stopped; Err then says why, nil after
// a clean Close.
type Stopper interface {
	Done() <-chan struct{}
	Err() error
}

var _ Stopper = (*Writer)(nil)

// Wait blocks until n receipts have arrived and returns them in commit
// order; receipts beyond n stay in the mailbox. A refused unit is a receipt
// like any other (Receipt.Refused).
//
// If w stops first, Wait returns the receipts that did arrive — those of
// the units committed just before the stop included — and an error that
// wraps w's error, or ErrClosed after a clean Close: never nil while fewer
// than n arrived. If ctx ends first, it returns the receipts so far and
// ctx.Err(). Receipts already waiting count in both cases: Wait fails only
// when fewer than n are there. n ≤ 0 returns at once.
func (a *Acks) Wait(ctx context.Context, w Stopper, n int) ([]Receipt, error) {
	var got []Receipt
	for {
		if got = a.take(got, n); len(got) >= n {
			return got, nil
		}
		select {
		case <-a.ready:
		case <-w.Done():
			// The writer pushes a batch's receipts before it can stop, so
			// this drain sees every receipt there will ever be.
			if got = a.take(got, n); len(got) >= n {
				return got, nil
			}
			err := w.Err()
			if err == nil {
				err = ErrClosed
			}
			return got, fmt.Errorf("archive: writer stopped with %d of %d receipts: %w", len(got), n, err)
		case <-ctx.Done():
			if got = a.take(got, n); len(got) >= n {
				return got, nil
			}
			return got, ctx.Err()
		}
	}
}

// take moves waiting receipts onto dst until dst holds n (n < 0: all of
// them). When some stay behind it signals Ready again, so the next Wait or
// listener sees them.
func (a *Acks) take(dst []Receipt, n int) []Receipt {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := len(a.q)
	if n >= 0 {
		k = min(k, max(n-len(dst), 0))
	}
	dst = append(dst, a.q[:k]...)
	rest := copy(a.q, a.q[k:])
	clear(a.q[rest:])
	a.q = a.q[:rest]
	if rest > 0 && k > 0 {
		a.signal()
	}
	return dst
}

func (a *Acks) push(r Receipt) {
	a.mu.Lock()
	a.q = append(a.q, r)
	a.mu.Unlock()
	a.signal()
}

func (a *Acks) signal() {
	select {
	case a.ready <- struct{}{}:
	default:
	}
}

// TokenOf returns r's token as the T its producer submitted. A token of
// another type — or none — is an error naming both types, never a zero
// value a producer could mistake for a real token.
func TokenOf[T any](r Receipt) (T, error) {
	t, ok := r.Token.(T)
	if !ok {
		return t, fmt.Errorf("archive: receipt token is %T, want %T", r.Token, t)
	}
	return t, nil
}
