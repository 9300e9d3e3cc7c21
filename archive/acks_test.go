package archive

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/internal/storefault"
)

// fakeWriter is a Stopper the test stops by hand.
type fakeWriter struct {
	done chan struct{}
	err  error
}

func newFakeWriter() *fakeWriter { return &fakeWriter{done: make(chan struct{})} }

func (f *fakeWriter) Done() <-chan struct{} { return f.done }
func (f *fakeWriter) Err() error            { return f.err }
func (f *fakeWriter) stop(err error)        { f.err = err; close(f.done) }

// enqueue puts receipts in the mailbox without signalling Ready: a push
// whose signal the waiter has not seen yet.
func enqueue(a *Acks, tokens ...int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, tok := range tokens {
		a.q = append(a.q, Receipt{Token: tok})
	}
}

func pushTokens(a *Acks, tokens ...int) {
	for _, tok := range tokens {
		a.push(Receipt{Token: tok})
	}
}

func tokens(t *testing.T, rc []Receipt) []int {
	t.Helper()
	out := make([]int, len(rc))
	for i, r := range rc {
		tok, err := TokenOf[int](r)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = tok
	}
	return out
}

type waitResult struct {
	rc  []Receipt
	err error
}

func waitAsync(a *Acks, ctx context.Context, w Stopper, n int) chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		rc, err := a.Wait(ctx, w, n)
		ch <- waitResult{rc, err}
	}()
	return ch
}

// TestWaitAcrossReadySignals: n receipts arriving over several Ready
// signals come back together, in commit order, once the n-th is there;
// receipts beyond n stay in the mailbox and Ready says so.
func TestWaitAcrossReadySignals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, w := NewAcks(), newFakeWriter()
		res := waitAsync(a, context.Background(), w, 5)
		for _, batch := range [][]int{{0, 1}, {2}, {3}} {
			pushTokens(a, batch...)
			synctest.Wait() // the waiter took them and blocks again
			select {
			case r := <-res:
				t.Fatalf("Wait returned after %d receipts: %v", len(r.rc), r.err)
			default:
			}
		}
		enqueue(a, 4, 5)
		pushTokens(a, 6) // one signal for three receipts
		r := <-res
		if r.err != nil || !slices.Equal(tokens(t, r.rc), []int{0, 1, 2, 3, 4}) {
			t.Fatalf("Wait(5) = %v, %v", tokens(t, r.rc), r.err)
		}
		select {
		case <-a.Ready():
		default:
			t.Fatal("receipts left behind but Ready is not signalled")
		}
		if rest := a.Drain(nil); !slices.Equal(tokens(t, rest), []int{5, 6}) {
			t.Fatalf("left in the mailbox: %v, want [5 6]", tokens(t, rest))
		}
	})
}

// TestWaitWriterStopped: the writer stopping before n receipts arrived
// returns the receipts that did arrive — also one whose Ready signal lost
// the race with the stop — and a non-nil error wrapping the writer's
// (ErrClosed after a clean Close). All n there: no error, stop or not.
func TestWaitWriterStopped(t *testing.T) {
	fault := errors.New("disk on fire")
	for _, tc := range []struct {
		name  string
		cause error
		want  error
	}{{"fatal", fault, fault}, {"closed", nil, ErrClosed}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				a, w := NewAcks(), newFakeWriter()
				res := waitAsync(a, context.Background(), w, 4)
				pushTokens(a, 0, 1)
				synctest.Wait()
				enqueue(a, 2) // committed just before the stop; its signal unseen
				w.stop(tc.cause)
				r := <-res
				if !errors.Is(r.err, tc.want) {
					t.Fatalf("err = %v, want one wrapping %v", r.err, tc.want)
				}
				if !slices.Equal(tokens(t, r.rc), []int{0, 1, 2}) {
					t.Fatalf("receipts %v, want [0 1 2] (those that arrived)", tokens(t, r.rc))
				}
				if !strings.Contains(r.err.Error(), "3 of 4") {
					t.Fatalf("err %q does not say how many arrived", r.err)
				}
			})
		})
	}
	t.Run("all arrived", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			a, w := NewAcks(), newFakeWriter()
			res := waitAsync(a, context.Background(), w, 2)
			pushTokens(a, 0)
			synctest.Wait()
			enqueue(a, 1)
			w.stop(fault)
			if r := <-res; r.err != nil || len(r.rc) != 2 {
				t.Fatalf("Wait(2) with both receipts in = %d, %v; want 2, nil", len(r.rc), r.err)
			}
		})
	})
}

// TestWaitContext: ctx ending first returns ctx's error with the receipts
// so far; receipts already waiting when it ends still count.
func TestWaitContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, w := NewAcks(), newFakeWriter()
		ctx, cancel := context.WithCancel(context.Background())
		res := waitAsync(a, ctx, w, 3)
		pushTokens(a, 0)
		synctest.Wait()
		cancel()
		r := <-res
		if !errors.Is(r.err, context.Canceled) || !slices.Equal(tokens(t, r.rc), []int{0}) {
			t.Fatalf("canceled Wait = %v, %v; want [0], context.Canceled", tokens(t, r.rc), r.err)
		}

		ctx, cancel = context.WithCancel(context.Background())
		res = waitAsync(a, ctx, w, 2)
		pushTokens(a, 1)
		synctest.Wait()
		enqueue(a, 2)
		cancel()
		if r := <-res; r.err != nil || !slices.Equal(tokens(t, r.rc), []int{1, 2}) {
			t.Fatalf("Wait with both in at the cancel = %v, %v; want [1 2], nil", tokens(t, r.rc), r.err)
		}
	})
}

// TestWaitRealWriter: against the real writer, the receipt of the unit
// committed before a fatal commit fault comes back with the fault.
func TestWaitRealWriter(t *testing.T) {
	f := storefault.FailNthCommit("ev/", 2)
	s, err := Open("/data", hookOptions(vfs.NewMem(), f))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	acks := NewAcks()
	first := faultUnit(0)
	first.Token, first.Acks = 0, acks
	if err := w.Submit(ctx, first); err != nil {
		t.Fatal(err)
	}
	// Units apply in order: once this one is durable, so is the first.
	apply(t, w, &Unit{Cursor: SeqCursor{Key: KeyCursorMerge, Seq: 1}})
	second := faultUnit(1)
	second.Token, second.Acks = 1, acks
	if err := w.Submit(ctx, second); err != nil {
		t.Fatal(err)
	}
	rc, err := acks.Wait(ctx, w, 2)
	if !errors.Is(err, storefault.ErrInjected) || f.Fired() != 1 {
		t.Fatalf("Wait = %v (fault fired %d times), want the injected fault", err, f.Fired())
	}
	if !slices.Equal(tokens(t, rc), []int{0}) {
		t.Fatalf("receipts %v, want the first unit's", tokens(t, rc))
	}
}

// TestTokenOf: the submitted type comes back; another type or none is an
// error naming both, never a zero value.
func TestTokenOf(t *testing.T) {
	if v, err := TokenOf[uint64](Receipt{Token: uint64(7)}); err != nil || v != 7 {
		t.Fatalf("TokenOf[uint64](7) = %v, %v", v, err)
	}
	if _, err := TokenOf[int](Receipt{Token: uint64(7)}); err == nil || !strings.Contains(err.Error(), "uint64, want int") {
		t.Fatalf("TokenOf[int] of a uint64: %v", err)
	}
	if _, err := TokenOf[int](Receipt{}); err == nil || !strings.Contains(err.Error(), "<nil>") {
		t.Fatalf("TokenOf[int] of no token: %v", err)
	}
}
