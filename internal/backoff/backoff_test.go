package backoff

import (
	"context"
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// TestNominal: doubling from Base, capped at Max, no overflow on huge
// attempts or a Max near the largest duration; degenerate policies.
func TestNominal(t *testing.T) {
	p := Policy{Base: time.Second, Max: 30 * time.Second}
	for k, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		if got := p.Nominal(k); got != want*time.Second {
			t.Errorf("Nominal(%d) = %v, want %v", k, got, want*time.Second)
		}
	}
	cases := []struct {
		name    string
		p       Policy
		attempt int
		want    time.Duration
	}{
		{"huge attempt", p, math.MaxInt, 30 * time.Second},
		{"negative attempt", p, -3, time.Second},
		{"max near overflow", Policy{Base: time.Hour, Max: math.MaxInt64}, 1 << 20, math.MaxInt64},
		{"max below base", Policy{Base: time.Minute, Max: time.Second}, 5, time.Minute},
		{"no max", Policy{Base: time.Minute}, 5, time.Minute},
		{"no base", Policy{Max: time.Hour}, 5, 0},
	}
	for _, c := range cases {
		if got := c.p.Nominal(c.attempt); got != c.want {
			t.Errorf("%s: Nominal(%d) = %v, want %v", c.name, c.attempt, got, c.want)
		}
	}
}

// TestDelayJitter: the jitter rule — uniform over ±25 % of the nominal
// delay cut at Max (so the nominal delay at u = 0.5 below the cap, and no
// pile-up on Max at it); draws outside [0, 1] are clamped.
func TestDelayJitter(t *testing.T) {
	p := Policy{Base: time.Minute, Max: 24 * time.Hour}
	cases := []struct {
		attempt int
		u       float64
		want    time.Duration
	}{
		{2, 0, 3 * time.Minute},
		{2, 0.5, 4 * time.Minute},
		{2, 1, 5 * time.Minute},
		{0, 0.25, 52*time.Second + 500*time.Millisecond},
		{20, 0, 18 * time.Hour},   // at the cap: from 0.75·Max ...
		{20, 0.5, 21 * time.Hour}, // ... uniformly ...
		{20, 1, 24 * time.Hour},   // ... to Max, never above
		{2, -1, 3 * time.Minute},  // clamped
		{2, 7, 5 * time.Minute},
		{2, math.NaN(), 3 * time.Minute},
	}
	for _, c := range cases {
		if got := p.Delay(c.attempt, c.u); got != c.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", c.attempt, c.u, got, c.want)
		}
	}
	// 1024 min is below a 20 h cap, but 1.25 · 1024 min is above it.
	if got := (Policy{Base: time.Minute, Max: 20 * time.Hour}).Delay(10, 1); got != 20*time.Hour {
		t.Errorf("Delay just below the cap, u = 1: %v, want 20h", got)
	}
	// A Max below Base (or none) is Base: the cap never undercuts it.
	for _, p := range []Policy{{Base: time.Minute, Max: time.Second}, {Base: time.Minute}} {
		if got := p.Delay(5, 0.5); got != 52*time.Second+500*time.Millisecond {
			t.Errorf("%+v: Delay(5, 0.5) = %v, want 52.5s (45s to 1m)", p, got)
		}
	}
	huge := Policy{Base: time.Hour, Max: math.MaxInt64}
	if got := huge.Delay(1<<20, 1); got != math.MaxInt64 {
		t.Errorf("Delay at a MaxInt64 cap = %v", got)
	}
}

// TestDraw: the random source decides u; nil draws from math/rand/v2,
// always within the rule's bounds.
func TestDraw(t *testing.T) {
	p := Policy{Base: 4 * time.Second, Max: time.Minute}
	if got := p.Draw(0, func() float64 { return 1 }); got != 5*time.Second {
		t.Errorf("Draw with u = 1: %v, want 5s", got)
	}
	for range 1000 {
		if d := p.Draw(0, nil); d < 3*time.Second || d > 5*time.Second {
			t.Fatalf("Draw(0, nil) = %v outside [3s, 5s]", d)
		}
	}
}

// TestLoop: Next walks the schedule with one draw per wait; Reset starts
// over at Base.
func TestLoop(t *testing.T) {
	draws := []float64{0.5, 0, 1, 0.5, 0.5, 0.5, 1}
	calls := 0
	l := Loop{Policy: Policy{Base: 100 * time.Millisecond, Max: time.Second}, Rand: func() float64 {
		u := draws[calls]
		calls++
		return u
	}}
	var got []time.Duration
	for range 5 {
		got = append(got, l.Next())
	}
	want := []time.Duration{100, 150, 500, 800, 875}
	for i := range want {
		if got[i] != want[i]*time.Millisecond {
			t.Fatalf("Next #%d = %v, want %v (all: %v)", i, got[i], want[i]*time.Millisecond, got)
		}
	}
	l.Reset()
	if d := l.Next(); d != 100*time.Millisecond {
		t.Fatalf("Next after Reset = %v, want 100ms", d)
	}
	if d := l.Next(); d != 250*time.Millisecond {
		t.Fatalf("second Next after Reset = %v, want 250ms", d)
	}
	if calls != len(draws) {
		t.Fatalf("%d draws for %d waits", calls, len(draws))
	}
}

// TestSleep (fake clock): Sleep waits exactly d; a ctx ending mid-sleep
// returns its error at that instant; d ≤ 0 returns at once.
func TestSleep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		if err := Sleep(context.Background(), 3*time.Second); err != nil || time.Since(start) != 3*time.Second {
			t.Fatalf("Sleep(3s) = %v after %v", err, time.Since(start))
		}

		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		start = time.Now()
		if err := Sleep(ctx, time.Hour); err != context.Canceled || time.Since(start) != time.Second {
			t.Fatalf("Sleep canceled after 1s = %v after %v", err, time.Since(start))
		}

		start = time.Now()
		if err := Sleep(context.Background(), 0); err != nil || time.Since(start) != 0 {
			t.Fatalf("Sleep(0) = %v after %v", err, time.Since(start))
		}
		if err := Sleep(ctx, -time.Second); err != context.Canceled {
			t.Fatalf("Sleep(<0) on an ended ctx = %v", err)
		}
	})
}
