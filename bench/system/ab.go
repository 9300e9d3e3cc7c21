package main

// ab.go owns the A/B bootstrap comparison (`make bench-ab`,
// scripts/bench-ab.sh): two serve binaries, the reference (A) and the
// candidate (B), bootstrap the same devnet worlds in alternating runs, and
// each pair's B/A ratios are printed with their medians.
//
// Both sides of a pair get a fresh devnet of the same shape and seed, run by
// the candidate binary (-bin), so that only serve differs. Each run measures
// the serve process alone: CPU-seconds per bootstrap record when
// backfill_completed_at appears and again when the phase is steady_state,
// peak RSS (VmHWM) at steady state, the data dir's bytes on disk as serve
// left it after a clean stop, and again after a restart (serve started on
// the same data dir, back to steady_state, stopped); the data dir's peak
// sampled while the first serve ran, over its bound of 1.2× the store
// after a full compaction plus 64 MiB; and that compacted store's bytes
// per archived event, all of them, then the first chain's (event rows and
// state) and each index's apart. Before the pairs each side makes
// -ab-warmups runs of the first shape, measured and discarded (warmUpAB).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/backstream/backstream/archive"
)

// abRun is one side of one pair.
type abRun struct {
	Side             string  `json:"side"` // "A" (reference) or "B" (candidate)
	Shape            string  `json:"shape"`
	Pair             int     `json:"pair"`
	Records          int64   `json:"records"`
	Events           int64   `json:"archive_events"`
	CPUAtComplete    float64 `json:"cpu_seconds_at_bootstrap_complete"`
	CPUAtSteady      float64 `json:"cpu_seconds_at_steady_state"`
	PeakRSSBytes     int64   `json:"peak_rss_bytes"`
	DataBytesLeft    int64   `json:"data_dir_bytes_as_left"`
	DataBytesRestart int64   `json:"data_dir_bytes_after_restart"`
	// DataBytesPeak is the data dir's largest size on disk sampled while
	// serve ran (every 50 ms, until steady state); CompactedBytes the
	// store's after the restart, flushed and fully compacted. The data dir
	// must stay within 1.2× the compacted size plus 64 MiB at every moment.
	DataBytesPeak  int64 `json:"data_dir_bytes_peak"`
	CompactedBytes int64 `json:"compacted_store_bytes"`
	// IndexBytes is the compacted store's two indexes (compact); the
	// first chain is the rest.
	IndexBytes archive.IndexUsage `json:"index_bytes"`
}

// The compared quantities: name, unit and how to read them from a run.
var abMetrics = []struct {
	name string
	get  func(abRun) float64
	unit func(float64) string
}{
	{"CPU-µs/record at bootstrap complete", func(r abRun) float64 { return perRecord(r.CPUAtComplete, r.Records) }, micro},
	{"CPU-µs/record at steady state", func(r abRun) float64 { return perRecord(r.CPUAtSteady, r.Records) }, micro},
	{"peak RSS (VmHWM)", func(r abRun) float64 { return float64(r.PeakRSSBytes) }, mibF},
	{"data dir as left", func(r abRun) float64 { return float64(r.DataBytesLeft) }, mibF},
	{"data dir after restart", func(r abRun) float64 { return float64(r.DataBytesRestart) }, mibF},
	{"data dir B/event as left", func(r abRun) float64 { return perEvent(r.DataBytesLeft, r.Events) }, plain},
	{"data dir B/event after restart", func(r abRun) float64 { return perEvent(r.DataBytesRestart, r.Events) }, plain},
	{"data dir peak during bootstrap", func(r abRun) float64 { return float64(r.DataBytesPeak) }, mibF},
	{"compacted store B/event", func(r abRun) float64 { return perEvent(r.CompactedBytes, r.Events) }, plain},
	{"compacted first chain (indexes apart) B/event", func(r abRun) float64 { return perEvent(r.CompactedBytes-int64(r.IndexBytes.Total()), r.Events) }, plain},
	{"compacted compaction index B/event", func(r abRun) float64 { return perEvent(int64(r.IndexBytes.Compaction), r.Events) }, plain},
	{"compacted replay index B/event", func(r abRun) float64 { return perEvent(int64(r.IndexBytes.Replay), r.Events) }, plain},
	{"data dir peak / (1.2 × compacted + 64 MiB), ≤ 1", func(r abRun) float64 { return peakOverBound(r) }, ratioF},
}

// peakOverBound is the data dir's peak over its bound, 1.2× the compacted
// store plus 64 MiB (0 when either is unknown).
func peakOverBound(r abRun) float64 {
	if r.DataBytesPeak <= 0 || r.CompactedBytes <= 0 {
		return 0
	}
	return float64(r.DataBytesPeak) / (1.2*float64(r.CompactedBytes) + 64<<20)
}

