package upstream

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/promtest"
)

// TestTripsLogOncePerMinute: every trip of a limit is counted, and each
// limit writes one log line per minute, on its own: a download limit
// tripping on every request does not become a line per request.
func TestTripsLogOncePerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		reg := prometheus.NewRegistry()
		tr := newTrips(slog.New(slog.NewTextHandler(&out, nil)), NewMetrics(reg))
		want := func(when string, budget, hosts int) {
			t.Helper()
			b := strings.Count(out.String(), "limit="+limitScratchBudget)
			h := strings.Count(out.String(), "limit="+limitHostWorkers)
			if b != budget || h != hosts {
				t.Fatalf("%s: %d %s and %d %s lines, want %d and %d:\n%s", when, b, limitScratchBudget, h, limitHostWorkers, budget, hosts, out.String())
			}
		}
		for range 100 {
			tr.trip(slog.LevelWarn, limitScratchBudget, "full")
			tr.trip(slog.LevelInfo, limitHostWorkers, "busy", "host", "pds.example:443")
		}
		want("100 trips of each", 1, 1)
		time.Sleep(tripLogEvery - time.Second)
		tr.trip(slog.LevelWarn, limitScratchBudget, "full")
		want("within the minute", 1, 1)
		time.Sleep(time.Second)
		tr.trip(slog.LevelWarn, limitScratchBudget, "full")
		want("a minute on", 2, 1)
		for limit, n := range map[string]float64{limitScratchBudget: 102, limitHostWorkers: 100} {
			if got := promtest.Value(t, reg, "backstream_upstream_getrepo_limited_total", map[string]string{"limit": limit}); got != n {
				t.Errorf("limited_total{%s} = %v, want %v", limit, got, n)
			}
		}
	})
}
