package main

// table.go owns the result table: medians of runs, the targets
// and the met/missed verdict of each row.

import (
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strings"
	"text/tabwriter"
)

// target is a bound on a row's median: at least (Min) or at most (!Min)
// Bound. The zero target (Bound 0) means the row is informational.
type target struct {
	Min   bool
	Bound float64
}

func atLeast(v float64) target { return target{Min: true, Bound: v} }
func atMost(v float64) target  { return target{Min: false, Bound: v} }

func (t target) none() bool { return t.Bound == 0 }

// met reports whether v meets t.
func (t target) met(v float64) bool {
	if t.Min {
		return v >= t.Bound
	}
	return v <= t.Bound
}

// row is one line of the table.
type row struct {
	Measure string  `json:"measure"`
	Unit    string  `json:"unit"`
	Median  float64 `json:"median"`
	Min     float64 `json:"min"`
	Max     float64 `json:"max"`
	Target  string  `json:"target,omitempty"` // e.g. "≥ 60000"
	Met     *bool   `json:"met,omitempty"`    // nil: no target
	Note    string  `json:"note,omitempty"`
}

// newRow makes a row from the runs' values.
func newRow(measure, unit string, vals []float64, t target, note string) row {
	r := row{Measure: measure, Unit: unit, Note: note}
	if len(vals) == 0 {
		return r
	}
	r.Median = median(vals)
	r.Min, r.Max = vals[0], vals[0]
	for _, v := range vals {
		r.Min, r.Max = math.Min(r.Min, v), math.Max(r.Max, v)
	}
	if !t.none() {
		op := "≤"
		if t.Min {
			op = "≥"
		}
		r.Target = op + " " + num(t.Bound)
		m := t.met(r.Median)
		r.Met = &m
	}
	return r
}

// Targets (2-core machine).
const (
	targetBootstrapRecordsPerCPUSec = 60_000
	targetPeakRSSMiB                = 1536
	targetBytesPerRecord            = 80
	targetIngestEventsPerSec        = 25_000
	targetReplayEventsPerSec        = 100_000
	targetReplayCPUMicros           = 8
	targetFanoutCPUMicros           = 15
	targetDeliveryMillis            = 25
)

// vals extracts one value per run.
func vals[R any](rs []R, get func(R) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = get(r)
	}
	return out
}

// targetFleetCPURatio: a hosts-mode bootstrap's records per CPU-second are
// at least 95% of relay mode's on the same shape.
const targetFleetCPURatio = 0.95

// label names a bootstrap run's rows: its shape, and its mode when set.
func (r bootRun) label() string {
	if r.Mode == "" {
		return r.Shape
	}
	return r.Shape + " " + r.Mode + " mode"
}

// fleetRows compares, per shape measured in both modes, the median records
// per CPU-second of hosts mode with relay mode's.
func fleetRows(runs []bootRun) []row {
	med := map[string]map[string][]float64{} // shape → mode → records per CPU-s
	var shapes []string
	for _, r := range runs {
		if med[r.Shape] == nil {
			med[r.Shape] = map[string][]float64{}
			shapes = append(shapes, r.Shape)
		}
		med[r.Shape][r.Mode] = append(med[r.Shape][r.Mode], r.RecordsPerCPUSec)
	}
	var rows []row
	for _, sh := range shapes {
		h, rl := med[sh]["hosts"], med[sh]["relay"]
		if len(h) == 0 || len(rl) == 0 || median(rl) == 0 {
			continue
		}
		rows = append(rows, newRow("bootstrap "+sh+": records per CPU-second, hosts mode / relay mode", "×",
			[]float64{median(h) / median(rl)}, atLeast(targetFleetCPURatio), ""))
	}
	return rows
}

