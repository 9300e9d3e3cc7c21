package promtest

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLookupIsExactValueIsSubset: Lookup finds only a series with exactly
// the given labels; Value takes the first series including them, and 0 for
// none.
func TestLookupIsExactValueIsSubset(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"a", "b"})
	reg.MustRegister(c)
	c.WithLabelValues("1", "2").Add(3)
	if _, ok := Lookup(t, reg, "x_total", map[string]string{"a": "1"}); ok {
		t.Error("Lookup matched a series with more labels than asked")
	}
	if v, ok := Lookup(t, reg, "x_total", map[string]string{"a": "1", "b": "2"}); !ok || v != 3 {
		t.Errorf("Lookup exact: %v %v", v, ok)
	}
	if _, ok := Lookup(t, reg, "x_total", map[string]string{"a": "1", "c": "2"}); ok {
		t.Error("Lookup matched a series with another label")
	}
	if v := Value(t, reg, "x_total", map[string]string{"a": "1"}); v != 3 {
		t.Errorf("Value by subset: %v", v)
	}
	if v := Value(t, reg, "x_total", map[string]string{"a": "9"}); v != 0 {
		t.Errorf("Value of no series: %v", v)
	}
}
