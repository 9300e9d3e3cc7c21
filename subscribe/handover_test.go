package subscribe

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/backstream/backstream/archive"
)

// TestHandoverEveryCursor (D2): a subscriber connected at every cursor
// position of a scripted stream, while events keep being committed, gets
// exactly the seqs from its cursor on — no gap, no duplicate, strictly
// increasing — across the hand-over from the archive to the live log. The
// live log holds only a few dozen events, so its floor moves under the
// subscribers and most of them replay from Pebble first.
func TestHandoverEveryCursor(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 24 << 10})
	const pre = 200
	for i := 0; i < pre; i += 10 {
		h.commit(genEvents(t, i, 10, 7)...)
	}
	if _, floor := h.w.Live().Read(0, nil, 1); floor < 120 {
		t.Fatalf("live floor %d: the log is not bounded enough for the test", floor)
	}

	// The producer commits batches of 1..4 events, a few per millisecond,
	// until every subscriber is done.
	ctx, stop := context.WithCancel(context.Background())
	var produced atomic.Int64
	produced.Store(pre)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			n := 1 + i%4
			evs := genEvents(t, int(produced.Load()), n, 7)
			if _, err := h.w.Apply(ctx, &archive.Unit{Events: evs}); err != nil {
				return
			}
			produced.Add(int64(n))
			time.Sleep(2 * time.Millisecond)
		}
	}()

	const extra = 60 // each subscriber reads this far past the tip it connected at
	var (
		wg    sync.WaitGroup
		sem   = make(chan struct{}, 6)
		mu    sync.Mutex
		fails []string
		pos   atomic.Int64
	)
	for cursor := uint64(0); cursor <= pre+3; cursor++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			tipBefore := h.w.Live().Tip()
			c := h.dial(fmt.Sprintf("?cursor=%d", cursor), nil)
			defer c.Close()
			target := tipBefore + extra
			got, err := readUntilErr(c, target)
			want := max(cursor, 1)
			switch {
			case err != nil:
			case cursor > tipBefore+1:
				// Beyond the tip: starts live, somewhere at or after it.
				if got[0] < tipBefore+1 {
					err = fmt.Errorf("live start %d below the tip %d", got[0], tipBefore)
				} else {
					err = checkContiguous(got, got[0], target)
				}
			default:
				err = checkContiguous(got, want, target)
			}
			if err != nil {
				mu.Lock()
				fails = append(fails, fmt.Sprintf("cursor %d (tip %d): %v", cursor, tipBefore, err))
				mu.Unlock()
			}
			pos.Add(1)
		}()
	}
	wg.Wait()
	stop()
	pwg.Wait()
	for _, f := range fails {
		t.Error(f)
	}
	replayed := testutil.ToFloat64(h.m.replay)
	live := testutil.ToFloat64(h.m.live)
	t.Logf("%d subscribers; %.0f events sent from the archive, %.0f from the live log; %d produced", pos.Load(), replayed, live, produced.Load())
	if replayed == 0 || live == 0 {
		t.Errorf("the test did not exercise both paths: replay %.0f, live %.0f", replayed, live)
	}
}

// TestHandoverFallBehindAndCatchUp (D2, D6): one subscriber that pauses
// while the live log moves far past it drops back to the archive and comes
// back to live, still contiguous.
func TestHandoverFallBehindAndCatchUp(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 16 << 10})
	h.commit(genEvents(t, 0, 5, 3)...)
	c := h.dialSmall("") // live, with a small receive buffer so it backs up
	defer c.Close()
	first, _ := h.commit(genEvents(t, 5, 5, 3)...)
	got := readUntil(t, c, first+4)
	// Stall: 10,000 events go by, far more than the live log and the socket
	// buffers hold.
	for i := 10; i < 10010; i += 500 {
		h.commit(genEvents(t, i, 500, 3)...)
	}
	if _, floor := h.w.Live().Read(0, nil, 1); floor <= first+5 {
		t.Fatalf("live floor %d did not pass the subscriber", floor)
	}
	got = append(got, readUntil(t, c, 10010)...)
	_, last := h.commit(genEvents(t, 10010, 3, 3)...)
	got = append(got, readUntil(t, c, last)...)
	if err := checkContiguous(got, first, last); err != nil {
		t.Fatal(err)
	}
	if r := testutil.ToFloat64(h.m.replay); r == 0 {
		t.Fatal("the stalled subscriber never read from the archive")
	}
}

// TestHandoverFixedFloor (D2): with the live log's floor standing still,
// a subscriber at every cursor below, at and above it reads the archive up
// to the floor and the live log from there, contiguous.
func TestHandoverFixedFloor(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 24 << 10})
	for i := 0; i < 240; i += 8 {
		h.commit(genEvents(t, i, 8, 5)...)
	}
	tip := h.w.Live().Tip()
	_, floor := h.w.Live().Read(0, nil, 1)
	if floor < 100 || floor > tip {
		t.Fatalf("floor %d, tip %d", floor, tip)
	}
	for cursor := uint64(0); cursor <= tip; cursor++ {
		c := h.dial(fmt.Sprintf("?cursor=%d", cursor), nil)
		got := readUntil(t, c, tip)
		c.Close()
		if err := checkContiguous(got, max(cursor, 1), tip); err != nil {
			t.Fatalf("cursor %d (floor %d): %v", cursor, floor, err)
		}
	}
	if testutil.ToFloat64(h.m.live) == 0 || testutil.ToFloat64(h.m.replay) == 0 {
		t.Fatal("both paths should serve")
	}
}
