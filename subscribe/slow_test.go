package subscribe

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/internal/promtest"
)

// TestSlowConsumer (D6): among fast subscribers, one that stops reading
// altogether and one that reads slowly. The writer and the fast ones are
// unaffected; the slow reader falls back to the archive and still gets
// everything; only the stalled one — far behind and reading below the floor
// rate for the whole window — is closed, counted as too_slow. The slow
// reader starts reading only once the server reports two subscribers below
// the live log's floor (the stalled one and, at least, one that reads on),
// so a fall-back to the archive is certain however fast the producer runs.
func TestSlowConsumer(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 64 << 10, cfg: Config{
		SlowLag: 2000, SlowRate: 500, SlowWindow: 500 * time.Millisecond, WriteTick: 50 * time.Millisecond,
	}})
	h.commit(genEvents(t, 0, 10, 11)...)

	var fast []*websocket.Conn
	for i := 0; i < 3; i++ {
		fast = append(fast, h.dial("", nil))
	}
	// Each subscriber's start (the tip + 1) is resolved before its upgrade
	// is answered: once dialed, none can miss the events committed next.
	stalled := h.dialSmall("")
	slowReader := h.dialSmall("")
	defer stalled.Close()

	const total = 16000
	start := h.w.Live().Tip() + 1
	last := start + total - 1
	var wg sync.WaitGroup
	results := make([]error, len(fast)+1)
	for i, c := range fast {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := readUntilErr(c, last)
			if err == nil {
				err = checkContiguous(got, start, last)
			}
			results[i] = err
		}()
	}
	wg.Add(1)
	go func() {
		// ~8,000 events/s: slower than the producer, faster than the floor rate.
		defer wg.Done()
		for deadline := time.Now().Add(20 * time.Second); h.srv.Stats().Replaying < 2; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				results[len(fast)] = fmt.Errorf("slow reader: never two subscribers below the live floor: %+v", h.srv.Stats())
				return
			}
		}
		var got []uint64
		for {
			_ = slowReader.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, b, err := slowReader.ReadMessage()
			if err != nil {
				results[len(fast)] = fmt.Errorf("slow reader: %v after %d", err, len(got))
				return
			}
			var ev wireEvent
			_ = jsonUnmarshal(b, &ev)
			got = append(got, ev.Cursor)
			if len(got)%80 == 0 {
				time.Sleep(10 * time.Millisecond)
			}
			if ev.Cursor >= last {
				results[len(fast)] = checkContiguous(got, start, last)
				return
			}
		}
	}()

	t0 := time.Now()
	for i := 0; i < total; i += 500 {
		h.commit(genEvents(t, 10+i, 500, 11)...)
	}
	commitTime := time.Since(t0)
	wg.Wait()
	for i, err := range results {
		if err != nil {
			t.Errorf("subscriber %d: %v", i, err)
		}
	}
	t.Logf("committed %d events in %v", total, commitTime)

	// The stalled one is closed with a reason once the window has passed.
	promtest.Eventually(t, 10*time.Second, "a too_slow disconnect", func() bool {
		return metricValue(h.m.disconnects.WithLabelValues(ReasonTooSlow)) >= 1
	})
	if got := metricValue(h.m.disconnects.WithLabelValues(ReasonTooSlow)); got != 1 {
		t.Fatalf("too_slow disconnects %v, want exactly 1", got)
	}
	if metricValue(h.m.replay) == 0 {
		t.Error("nobody fell back to the archive")
	}
	// The stalled client, reading at last, finds its stream ends: events,
	// then a close frame naming the reason (or a reset if it never fit).
	var closeErr error
	for {
		_ = stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := stalled.ReadMessage(); err != nil {
			closeErr = err
			break
		}
	}
	if ce, ok := closeErr.(*websocket.CloseError); !ok || (ce.Code != closePolicy && ce.Code != websocket.CloseAbnormalClosure) {
		t.Errorf("stalled client: %v, want close 1008 or the socket closed", closeErr)
	}
	t.Logf("stalled client ended with: %v", closeErr)
	for _, c := range fast {
		c.Close()
	}
	slowReader.Close()
}

// TestShutdownClosesSubscribers: Close ends every subscriber with 1001 and
// waits for them.
func TestShutdownClosesSubscribers(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.commit(genEvents(t, 0, 10, 3)...)
	a := h.dial("?cursor=0", nil)
	b := h.dial("", nil)
	readUntil(t, a, 10)
	done := make(chan struct{})
	go func() { h.srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return")
	}
	for _, c := range []*websocket.Conn{a, b} {
		_, _, err := readEvent(t, c, 5*time.Second)
		ce, ok := err.(*websocket.CloseError)
		if !ok || ce.Code != closeGoingAway {
			t.Errorf("after Close: %v, want close 1001", err)
		}
	}
	if got := metricValue(h.m.disconnects.WithLabelValues(ReasonShutdown)); got != 2 {
		t.Errorf("shutdown disconnects %v", got)
	}
	if got := metricValue(h.m.subscribers); got != 0 {
		t.Errorf("subscribers gauge %v", got)
	}
}