// buildTable is the report's table: one row per measure, in a fixed order.
func buildTable(rep report, o options) []row {
	var rows []row
	byShape := map[string][]bootRun{}
	var order []string
	for _, r := range rep.Runs {
		k := r.label()
		if _, ok := byShape[k]; !ok {
			order = append(order, k)
		}
		byShape[k] = append(byShape[k], r)
	}
	for _, sh := range order {
		rs := byShape[sh]
		rows = append(rows,
			newRow("bootstrap "+sh+": records per CPU-second", "rec/CPU-s",
				vals(rs, func(r bootRun) float64 { return r.RecordsPerCPUSec }), atLeast(targetBootstrapRecordsPerCPUSec), ""),
			newRow("bootstrap "+sh+": records/s", "rec/s",
				vals(rs, func(r bootRun) float64 { return r.RecordsPerSec }), target{}, ""),
			newRow("bootstrap "+sh+": repos/s", "repos/s",
				vals(rs, func(r bootRun) float64 { return r.ReposPerSec }), target{}, ""),
			newRow("bootstrap "+sh+": DID resolutions per repo", "/repo",
				vals(rs, func(r bootRun) float64 { return r.ResolutionsPerRepo }), atMost(1), "0 with --verify off"),
			newRow("bootstrap "+sh+": peak RSS", "MiB",
				vals(rs, func(r bootRun) float64 { return float64(r.PeakRSSBytes) / (1 << 20) }), atMost(targetPeakRSSMiB),
				fmt.Sprintf("%d workers", o.workers)),
		)
	}
	rows = append(rows, fleetRows(rep.Runs)...)
	for _, sh := range order {
		rs := byShape[sh]
		rows = append(rows, newRow("archive "+sh+": bytes on disk per archived event, compacted", "B",
			vals(rs, func(r bootRun) float64 { return r.BytesPerEvent }), atMost(targetBytesPerRecord),
			fmt.Sprintf("%d events", rs[0].ArchiveEvents)),
			newRow("archive "+sh+": the same, indexes apart (event rows and state)", "B",
				vals(rs, func(r bootRun) float64 { return r.FirstChainPerEvent }), target{},
				fmt.Sprintf("compaction index %.1f B/event, replay index %.1f", perEvent(int64(rs[0].IndexBytes.Compaction), rs[0].ArchiveEvents), perEvent(int64(rs[0].IndexBytes.Replay), rs[0].ArchiveEvents))),
			newRow("archive "+sh+": bytes on disk per live record, after the end-of-merging pass", "B",
				vals(rs, func(r bootRun) float64 { return r.BytesPerLiveRecord }), target{},
				fmt.Sprintf("%d records still exist upstream; %d of %d events left in ev/", rs[0].LiveRecords, rs[0].ArchiveRows, rs[0].ArchiveEvents)))
	}
	if rs := rep.Ingest; len(rs) > 0 {
		m := rep.IngestM
		rows = append(rows,
			newRow("live ingest: events/s at saturation, synced commits", "ev/s",
				vals(rs, func(r ingestRun) float64 { return r.EventsPerSec }), atLeast(targetIngestEventsPerSec),
				fmt.Sprintf("%d-event history; rows archived %d, stale %d, dropped %d", m.HistoryEvents, m.RowsArchived, m.RowsStale, m.FramesDropped)),
			newRow("live ingest: CPU-seconds per million events", "CPU-s/M",
				vals(rs, func(r ingestRun) float64 { return r.CPUSecsPerMillion }), target{},
				fmt.Sprintf("serve %.2f cores, the network %.2f; %d synced batches, mean commit %.2f ms; DID resolutions %.4f per event (#identity invalidations %.4f)",
					m.CPUSecs/m.WallSecs, m.NetworkCPUSecs/m.WallSecs, m.Batches, m.MeanCommitMillis, m.ResolutionsPerEvent, m.InvalidationsPerEvent)),
			newRow("replay from cursor 0, 1 subscriber: events/s", "ev/s",
				vals(rs, func(r ingestRun) float64 { return r.ReplayEventsPerSec }), atLeast(targetReplayEventsPerSec),
				fmt.Sprintf("%d events", m.ReplayEvents)),
			newRow("replay from cursor 0, 1 subscriber: CPU-µs per event", "µs",
				vals(rs, func(r ingestRun) float64 { return r.ReplayNetCPUMicros }), atMost(targetReplayCPUMicros),
				fmt.Sprintf("net of idle %.3f CPU-s/s; gross %.2f", m.IdleCPUPerSec, m.ReplayCPUMicros)),
		)
	}
	if rs := rep.Fanout; len(rs) > 0 {
		m := rep.FanoutM
		rows = append(rows,
			newRow(fmt.Sprintf("%d live subscribers at %s ev/s: CPU-µs per delivered event", m.Subscribers, num(m.NetworkRate)), "µs",
				vals(rs, func(r fanoutRun) float64 { return r.NetCPUMicros }), atMost(targetFanoutCPUMicros),
				fmt.Sprintf("net of idle %.3f CPU-s/s; gross %.2f; %s delivered/s%s", m.IdleCPUPerSec, m.CPUMicros, num(m.DeliveredPerSec),
					disconnectNote(rs))),
			newRow("live delivery latency p50 (backstream_live_delivery_seconds)", "ms",
				vals(rs, func(r fanoutRun) float64 { return r.DeliveryP50Millis }), atMost(targetDeliveryMillis), ""),
			newRow("live delivery latency p99 (backstream_live_delivery_seconds)", "ms",
				vals(rs, func(r fanoutRun) float64 { return r.DeliveryP99Millis }), atMost(targetDeliveryMillis),
				fmt.Sprintf("%d observations", m.DeliveryObserved)),
		)
	}
	return rows
}

