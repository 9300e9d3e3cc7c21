package promtest

// series.go: assertions that a series exists (as opposed to Value, which
// reads a missing series as 0) — for metrics pre-initialised at
// registration so alerts and dashboards never see "no data".

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Lookup returns the value of the series of name whose labels are exactly
// labels (a counter's or gauge's value, a histogram's sample count), and
// whether reg exposes it.
func Lookup(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	return find(t, reg, name, labels, true)
}

// RequireZero fails t for every label set in sets for which reg exposes no
// series of name, or one that is not 0.
func RequireZero(t testing.TB, reg prometheus.Gatherer, name string, sets ...map[string]string) {
	t.Helper()
	for _, labels := range sets {
		v, ok := Lookup(t, reg, name, labels)
		switch {
		case !ok:
			t.Errorf("%s%s: no series (alerts and dashboards would see no data)", name, fmtLabels(labels))
		case v != 0:
			t.Errorf("%s%s = %v, want 0 right after registration", name, fmtLabels(labels), v)
		}
	}
}

// Label is one label set per value of one label:
// Label("class", "a", "b") = [{class="a"}, {class="b"}].
func Label(name string, values ...string) []map[string]string {
	out := make([]map[string]string, len(values))
	for i, v := range values {
		out[i] = map[string]string{name: v}
	}
	return out
}

// Cross is every combination of a value of label a with a value of label b.
func Cross(a string, as []string, b string, bs []string) []map[string]string {
	var out []map[string]string
	for _, x := range as {
		for _, y := range bs {
			out = append(out, map[string]string{a: x, b: y})
		}
	}
	return out
}

func fmtLabels(labels map[string]string) string {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, labels[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
}
