package subscribe

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/browsertest"
)

// TestStatusPageInBrowser renders /status in headless Chromium (Debian's
// chromium package), once in bootstrap and once in steady state, takes a
// screenshot of each and checks the DOM the page's script built: the bars'
// values are the JSON's fractions and their labels the counts of the
// bootstrap of 30,000 accounts whose listing ran ahead (11,197 of 12,358
// known repos done, 12,358 of 30,000 listed), the charts have a point per
// history sample, values are in human units with labels rather than JSON
// keys, a section the page does not know is a labelled table, and the raw
// JSON link answers the report as JSON. Without Chromium it skips, and
// fails under .ci/run (internal/citest). STATUS_SCREENSHOT_DIR keeps the
// screenshots.
func TestStatusPageInBrowser(t *testing.T) {
	bin := browsertest.Chromium(t)
	for _, tc := range []struct {
		name   string
		status map[string]any
		check  func(t *testing.T, p *renderedPage)
	}{
		{"bootstrap", bootstrapStatus(), checkBootstrapPage},
		{"steady_state", steadyStatus(), checkSteadyPage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, harnessOpts{notReady: true, status: func() any { return tc.status }})
			p := render(t, bin, h.url("/status"), tc.name)
			p.checkCommon(t)
			tc.check(t, p)
		})
	}
	// The page polls: opened during bootstrap, it shows steady state once
	// the report says so, without a reload (virtual time runs the 5 s
	// timer at once).
	t.Run("refresh", func(t *testing.T) {
		var calls atomic.Int32
		status := func() any {
			if calls.Add(1) == 1 {
				return bootstrapStatus()
			}
			return steadyStatus()
		}
		h := newHarness(t, harnessOpts{notReady: true, status: status})
		p := render(t, bin, h.url("/status"), "refresh", "--virtual-time-budget=6000")
		if got := p.TextOf(t, "phase"); got != "Steady state" {
			t.Fatalf("after a refresh the page shows %q", got)
		}
		checkSteadyPage(t, p)
	})
}

// renderedPage is the page as Chromium rendered it and the JSON its raw
// JSON link answers.
type renderedPage struct {
	*browsertest.Page
	json map[string]any
}

func render(t *testing.T, bin, pageURL, name string, flags ...string) *renderedPage {
	t.Helper()
	p := &renderedPage{Page: browsertest.Render(t, bin, pageURL, "status-"+name, flags...)}
	p.json = p.FollowJSON(t, "raw-json")
	return p
}

// checkCommon: what both pages must be: human labels and numbers, the raw
// JSON one click away, an unknown section shown as a labelled table.
func (p *renderedPage) checkCommon(t *testing.T) {
	t.Helper()
	p.RequireHuman(t)
	if p.json["phase"] == nil || p.json["history"] == nil {
		t.Errorf("the raw JSON link answered %v", p.json)
	}
	p.Tag(t, "section-compaction")
	for _, want := range []string{"Compaction", "Reclaimed 118 MiB", "Runs 3", "Last run 2026-12-01 10:00:00 UTC"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("the unknown section lacks %q:\n%s", want, p.Text)
		}
	}
}

// checkChart: the chart has one point per history point that has field.
func (p *renderedPage) checkChart(t *testing.T, id string, want int) {
	t.Helper()
	if n := p.ChartPoints(t, id); n != want {
		t.Errorf("#%s has %d points, want %d", id, n, want)
	}
}

// checkBar: the bar's value is the JSON's fraction, its width that
// percentage, its label wantLabel.
func (p *renderedPage) checkBar(t *testing.T, id string, fraction any, wantLabel string) {
	t.Helper()
	f, ok := fraction.(float64)
	if !ok {
		t.Fatalf("the JSON has no fraction for #%s: %v", id, fraction)
	}
	got, err := strconv.ParseFloat(p.Attr(t, id, "data-value"), 64)
	if err != nil || got != f {
		t.Errorf("#%s value %s, the JSON says %v", id, p.Attr(t, id, "data-value"), f)
	}
	if now := p.Attr(t, id, "aria-valuenow"); now != fmt.Sprintf("%.2f", 100*f) {
		t.Errorf("#%s aria-valuenow %s, want %.2f", id, now, 100*f)
	}
	if l := p.TextOf(t, id+"-label"); !strings.HasPrefix(l, wantLabel) {
		t.Errorf("#%s label %q, want %q…", id, l, wantLabel)
	}
}