// num formats v compactly: thousands separated, decimals only below 100.
func num(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.Abs(v) < 10:
		return fmt.Sprintf("%.2f", v)
	case math.Abs(v) < 100:
		return fmt.Sprintf("%.1f", v)
	}
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func printTable(w io.Writer, rep report) {
	fmt.Fprintf(w, "\nbackstream system benchmark, %s, commit %s, %s CPUs, binary CGO_ENABLED=%v, %v runs each (median, range); CPU and RSS of the serve process only; %.0f s\n\n",
		rep.Date, rep.Commit, rep.Host["cpus"], rep.Settings["binary_cgo"], rep.Settings["runs"], rep.Elapsed)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tmedian\tunit\trange\ttarget\tresult\tnote")
	missed := 0
	for _, r := range rep.Table {
		verdict := ""
		if r.Met != nil {
			verdict = "met"
			if !*r.Met {
				verdict = "MISSED"
				missed++
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s–%s\t%s\t%s\t%s\n", r.Measure, num(r.Median), r.Unit, num(r.Min), num(r.Max), r.Target, verdict, r.Note)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d of %d targets missed\n", missed, countTargets(rep.Table))
}

func countTargets(rows []row) int {
	n := 0
	for _, r := range rows {
		if r.Met != nil {
			n++
		}
	}
	return n
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// medianOf is the run whose every numeric field is the median of rs's (the
// Run field is 0); other fields are rs[0]'s.
func medianOf[R any](rs []R) R {
	var out R
	if len(rs) == 0 {
		return out
	}
	out = rs[0]
	ov := reflect.ValueOf(&out).Elem()
	for i := 0; i < ov.NumField(); i++ {
		f := ov.Field(i)
		get := func(r R) float64 {
			v := reflect.ValueOf(r).Field(i)
			switch v.Kind() {
			case reflect.Int, reflect.Int64:
				return float64(v.Int())
			case reflect.Uint64:
				return float64(v.Uint())
			case reflect.Float64:
				return v.Float()
			}
			return 0
		}
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(math.Round(median(vals(rs, get)))))
		case reflect.Uint64:
			f.SetUint(uint64(math.Round(median(vals(rs, get)))))
		case reflect.Float64:
			f.SetFloat(median(vals(rs, get)))
		}
	}
	if f := ov.FieldByName("Run"); f.IsValid() {
		f.SetInt(0)
	}
	return out
}

// disconnectNote names the runs in which serve disconnected subscribers.
func disconnectNote(rs []fanoutRun) string {
	n := 0
	for _, r := range rs {
		n += r.DisconnectedClients
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("; %d subscribers disconnected by serve over the runs", n)
}
