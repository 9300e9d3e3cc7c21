package subscribe

// status_history.go owns StatusHistory: the last minutes of the rates the
// status page charts, kept by the server so a page opened now (or a curl)
// shows them at once, rather than from when the page started polling.

import (
	"math"
	"sync"
	"time"
)

// Defaults of a StatusHistory: a reading every 10 s, 60 kept (10 minutes).
const (
	DefaultHistoryInterval = 10 * time.Second
	DefaultHistoryPoints   = 60
)

// HistoryReading is one reading of the counters and gauges the page charts.
// Counters only grow; a reading below the previous one (a counter that
// restarted) counts as a rate of 0.
type HistoryReading struct {
	Records   float64 // backfilled records made durable (counter)
	Repos     float64 // repos whose backfill outcome became durable (counter)
	Events    float64 // events appended to the archive and the capture (counter)
	Delivered float64 // events sent to subscribers (counter)
	// LagSeconds is how far the last relay event is behind now; NaN when
	// no event has arrived.
	LagSeconds float64
}

// HistoryPoint is one point of the charts: the rates since the previous
// reading, and the lag at this one.
type HistoryPoint struct {
	Time            int64    `json:"t"` // unix seconds
	RecordsPerSec   float64  `json:"records_per_sec"`
	ReposPerSec     float64  `json:"repos_per_sec"`
	IngestPerSec    float64  `json:"ingest_per_sec"`
	DeliveredPerSec float64  `json:"delivered_per_sec"`
	LagSeconds      *float64 `json:"lag_seconds,omitempty"`
}

// HistoryReport is the "history" section of /status.
type HistoryReport struct {
	IntervalSeconds float64        `json:"interval_seconds"`
	Points          []HistoryPoint `json:"points"`
}

// StatusHistory keeps the last Points of HistoryPoint, one per Add. Safe
// for concurrent use.
type StatusHistory struct {
	interval time.Duration
	max      int

	mu     sync.Mutex
	prev   HistoryReading
	prevAt time.Time
	points []HistoryPoint // oldest first, at most max
}

// NewStatusHistory keeps points readings taken every interval (the
// interval is only reported: the caller takes the readings).
func NewStatusHistory(interval time.Duration, points int) *StatusHistory {
	return &StatusHistory{interval: interval, max: max(points, 2)}
}

// Add records a reading taken at t. The first reading only sets the base
// the next one's rates are measured from.
func (h *StatusHistory) Add(t time.Time, r HistoryReading) {
	h.mu.Lock()
	defer h.mu.Unlock()
	prev, prevAt := h.prev, h.prevAt
	h.prev, h.prevAt = r, t
	dt := t.Sub(prevAt).Seconds()
	if prevAt.IsZero() || dt <= 0 {
		return
	}
	p := HistoryPoint{
		Time:            t.Unix(),
		RecordsPerSec:   rate(prev.Records, r.Records, dt),
		ReposPerSec:     rate(prev.Repos, r.Repos, dt),
		IngestPerSec:    rate(prev.Events, r.Events, dt),
		DeliveredPerSec: rate(prev.Delivered, r.Delivered, dt),
	}
	if !math.IsNaN(r.LagSeconds) {
		lag := max(r.LagSeconds, 0)
		p.LagSeconds = &lag
	}
	if len(h.points) == h.max {
		copy(h.points, h.points[1:])
		h.points = h.points[:h.max-1]
	}
	h.points = append(h.points, p)
}

func rate(from, to, dt float64) float64 {
	if to < from {
		return 0
	}
	return (to - from) / dt
}

// Report is the history as /status shows it.
func (h *StatusHistory) Report() HistoryReport {
	h.mu.Lock()
	defer h.mu.Unlock()
	return HistoryReport{IntervalSeconds: h.interval.Seconds(), Points: append([]HistoryPoint{}, h.points...)}
}