func checkBootstrapPage(t *testing.T, p *renderedPage) {
	b, _ := p.json["bootstrap"].(map[string]any)
	p.checkBar(t, "bar-done", b["done_fraction"], "11,197 of 12,358 known repos done (90.6 %)")
	p.checkBar(t, "bar-known", b["known_fraction"], "12,358 of 30,000 listed repos recorded (41.2 %)")
	if math.Abs(b["done_fraction"].(float64)-11_197.0/12_358) > 1e-12 {
		t.Errorf("the JSON's done fraction %v is not 11,197 of 12,358", b["done_fraction"])
	}
	if eta := p.TextOf(t, "eta"); eta != "1 h 2 min" {
		t.Errorf("ETA %q, want 1 h 2 min", eta)
	}
	if got := p.TextOf(t, "relay-link"); !strings.HasPrefix(got, "connected since 2026-12-01 07:00:00 UTC") {
		t.Errorf("relay connection %q, want connected since 2026-12-01 07:00:00 UTC", got)
	}
	p.checkChart(t, "chart-records", historyPoints)
	p.checkChart(t, "chart-repos", historyPoints)
	for _, want := range []string{"Bootstrap", "12,000 records/s", "35.2 repos/s", "Made pending on restart", "17,000 listed beyond the checkpoint",
		"By error class", "rate limited 30", "pds1.example 25", "Not started 1,129", "Complete 11,136"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("bootstrap page lacks %q:\n%s", want, p.Text)
		}
	}
}

func checkSteadyPage(t *testing.T, p *renderedPage) {
	if p.Has("bar-done") {
		t.Error("a bootstrap bar in steady state")
	}
	for id, want := range map[string]string{"events": "48,123,456", "disk": "12.3 GiB", "lag": "1.5 s", "subscribers": "3", "free": "1.5 GiB"} {
		if got := p.TextOf(t, id); got != want {
			t.Errorf("#%s %q, want %q", id, got, want)
		}
	}
	// The volume near the --min-free floor: the page says how near.
	if want := "1.5 GiB free on the volume; the process stops below 1.0 GiB (--min-free)"; !strings.Contains(p.Text, want) {
		t.Errorf("steady-state page lacks %q:\n%s", want, p.Text)
	}
	// The relay unreachable: the page says so, since when, and why.
	if got := p.TextOf(t, "relay-link"); !strings.HasPrefix(got, "not connected since 2026-12-01 09:58:00 UTC") {
		t.Errorf("relay connection %q, want not connected since 2026-12-01 09:58:00 UTC", got)
	}
	if want := "Last relay error upstream: subscribeRepos relay.example: dial tcp 192.0.2.1:443: connect: connection refused (2026-12-01 09:59:55 UTC"; !strings.Contains(p.Text, want) {
		t.Errorf("steady-state page lacks %q:\n%s", want, p.Text)
	}
	p.checkChart(t, "chart-ingest", historyPoints)
	p.checkChart(t, "chart-delivered", historyPoints)
	p.checkChart(t, "chart-lag", historyPoints)
	for _, want := range []string{"Steady state", "wss://relay.example", "Relay cursor (last seq processed) 9,876,543", "Newest event time 2026-12-01",
		"Delivered, events/s", "relay connection lost — err=EOF"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("steady-state page lacks %q:\n%s", want, p.Text)
		}
	}
}

const historyPoints = 12