func perRecord(cpu float64, recs int64) float64 {
	if recs <= 0 {
		return 0
	}
	return cpu / float64(recs) * 1e6
}

func perEvent(b, events int64) float64 {
	if events <= 0 {
		return 0
	}
	return float64(b) / float64(events)
}

func micro(v float64) string  { return fmt.Sprintf("%.2f", v) }
func mibF(v float64) string   { return fmt.Sprintf("%.1f MiB", v/(1<<20)) }
func plain(v float64) string  { return fmt.Sprintf("%.1f", v) }
func ratioF(v float64) string { return fmt.Sprintf("%.3f", v) }

// runAB runs o.runs pairs per shape, A then B then A ..., alternating which
// side goes first in each pair, and prints the table to w.
func runAB(ctx context.Context, o options, refBin string, w io.Writer) ([]abRun, error) {
	if err := warmUpAB(ctx, o, refBin); err != nil {
		return nil, err
	}
	var all []abRun
	for _, sh := range o.shapes {
		var as, bs []abRun
		for i := 1; i <= o.runs; i++ {
			order := []string{"A", "B"}
			if i%2 == 0 {
				order = []string{"B", "A"}
			}
			for _, side := range order {
				logf("A/B %s pair %d/%d: %s ...", sh, i, o.runs, side)
				r, err := measureSide(ctx, o, refBin, sh, side)
				if err != nil {
					return all, fmt.Errorf("A/B %s pair %d side %s: %w", sh, i, side, err)
				}
				r.Side, r.Shape, r.Pair = side, sh.String(), i
				logf("A/B %s pair %d %s: %d records, %.2f CPU-µs/record at complete, %.2f at steady, peak RSS %s, data dir %s as left, %s after restart, %s at peak, %s compacted",
					sh, i, side, r.Records, perRecord(r.CPUAtComplete, r.Records), perRecord(r.CPUAtSteady, r.Records),
					mib(r.PeakRSSBytes), mib(r.DataBytesLeft), mib(r.DataBytesRestart), mib(r.DataBytesPeak), mib(r.CompactedBytes))
				if side == "A" {
					as = append(as, r)
				} else {
					bs = append(bs, r)
				}
				all = append(all, r)
			}
		}
		printAB(w, sh, as, bs)
	}
	return all, nil
}

// warmUpAB runs o.warmups bootstraps of the first shape by each side,
// measured and discarded. Pair 1 runs A first, and A's first run of a
// sitting is often slow (b70f9d8's measured 8.97 and 9.20 CPU-µs a record
// on 2,000 × 200 where its later runs gave 5.05–6.63): without a warm-up
// pair 1 would favour B. Whether it is the sitting's first run or each
// binary's was not measured, so both sides warm up.
func warmUpAB(ctx context.Context, o options, refBin string) error {
	if len(o.shapes) == 0 {
		return nil
	}
	sh := o.shapes[0]
	for i := 1; i <= o.warmups; i++ {
		for _, side := range []string{"A", "B"} {
			logf("A/B warm-up %d/%d (discarded): %s %s ...", i, o.warmups, sh, side)
			r, err := measureSide(ctx, o, refBin, sh, side)
			if err != nil {
				return fmt.Errorf("A/B warm-up %s side %s: %w", sh, side, err)
			}
			logf("A/B warm-up %s %s: %.2f CPU-µs/record at complete (discarded)", sh, side, perRecord(r.CPUAtComplete, r.Records))
		}
	}
	return nil
}

// printAB prints one shape's per-pair values and B/A ratios and their
// medians.
func printAB(w io.Writer, sh shape, as, bs []abRun) {
	fmt.Fprintf(w, "\n## %s: A = reference, B = candidate; %d pairs (B/A < 1 is better for every row)\n\n", sh, len(as))
	fmt.Fprintf(w, "| metric | pair | A | B | B/A |\n|---|---|---|---|---|\n")
	for _, m := range abMetrics {
		var av, bv, ratios []float64
		for i := range as {
			a, b := m.get(as[i]), m.get(bs[i])
			av, bv = append(av, a), append(bv, b)
			ratio := 0.0
			if a > 0 {
				ratio = b / a
			}
			ratios = append(ratios, ratio)
			fmt.Fprintf(w, "| %s | %d | %s | %s | %.3f |\n", m.name, i+1, m.unit(a), m.unit(b), ratio)
		}
		fmt.Fprintf(w, "| **%s** | median | %s | %s | **%.3f** |\n", m.name, m.unit(median(av)), m.unit(median(bv)), median(ratios))
	}
}

// measureSide is measureAB of side "A" (the reference, refBin) or "B" (the
// candidate, o.bin), with that side's serve arguments.
func measureSide(ctx context.Context, o options, refBin string, sh shape, side string) (abRun, error) {
	bin := o.bin
	if side == "A" {
		bin = refBin
	}
	return measureAB(ctx, o, bin, sh, o.sideArgs[side]...)
}

