package subscribe

import (
	"math"
	"testing"
	"time"
)

// TestStatusHistory: rates are the counters' growth over the time between
// readings, a counter that went down is a rate of 0, an unknown lag is
// left out, and only the last max points are kept, oldest first.
func TestStatusHistory(t *testing.T) {
	h := NewStatusHistory(10*time.Second, 3)
	t0 := time.Unix(1_800_000_000, 0)
	h.Add(t0, HistoryReading{Records: 100, Repos: 1, Events: 50, Delivered: 0, LagSeconds: math.NaN()})
	if n := len(h.Report().Points); n != 0 {
		t.Fatalf("first reading made %d points", n)
	}
	h.Add(t0.Add(10*time.Second), HistoryReading{Records: 1100, Repos: 21, Events: 40, Delivered: 500, LagSeconds: 1.5})
	p := h.Report().Points[0]
	if p.RecordsPerSec != 100 || p.ReposPerSec != 2 || p.IngestPerSec != 0 || p.DeliveredPerSec != 50 || p.LagSeconds == nil || *p.LagSeconds != 1.5 {
		t.Fatalf("point %+v", p)
	}
	for i := 2; i <= 5; i++ {
		h.Add(t0.Add(time.Duration(i)*10*time.Second), HistoryReading{Records: float64(i * 1000), LagSeconds: math.NaN()})
	}
	r := h.Report()
	if len(r.Points) != 3 || r.Points[0].Time != t0.Unix()+30 || r.Points[2].Time != t0.Unix()+50 || r.IntervalSeconds != 10 {
		t.Fatalf("report %+v", r)
	}
	if r.Points[2].LagSeconds != nil {
		t.Fatalf("unknown lag reported: %v", *r.Points[2].LagSeconds)
	}
}
