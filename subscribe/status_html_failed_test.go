package subscribe

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStatusPageFailedSections: the HTML page shows the failed repos by
// class (most first) and the hosts with most failures from the report.
func TestStatusPageFailedSections(t *testing.T) {
	m := map[string]any{
		"phase": "steady_state",
		"failed": map[string]any{
			"by_class":  map[string]any{"timeout": float64(1), "transient": float64(7)},
			"top_hosts": []any{map[string]any{"host": "pds1.test", "failed": float64(6)}, map[string]any{"host": "pds2.test", "failed": float64(2)}},
		},
	}
	rec := httptest.NewRecorder()
	writeStatusHTML(rec, m)
	body := rec.Body.String()
	for _, want := range []string{`id="failed-classes"`, `id="failed-hosts"`, "<td>pds1.test</td><td>6</td>"} {
		if !strings.Contains(body, want) {
			t.Fatalf("page lacks %q:\n%s", want, body)
		}
	}
	if strings.Index(body, "<td>transient</td>") > strings.Index(body, "<td>timeout</td>") {
		t.Fatalf("classes not most-first:\n%s", body)
	}
}
