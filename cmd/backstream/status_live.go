package main

// This file owns the parts of serve's /status report that only a running
// process has: the history of rates the status page charts, sampled from
// the process's own metrics, and the last warnings and errors it logged.

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/loglimit"
	"github.com/backstream/backstream/subscribe"
)

// The metrics a history reading sums (every series of each).
const (
	metricRecords   = "backstream_backfill_records_total"
	metricRepos     = "backstream_backfill_repos_total"
	metricTip       = "backstream_archive_tip_seq" // ev and cap: events appended
	metricDelivered = "backstream_subscribe_events_sent_total"
	metricLastEvent = "backstream_firehose_last_event_time_seconds"
)

// historyReading reads the status page's counters from reg at now.
func historyReading(reg prometheus.Gatherer, now time.Time) subscribe.HistoryReading {
	mfs, _ := reg.Gather() // a collector's error leaves the others' values
	sum := map[string]float64{}
	seen := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			sum[mf.GetName()] += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			seen[mf.GetName()] = true
		}
	}
	r := subscribe.HistoryReading{
		Records: sum[metricRecords], Repos: sum[metricRepos], Events: sum[metricTip], Delivered: sum[metricDelivered],
		LagSeconds: math.NaN(),
	}
	if last := sum[metricLastEvent]; seen[metricLastEvent] && last > 0 {
		r.LagSeconds = now.Sub(time.Unix(0, int64(last*1e9))).Seconds()
	}
	return r
}

// startHistory adds a reading of reg to h at once and every interval
// after, until ctx ends or stop is called; stop returns once the sampler
// has, and may be called again.
func startHistory(ctx context.Context, h *subscribe.StatusHistory, reg prometheus.Gatherer, interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			now := time.Now()
			h.Add(now, historyReading(reg, now))
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// recentLogLines is how many warnings and errors /status shows.
const recentLogLines = 20

// recentLogDetail bounds a line's attributes as /status shows them.
const recentLogDetail = 300

// logLine is one warning or error as /status shows it.
type logLine struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
	Detail  string    `json:"detail,omitempty"` // the attributes, key=value, clipped
}

// recentLog keeps the last recentLogLines WARN and ERROR records the
// process logged (the log's own rate limits bound how often they change).
type recentLog struct {
	mu    sync.Mutex
	lines []logLine // oldest first
}

func (l *recentLog) add(ln logLine) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == recentLogLines {
		copy(l.lines, l.lines[1:])
		l.lines = l.lines[:recentLogLines-1]
	}
	l.lines = append(l.lines, ln)
}

// last returns the lines kept, oldest first; nil for a nil log.
func (l *recentLog) last() []logLine {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]logLine(nil), l.lines...)
}

// handler wraps next: every record still goes to next, and the warnings
// and errors among those next logs are kept.
func (l *recentLog) handler(next slog.Handler) slog.Handler { return recentHandler{next: next, log: l} }

type recentHandler struct {
	next   slog.Handler
	log    *recentLog
	attrs  string // the With attributes, formatted
	prefix string // the open groups, "a.b."
}

func (h recentHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h recentHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		var b strings.Builder
		b.WriteString(h.attrs)
		r.Attrs(func(a slog.Attr) bool {
			appendAttr(&b, h.prefix, a)
			return true
		})
		h.log.add(logLine{Time: r.Time.UTC(), Level: r.Level.String(), Message: loglimit.Clip(r.Message, recentLogDetail),
			Detail: loglimit.Clip(strings.TrimSpace(b.String()), recentLogDetail)})
	}
	return h.next.Handle(ctx, r)
}

func (h recentHandler) WithAttrs(as []slog.Attr) slog.Handler {
	var b strings.Builder
	b.WriteString(h.attrs)
	for _, a := range as {
		appendAttr(&b, h.prefix, a)
	}
	h.next, h.attrs = h.next.WithAttrs(as), b.String()
	return h
}

func (h recentHandler) WithGroup(g string) slog.Handler {
	if g == "" {
		return h
	}
	h.next, h.prefix = h.next.WithGroup(g), h.prefix+g+"."
	return h
}

func appendAttr(b *strings.Builder, prefix string, a slog.Attr) {
	a.Value = a.Value.Resolve()
	if a.Equal(slog.Attr{}) {
		return
	}
	if a.Value.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range a.Value.Group() {
			appendAttr(b, p, g)
		}
		return
	}
	fmt.Fprintf(b, " %s%s=%v", prefix, a.Key, a.Value.Any())
}
