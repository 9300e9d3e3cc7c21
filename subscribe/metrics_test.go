package subscribe

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/promtest"
)

// TestMetricsPreinitialised: right after NewMetrics every series of a
// closed label set exists at 0 (the disconnect-reason panels and alerts see
// 0, not "no data").
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	promtest.RequireZero(t, reg, "backstream_subscribe_events_sent_total", promtest.Label("path", "live", "replay")...)
	promtest.RequireZero(t, reg, "backstream_subscribe_disconnects_total", promtest.Label("reason",
		ReasonClientClosed, ReasonReadError, ReasonWriteError, ReasonTooSlow, ReasonBadOptions, ReasonTooBig,
		ReasonShutdown, ReasonInternalError)...)
	promtest.RequireZero(t, reg, "backstream_subscribe_refused_total", promtest.Label("reason", "bad_param", "not_ready", "upgrade")...)
	promtest.RequireZero(t, reg, "backstream_subscribe_render_errors_total", promtest.Label("reason", "upstream_record", "internal")...)
}

// TestReplayFromLiveLogCountsAsReplay: a world that fits in the live log,
// archived an hour ago, replayed from cursor 0. Every event is served from
// memory, yet the replay is a replay: backstream_subscribe_events_sent_total
// counts it under path="replay", backstream_live_delivery_seconds gets none
// of its (hour-old) ages, and /status says replaying while a cursor-0
// subscriber is stuck mid-replay. Events committed now, to subscribers at
// the tip, are live and each gets one latency sample.
func TestReplayFromLiveLogCountsAsReplay(t *testing.T) {
	var skew atomic.Int64 // how far the writer's clock is behind
	skew.Store(int64(time.Hour))
	h := newHarness(t, harnessOpts{now: func() time.Time { return time.Now().Add(-time.Duration(skew.Load())) }})
	// More JSON (about 8 MB) than the socket buffers between the server
	// and a client that does not read can take, so that client stays
	// mid-replay.
	const n = 20_000
	var last uint64
	for i := 0; i < n; i += 4096 {
		_, last = h.commit(genEvents(t, i, min(4096, n-i), 20)...)
	}
	if _, floor := h.w.Live().ReadEntries(1, nil, 1); floor != 1 {
		t.Fatalf("live floor %d: the world does not fit in the live log", floor)
	}
	sent := func(path string) float64 {
		return promtest.Value(t, h.reg, "backstream_subscribe_events_sent_total", map[string]string{"path": path})
	}
	samples := func() float64 { return promtest.Value(t, h.reg, "backstream_live_delivery_seconds", nil) }

	// A cursor-0 subscriber that does not read stays mid-replay.
	stuck := h.dialSmall("?cursor=0")
	promtest.Eventually(t, 10*time.Second, "status to count the stuck cursor-0 replay", func() bool {
		return h.srv.Stats().Replaying == 1
	})
	stuck.Close()
	c := h.dial("?cursor=0", nil)
	defer c.Close()
	if err := checkContiguous(readUntil(t, c, last), 1, last); err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 10*time.Second, "the caught-up subscriber to stop counting as replaying", func() bool {
		st := h.srv.Stats()
		return st.Replaying == 0 && st.Subscribers == 1
	})
	if r, l, s := sent("replay"), sent("live"), samples(); r < n || l != 0 || s != 0 {
		t.Fatalf("after a cursor-0 replay from the live log: replay %v (want ≥ %d), live %v, latency samples %v (want 0)", r, n, l, s)
	}

	// Now the tip moves: a new subscriber at the tip and the caught-up one
	// get the fresh events live.
	skew.Store(0)
	tip := h.dial("", nil)
	defer tip.Close()
	r0 := sent("replay")
	first, last2 := h.commit(genEvents(t, n, 50, 20)...)
	for _, cc := range []*websocket.Conn{c, tip} {
		if err := checkContiguous(readUntil(t, cc, last2), first, last2); err != nil {
			t.Fatal(err)
		}
	}
	promtest.Eventually(t, 5*time.Second, "100 live deliveries", func() bool { return sent("live") == 100 })
	if r, s := sent("replay"), samples(); r != r0 || s != 100 {
		t.Fatalf("live events: replay %v (was %v), latency samples %v (want 100)", r, r0, s)
	}
}

// TestStatsTipAgeNeverNegative: time_us runs ahead of the wall clock after
// the clock steps back (and above a million events a second); the tip's
// age is then 0, not a negative number of seconds on the status page.
func TestStatsTipAgeNeverNegative(t *testing.T) {
	h := newHarness(t, harnessOpts{now: func() time.Time { return time.Now().Add(time.Hour) }})
	h.commit(genEvent(t, 0, 1))
	if st := h.srv.Stats(); st.TipTimeUS == 0 || st.TipAgeSeconds < 0 {
		t.Fatalf("tip time %d µs, age %v s; want the tip's time and an age of 0", st.TipTimeUS, st.TipAgeSeconds)
	}
}
