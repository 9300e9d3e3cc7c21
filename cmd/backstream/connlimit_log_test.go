package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestRefusalLogOncePerMinute: a flood of refused connections writes one
// WARN line per cap per capLogEvery, the next one saying how many
// refusals it stands for (occurrences, as every bounded line), not a line
// per connection.
func TestRefusalLogOncePerMinute(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var out bytes.Buffer
		lim := connLimits{Global: 10, PerIP: 2}
		l := newLimitListener(nil, lim, newConnMetrics(nil, lim), slog.New(slog.NewJSONHandler(&out, nil)))
		type line struct {
			Level       string
			Cap         int
			Occurrences int
		}
		lines := func() []line {
			var ls []line
			for _, s := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				if s == "" {
					continue
				}
				var r line
				if err := json.Unmarshal([]byte(s), &r); err != nil {
					t.Fatalf("log line %q: %v", s, err)
				}
				ls = append(ls, r)
			}
			return ls
		}
		for range 1000 {
			l.logRefusal(refusedPerIP)
		}
		l.logRefusal(refusedGlobal)
		if got := lines(); len(got) != 2 || got[0] != (line{"WARN", 2, 1}) || got[1] != (line{"WARN", 10, 1}) {
			t.Fatalf("lines for 1000 per-IP refusals and a global one: %+v, want one per cap", got)
		}
		time.Sleep(capLogEvery - time.Second)
		l.logRefusal(refusedPerIP)
		if n := len(lines()); n != 2 {
			t.Fatalf("%d lines within the period, want 2", n)
		}
		time.Sleep(time.Second)
		l.logRefusal(refusedPerIP)
		if got := lines(); len(got) != 3 || got[2] != (line{"WARN", 2, 1001}) {
			t.Fatalf("lines a period on: %+v, want a third: per-IP cap, occurrences=1001", got)
		}
	})
}
