package main

import (
	"context"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
)

const metricsText = `# HELP backstream_live_delivery_seconds x
# TYPE backstream_live_delivery_seconds histogram
backstream_live_delivery_seconds_bucket{le="0.001"} 10
backstream_live_delivery_seconds_bucket{le="0.01"} 60
backstream_live_delivery_seconds_bucket{le="0.1"} 100
backstream_live_delivery_seconds_bucket{le="+Inf"} 100
backstream_live_delivery_seconds_sum 2
backstream_live_delivery_seconds_count 100
backstream_archive_rows_total{source="live"} 7
backstream_archive_rows_total{source="backfill"} 5
backstream_archive_rows_total_other 1000
backstream_archive_tip_seq 12
`

func TestParseSamplesSum(t *testing.T) {
	s, err := parseSamples(strings.NewReader(metricsText))
	if err != nil {
		t.Fatal(err)
	}
	// Only the metric's own series count, not a longer name sharing its prefix.
	if v, ok := s.sum("backstream_archive_rows_total"); !ok || v != 12 {
		t.Errorf("sum(rows) = %v, %v; want 12, true", v, ok)
	}
	if v, ok := s.sum("backstream_archive_tip_seq"); !ok || v != 12 {
		t.Errorf("sum(tip) = %v, %v; want 12, true", v, ok)
	}
	if _, ok := s.sum("backstream_absent"); ok {
		t.Error("sum of an absent metric reported found")
	}
	if _, err := parseSamples(strings.NewReader("x_total abc\n")); err == nil {
		t.Error("a malformed value parsed")
	}
}