// history is a StatusHistory of historyPoints points 10 s apart.
func history(bootstrapping bool) HistoryReport {
	h := NewStatusHistory(DefaultHistoryInterval, DefaultHistoryPoints)
	t0 := time.Now().Add(-2 * time.Minute)
	for i := range historyPoints + 1 {
		f := float64(i)
		r := HistoryReading{Events: f * 20_000, Delivered: f * 55_000, LagSeconds: 1 + f/24}
		if bootstrapping {
			r.Records, r.Repos = f*120_000+f*f*1000, f*350
		}
		h.Add(t0.Add(time.Duration(i)*10*time.Second), r)
	}
	return h.Report()
}

// unknownSection stands for a section another part of the server adds.
func unknownSection() map[string]any {
	return map[string]any{"runs": 3, "reclaimed_bytes": 123_456_789, "last_run_at": "2026-12-01T10:00:00Z"}
}

func bootstrapStatus() map[string]any {
	var c archive.Counts
	c.ByStatus[archive.StatusComplete] = 11_136
	c.ByStatus[archive.StatusFailed] = 40
	c.ByStatus[archive.StatusUnavailable] = 21
	c.ByStatus[archive.StatusPending] = 32
	c.ByStatus[archive.StatusNotStarted] = 1_129
	p := bootstrap.Progress{State: bootstrap.StateRunning, Started: time.Now().Add(-3 * time.Hour), Queued: 18_771, InFlight: 32, Unrecorded: 17_642,
		PendingOnRestart: 3, Pages: 30, Enumerated: 30_000, ListingFinished: true, Checkpoint: "page", CheckpointLag: 17_000,
		Complete: 11_136, Records: 4_000_000, ReposPerSec: 35.2, RecordsPerSec: 12_000, ETASeconds: 3725}
	p.SetCounts(c)
	return map[string]any{
		"phase": "bootstrap", "relay": "wss://relay.example",
		"repos": map[string]int64{"not_started": 1_129, "pending": 32, "complete": 11_136, "failed": 40, "unavailable": 21, "inactive": 0, "total": 12_358},
		"failed": map[string]any{"by_class": map[string]int{"rate_limited": 30, "timeout": 10},
			"top_hosts": []any{map[string]any{"host": "pds1.example", "failed": 25}, map[string]any{"host": "pds2.example", "failed": 15}}},
		"cursors":    map[string]any{"relay": 9_876_543, "listrepos": "did:plc:abc"},
		"archive":    map[string]any{"tip_seq": 4_100_000, "capture_tip_seq": 20_000, "disk_bytes": 2_000_000_000},
		"bootstrap":  p,
		"history":    history(true),
		"compaction": unknownSection(),
		"firehose":   map[string]any{"connected": true, "since": "2026-12-01T07:00:00Z"},
	}
}

func steadyStatus() map[string]any {
	return map[string]any{
		"phase": "steady_state", "relay": "wss://relay.example",
		"repos":   map[string]int64{"not_started": 0, "pending": 0, "complete": 30_000, "failed": 0, "unavailable": 0, "inactive": 0, "total": 30_000},
		"failed":  map[string]any{"by_class": map[string]int{}, "top_hosts": []any{}},
		"cursors": map[string]any{"relay": 9_876_543, "merge": 120_000, "listrepos": ""},
		"archive": map[string]any{"tip_seq": 48_123_456, "disk_bytes": 13_207_024_435, "free_bytes": 1_610_612_736, "min_free_bytes": 1 << 30},
		"subscribe": map[string]any{"subscribers": 3, "replaying": 1, "tip_seq": 48_123_456,
			"tip_time_us": time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).UnixMicro() + 249_677, "tip_age_seconds": 0.4, "live_floor": 47_000_000},
		"history":     history(false),
		"last_errors": []any{map[string]any{"time": "2026-12-01T09:59:00Z", "level": "WARN", "message": "relay connection lost", "detail": "err=EOF"}},
		"compaction":  unknownSection(),
		"firehose": map[string]any{"connected": false, "since": "2026-12-01T09:58:00Z",
			"last_error": "upstream: subscribeRepos relay.example: dial tcp 192.0.2.1:443: connect: connection refused", "last_error_at": "2026-12-01T09:59:55Z"},
	}
}
