package subscribe

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestStatusPageInlinesReport: the page carries the report inline, as JSON
// that parses back to it, and a value holding "</script>" (a relay URL or
// an error message is upstream text) cannot end the element it sits in.
func TestStatusPageInlinesReport(t *testing.T) {
	hostile := `</script><script>alert(1)</script><!--`
	m := map[string]any{"phase": "steady_state", "relay": hostile}
	rec := httptest.NewRecorder()
	writeStatusHTML(rec, m)
	body := rec.Body.String()
	if strings.Contains(body, "alert(1)</script>") || strings.Contains(body, string(statusPlaceholder)) {
		t.Fatalf("the report is not safely inlined:\n%s", body)
	}
	const open = `<script id="status-data" type="application/json">`
	i := strings.Index(body, open)
	if i < 0 {
		t.Fatal("no inline report")
	}
	inline := body[i+len(open):]
	inline = inline[:strings.Index(inline, "</script>")]
	var got map[string]any
	if err := json.Unmarshal([]byte(inline), &got); err != nil || got["relay"] != hostile {
		t.Fatalf("inline report %q: %v", inline, err)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
}