func TestQuantileBetweenScrapes(t *testing.T) {
	before, err := parseSamples(strings.NewReader(metricsText))
	if err != nil {
		t.Fatal(err)
	}
	// 100 more observations: 50 below 1 ms, 49 in (1 ms, 10 ms], 1 above 100 ms.
	after, err := parseSamples(strings.NewReader(strings.NewReplacer(
		`{le="0.001"} 10`, `{le="0.001"} 60`,
		`{le="0.01"} 60`, `{le="0.01"} 159`,
		`{le="0.1"} 100`, `{le="0.1"} 199`,
		`{le="+Inf"} 100`, `{le="+Inf"} 200`).Replace(metricsText)))
	if err != nil {
		t.Fatal(err)
	}
	h := histDelta(before, after, "backstream_live_delivery_seconds")
	if len(h) != 4 || h[3].count != 100 {
		t.Fatalf("delta = %+v, want 4 buckets, 100 observations", h)
	}
	for _, c := range []struct{ q, want float64 }{
		{0.25, 0.0005},                  // inside the first bucket: from 0 to its bound
		{0.50, 0.001},                   // exactly its bound
		{0.99, 0.01},                    // the 99th is the last in (1 ms, 10 ms]
		{0.995, 0.1},                    // in the +Inf bucket: the highest finite bound
		{0.70, 0.001 + 0.009*(20.0/49)}, // linear inside (1 ms, 10 ms]
	} {
		if got := quantile(c.q, h); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if !math.IsNaN(quantile(0.5, histDelta(before, before, "backstream_live_delivery_seconds"))) {
		t.Error("quantile of no observations is not NaN")
	}
}

func TestEventCursor(t *testing.T) {
	msg := []byte(`{"did":"did:plc:x","time_us":1,"kind":"commit","commit":{"record":{"text":"\"cursor\":7"}},"cursor":12345}`)
	if c, err := eventCursor(msg); err != nil || c != 12345 {
		t.Fatalf("eventCursor = %d, %v; want 12345", c, err)
	}
	if _, err := eventCursor([]byte(`{"kind":"commit"}`)); err == nil {
		t.Error("an event without cursor parsed")
	}
}

func TestMedianOf(t *testing.T) {
	rs := []ingestRun{
		{Run: 1, EventsPerSec: 10, Frames: 5, HistoryEvents: 100},
		{Run: 2, EventsPerSec: 30, Frames: 1, HistoryEvents: 100},
		{Run: 3, EventsPerSec: 20, Frames: 9, HistoryEvents: 100},
	}
	m := medianOf(rs)
	if m.EventsPerSec != 20 || m.Frames != 5 || m.HistoryEvents != 100 || m.Run != 0 {
		t.Errorf("medianOf = %+v", m)
	}
	if got := median([]float64{4, 1, 3, 2}); got != 2.5 {
		t.Errorf("median of an even count = %v, want 2.5", got)
	}
}

func TestTableVerdicts(t *testing.T) {
	rep := report{
		Runs: []bootRun{
			{Shape: "2x2", RecordsPerCPUSec: 70_000, PeakRSSBytes: 2 << 30, BytesPerEvent: 80, ResolutionsPerRepo: 1.5},
			{Shape: "2x2", RecordsPerCPUSec: 50_000, PeakRSSBytes: 1 << 30, BytesPerEvent: 81, ResolutionsPerRepo: 1},
			{Shape: "2x2", RecordsPerCPUSec: 65_000, PeakRSSBytes: 1 << 30, BytesPerEvent: 79, ResolutionsPerRepo: 0.9},
		},
		Fanout: []fanoutRun{{NetCPUMicros: 15.5, DeliveryP50Millis: 1, DeliveryP99Millis: 25}},
	}
	fm := medianOf(rep.Fanout)
	rep.FanoutM = &fm
	want := map[string]string{
		"bootstrap 2x2: records per CPU-second":                                     "met", // median 65,000 ≥ 60,000
		"bootstrap 2x2: records/s":                                                  "",    // informational
		"bootstrap 2x2: repos/s":                                                    "",
		"bootstrap 2x2: DID resolutions per repo":                                   "met",    // median 1 ≤ 1
		"bootstrap 2x2: peak RSS":                                                   "met",    // median 1 GiB ≤ 1.5 GiB
		"archive 2x2: bytes on disk per archived event, compacted":                  "met",    // median 80 ≤ 80
		"archive 2x2: the same, indexes apart (event rows and state)":               "",       // informational
		"archive 2x2: bytes on disk per live record, after the end-of-merging pass": "",       // informational
		"0 live subscribers at 0.00 ev/s: CPU-µs per delivered event":               "missed", // 15.5 > 15
		"live delivery latency p50 (backstream_live_delivery_seconds)":              "met",
		"live delivery latency p99 (backstream_live_delivery_seconds)":              "met", // 25 ≤ 25
	}
	rows := buildTable(rep, options{workers: 100})
	if len(rows) != len(want) {
		t.Errorf("%d rows, want %d", len(rows), len(want))
	}
	for _, r := range rows {
		w, ok := want[r.Measure]
		if !ok {
			t.Errorf("unexpected row %q", r.Measure)
			continue
		}
		got := ""
		if r.Met != nil {
			got = map[bool]string{true: "met", false: "missed"}[*r.Met]
		}
		if got != w {
			t.Errorf("%s: %q, want %q (median %v, target %s)", r.Measure, got, w, r.Median, r.Target)
		}
	}
}

// TestSmallSystem runs the ingest and fan-out parts once on small networks
// with the real binary: every preloaded event archived (none stale), the
// replay reads the whole archive, and live subscribers receive events with
// delivery latencies observed.
func TestSmallSystem(t *testing.T) {
	citest.Long(t, "builds the binary and runs devnet and serve processes")
	bin := filepath.Join(t.TempDir(), "backstream")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/backstream/backstream/cmd/backstream").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := options{bin: bin, runs: 1, timeout: 3 * time.Minute, preload: 30000, ingestAccounts: 200,
		fanoutAccounts: 100, liveRate: 200, subscribers: 5, window: 2 * time.Second, idleWindow: time.Second}
	ctx := context.Background()

	ing, err := runIngest(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	r := ing[0]
	t.Logf("ingest: %+v", r)
	if r.RowsStale != 0 || r.RowsArchived < int64(o.preload) || r.FramesDropped != 0 {
		t.Errorf("ingest archived %d rows, %d stale, %d dropped; want ≥ %d archived, none stale or dropped",
			r.RowsArchived, r.RowsStale, r.FramesDropped, o.preload)
	}
	if r.ReplayEvents != r.RowsArchived {
		t.Errorf("replay read %d events, the archive holds %d", r.ReplayEvents, r.RowsArchived)
	}
	if r.EventsPerSec <= 0 || r.CPUSecsPerMillion <= 0 {
		t.Errorf("ingest rates not measured: %+v", r)
	}

	fo, err := runFanout(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	f := fo[0]
	t.Logf("fanout: %+v", f)
	if f.Delivered == 0 || f.DeliveryObserved == 0 || f.DeliveryP99Millis <= 0 || f.DeliveryP99Millis < f.DeliveryP50Millis {
		t.Errorf("fanout not measured: %+v", f)
	}
	// Every subscriber gets every live event: deliveries ≈ subscribers ×
	// archived rows over the window (within the window edges).
	perSub := f.DeliveredPerSec / float64(o.subscribers)
	if perSub < 0.5*f.ArchivedRowsPerSec || perSub > 2*f.ArchivedRowsPerSec {
		t.Errorf("%.0f events/s per subscriber, the archive took %.0f rows/s", perSub, f.ArchivedRowsPerSec)
	}
}

// TestFleetRatioRow: a shape measured in both modes gets the hosts/relay
// records-per-CPU-second row, met at ≥ 0.95 and missed below; each mode's
// rows carry its name.
func TestFleetRatioRow(t *testing.T) {
	for _, tc := range []struct {
		hosts float64
		met   bool
	}{{96_000, true}, {94_000, false}} {
		rep := report{Runs: []bootRun{
			{Shape: "2x2", Mode: "relay", RecordsPerCPUSec: 100_000},
			{Shape: "2x2", Mode: "hosts", RecordsPerCPUSec: tc.hosts},
		}}
		var ratio *row
		rows := buildTable(rep, options{workers: 100})
		for i, r := range rows {
			if r.Measure == "bootstrap 2x2: records per CPU-second, hosts mode / relay mode" {
				ratio = &rows[i]
			}
		}
		if ratio == nil || ratio.Met == nil || *ratio.Met != tc.met {
			t.Fatalf("hosts %v vs relay 100000: ratio row %+v, want met=%v", tc.hosts, ratio, tc.met)
		}
		if rows[0].Measure != "bootstrap 2x2 relay mode: records per CPU-second" {
			t.Fatalf("first row %q", rows[0].Measure)
		}
	}
}
