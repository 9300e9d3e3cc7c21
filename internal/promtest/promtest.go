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
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
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