// TestCursorAsTime: a cursor ≥ 10^15 is a unix-microsecond time: delivery
// starts at the first event at or after it; a time past the tip starts live.
func TestCursorAsTime(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := base
	h := newHarness(t, harnessOpts{now: func() time.Time { mu.Lock(); defer mu.Unlock(); return now }})
	var seqs []uint64
	for i := 0; i < 5; i++ {
		f, l := h.commit(genEvents(t, 3*i, 3, 4)...) // times now, now+1µs, now+2µs
		for s := f; s <= l; s++ {
			seqs = append(seqs, s)
		}
		mu.Lock()
		now = now.Add(time.Second)
		mu.Unlock()
	}
	for _, tc := range []struct {
		us   int64
		want uint64
	}{
		{base.UnixMicro() - 1, 1},
		{base.UnixMicro(), 1},
		{base.UnixMicro() + 1, 2},
		{base.UnixMicro() + 2, 3},
		{base.UnixMicro() + 3, 4},
		{base.Add(2 * time.Second).UnixMicro(), 7},
		{base.Add(2*time.Second).UnixMicro() + 2, 9},
		{base.Add(4*time.Second).UnixMicro() + 500, 16}, // past the tip: live
	} {
		// The cursor is resolved before the upgrade is answered: a time past
		// the tip has made the subscriber live by the time dial returns.
		c := h.dial(fmt.Sprintf("?cursor=%d", tc.us), nil)
		if tc.want > seqs[len(seqs)-1] {
			h.commit(genEvents(t, 100+int(tc.us%7), 1, 4)...)
		}
		ev, _, err := readEvent(t, c, 5*time.Second)
		c.Close()
		if err != nil || ev.Cursor != tc.want {
			t.Errorf("cursor time %d: first event %d (%v), want %d", tc.us, ev.Cursor, err, tc.want)
		}
		if err == nil && tc.want <= seqs[len(seqs)-1] && ev.TimeUS < tc.us {
			t.Errorf("cursor time %d: event at %d is older", tc.us, ev.TimeUS)
		}
	}
}

// TestResumeByTimeUS: a v1-style client keeps the time_us of the last event
// it handled and reconnects with it as the cursor, as the npm Jetstream
// clients do. The writer committed the events in big units under a frozen
// clock (one unit of 257, the most live events a batch held), so before
// every event had its own time the whole unit came again. Now Jetstream's
// rule holds exactly: a time cursor is inclusive, so the one event the
// client last saw comes again, then the ones after it, and nothing else.
func TestResumeByTimeUS(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	h := newHarness(t, harnessOpts{now: func() time.Time { return base }})
	first, _ := h.commit(genEvents(t, 0, 257, 9)...)
	_, last := h.commit(genEvents(t, 257, 40, 9)...)
	c := h.dial("?cursor=0", nil)
	var all []wireEvent
	for len(all) < int(last-first+1) {
		ev, _, err := readEvent(t, c, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(all); n > 0 && ev.TimeUS <= all[n-1].TimeUS {
			t.Fatalf("time_us %d at cursor %d after %d", ev.TimeUS, ev.Cursor, all[n-1].TimeUS)
		}
		all = append(all, ev)
	}
	c.Close()
	for _, k := range []int{0, 1, 100, 256, 257, len(all) - 1} {
		c := h.dial(fmt.Sprintf("?cursor=%d", all[k].TimeUS), nil)
		var got []uint64
		for len(got) < len(all)-k {
			ev, _, err := readEvent(t, c, 5*time.Second)
			if err != nil {
				t.Fatalf("resume at %d: %v", all[k].TimeUS, err)
			}
			got = append(got, ev.Cursor)
		}
		c.Close()
		if err := checkContiguous(got, all[k].Cursor, last); err != nil {
			t.Fatalf("resume from the time_us of cursor %d: %v", all[k].Cursor, err)
		}
	}
}

// TestStartCursorHeader: the upgrade answers where the stream starts
// (StartCursorHeader), a seq cursor that reproduces the stream: the live
// tip's next seq, a seq cursor (past the tip: the tip's next), or the first
// seq at or after a time cursor; the first event sent is at that seq.
func TestStartCursorHeader(t *testing.T) {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	h := newHarness(t, harnessOpts{now: func() time.Time { return base }})
	_, tip := h.commit(genEvents(t, 0, 5, 4)...) // times base, base+1µs, …
	for _, tc := range []struct {
		query string
		want  uint64 // 0: live, the tip's next seq when dialled
	}{
		{"", 0},
		{"?cursor=0", 1},
		{"?cursor=3", 3},
		{"?cursor=1000", 0},
		{fmt.Sprintf("?cursor=%d", base.UnixMicro()+2), 3},
	} {
		c, resp, err := (&websocket.Dialer{}).Dial(h.wsURL(tc.query), nil)
		if err != nil {
			t.Fatalf("dial %q: %v", tc.query, err)
		}
		got := resp.Header.Get(StartCursorHeader)
		want := tc.want
		if want == 0 {
			want = tip + 1
			_, tip = h.commit(genEvents(t, 10+int(tip), 1, 4)...)
		}
		ev, _, err := readEvent(t, c, 5*time.Second)
		c.Close()
		if got != strconv.FormatUint(want, 10) || err != nil || ev.Cursor != want {
			t.Errorf("%q: %s %q, first event %d (%v); want %d for both", tc.query, StartCursorHeader, got, ev.Cursor, err, want)
		}
	}
}
