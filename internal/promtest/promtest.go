// Package promtest holds test helpers over Prometheus registries, shared by
// the packages' tests (nothing in production imports it).
package promtest

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Value gathers reg and returns the value of the first series of name whose
// labels include every pair of labels: a counter's or a gauge's value, a
// histogram's sample count. A series that does not exist is 0.
func Value(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	v, _ := find(t, reg, name, labels, false)
	return v
}

// Sum gathers reg and returns the sum over every series of name (counters
// and gauges): a total across all label values.
func Sum(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return total
}

// find gathers reg and returns the value of the first series of name whose
// labels include every pair of labels (with exact, whose labels are exactly
// labels), and whether there is one.
func find(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string, exact bool) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			if exact && len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, lp := range m.GetLabel() {
				v, ok := labels[lp.GetName()]
				if ok && v != lp.GetValue() || exact && !ok {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
			return 0, true
		}
	}
	return 0, false
}

// Eventually polls cond every 10 ms until it holds, failing the test with
// what after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
