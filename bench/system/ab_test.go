package main

import (
	"strings"
	"testing"
)

// TestPrintABRatiosAndMedians: each pair's B/A ratio is B's value over
// A's of the same pair (not of medians), and the median row is the median
// of those ratios.
func TestPrintABRatiosAndMedians(t *testing.T) {
	run := func(cpu float64, rss int64) abRun {
		return abRun{Records: 1_000_000, CPUAtComplete: cpu, CPUAtSteady: cpu, PeakRSSBytes: rss, Events: 1, DataBytesLeft: 1, DataBytesRestart: 1}
	}
	as := []abRun{run(10, 400<<20), run(20, 400<<20), run(10, 400<<20)}
	bs := []abRun{run(5, 100<<20), run(12, 200<<20), run(9, 300<<20)}
	var out strings.Builder
	printAB(&out, shape{2000, 200}, as, bs)
	for _, want := range []string{
		"| CPU-µs/record at bootstrap complete | 1 | 10.00 | 5.00 | 0.500 |",
		"| CPU-µs/record at bootstrap complete | 2 | 20.00 | 12.00 | 0.600 |",
		"| CPU-µs/record at bootstrap complete | 3 | 10.00 | 9.00 | 0.900 |",
		"| **CPU-µs/record at bootstrap complete** | median | 10.00 | 9.00 | **0.600** |",
		"| **peak RSS (VmHWM)** | median | 400.0 MiB | 200.0 MiB | **0.500** |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in\n%s", want, out.String())
		}
	}
}

// TestPeakOverBound: the data dir's peak is compared with 1.2× the
// compacted store plus 64 MiB, and a run that measured neither prints 0.
func TestPeakOverBound(t *testing.T) {
	for _, tc := range []struct {
		peak, compacted int64
		want            float64
	}{
		{(12 + 64) << 20, 10 << 20, 1},
		{(24 + 64) << 20, 10 << 20, (24.0 + 64) / (12 + 64)},
		{0, 10 << 20, 0},
		{100 << 20, 0, 0},
	} {
		got := peakOverBound(abRun{DataBytesPeak: tc.peak, CompactedBytes: tc.compacted})
		if d := got - tc.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("peak %d, compacted %d: %.4f, want %.4f", tc.peak, tc.compacted, got, tc.want)
		}
	}
}