// measureAB runs one bootstrap of sh by serve binary bin, with extra
// appended to its arguments, against a fresh devnet run by o.bin, then
// restarts serve on the same data dir.
func measureAB(parent context.Context, o options, bin string, sh shape, extra ...string) (r abRun, err error) {
	ctx, cancel := context.WithTimeout(parent, o.timeout)
	defer cancel()
	w, err := startBootWorld(ctx, o, bin, sh, extra...)
	if err != nil {
		return r, err
	}
	defer w.close()
	serve, data := w.serve, w.data
	if err := followBootstrap(ctx, serve, w.base, w.admin, data, &r); err != nil {
		return r, err
	}
	if err := serve.stop(time.Minute); err != nil {
		return r, err
	}
	if r.DataBytesLeft, _, err = dirSize(data); err != nil {
		return r, err
	}

	again, base, _, err := startServe(bin, w.dir, "serve-restart", w.relay, data, w.serveArgs...)
	if err != nil {
		return r, err
	}
	defer again.kill()
	if _, err := waitSteady(ctx, &http.Client{Timeout: 5 * time.Second}, again, base); err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	if err := again.stop(time.Minute); err != nil {
		return r, err
	}
	if r.DataBytesRestart, _, err = dirSize(data); err != nil {
		return r, err
	}
	if _, r.IndexBytes, err = compact(data); err != nil {
		return r, err
	}
	if r.CompactedBytes, _, err = dirSize(filepath.Join(data, "store")); err != nil {
		return r, err
	}
	return r, w.devnet.stop(10 * time.Second)
}

// followBootstrap polls serve until steady_state, recording its CPU when
// the bootstrap completes and at steady state, its peak RSS and the peak
// size of its data dir.
func followBootstrap(ctx context.Context, serve *proc, base, admin, data string, r *abRun) error {
	c := &http.Client{Timeout: 5 * time.Second}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("no steady_state: %w (serve log: %s)", ctx.Err(), tail(serve.log.Name()))
		case <-serve.exited:
			return serve.alive()
		case <-tick.C:
		}
		// A file a compaction removes during the walk fails that sample only.
		if n, _, err := dirSize(data); err == nil {
			r.DataBytesPeak = max(r.DataBytesPeak, n)
		}
		cpu, cpuErr := serve.cpu()
		var st status
		if err := getJSON(c, base+"/status", &st); err != nil || cpuErr != nil {
			continue
		}
		if r.Records == 0 && st.BackfillCompletedAt != nil {
			r.CPUAtComplete = cpu
			m, err := scrape(c, admin+"/metrics")
			if err != nil {
				return err
			}
			recs, ok := m.sum("backstream_backfill_records_total")
			if !ok || recs <= 0 {
				return errors.New("/metrics: no backstream_backfill_records_total at bootstrap completion")
			}
			r.Records = int64(recs)
		}
		if r.Records > 0 && st.Phase == "steady_state" {
			r.CPUAtSteady = cpu
			var err error
			if r.PeakRSSBytes, err = vmHWM(serve.pid()); err != nil {
				return err
			}
			r.Events = int64(st.Archive.TipSeq)
			return nil
		}
	}
}

// mainAB is the A/B mode of the command: the table on stdout, the runs as
// JSON in o.out.
func mainAB(ctx context.Context, o options, refBin string) error {
	for _, b := range []string{refBin, o.bin} {
		if _, err := os.Stat(b); err != nil {
			return fmt.Errorf("A/B: binary: %w", err)
		}
	}
	fmt.Printf("# A/B bootstrap: A = %s, B = %s; %d workers, devnet rate %g, cgo A=%q B=%q\n",
		strings.Join(append([]string{refBin}, o.sideArgs["A"]...), " "),
		strings.Join(append([]string{o.bin}, o.sideArgs["B"]...), " "),
		o.workers, o.rate, binaryCgo(refBin), binaryCgo(o.bin))
	runs, err := runAB(ctx, o, refBin, os.Stdout)
	if o.out != "" && len(runs) > 0 {
		if err := os.MkdirAll(o.out, 0o755); err != nil {
			return err
		}
		path := filepath.Join(o.out, "ab-"+time.Now().UTC().Format("2006-01-02T150405Z")+".json")
		b, jerr := json.MarshalIndent(map[string]any{"ref": refBin, "candidate": o.bin,
			"ref_serve_args": o.sideArgs["A"], "candidate_serve_args": o.sideArgs["B"], "runs": runs}, "", "  ")
		if jerr == nil {
			jerr = os.WriteFile(path, append(b, '\n'), 0o644)
		}
		if jerr != nil {
			return errors.Join(err, jerr)
		}
		fmt.Printf("\nwritten to %s\n", path)
	}
	return err
}
