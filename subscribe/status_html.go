package subscribe

// This file owns the /status page for browsers: status_page.html, embedded
// in the binary (no external assets, no build step), with the report inlined
// so the page renders at once and offline; its script then polls the JSON.

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"net/http"
	"strings"
)

//go:embed status_page.html
var statusPage []byte

// statusPlaceholder is where the page takes its first report.
var statusPlaceholder = []byte("/*STATUS_JSON*/")

// wantsHTML: the client prefers HTML (a browser), judged by Accept.
func wantsHTML(r *http.Request) bool {
	if r.URL.Query().Get("format") == "json" {
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

// writeStatusHTML answers the page with m inlined. json.Marshal escapes <,
// > and &, so no value can close the script element it sits in.
func writeStatusHTML(w http.ResponseWriter, m map[string]any) {
	js, err := json.Marshal(m)
	if err != nil {
		js = []byte("{}")
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(bytes.Replace(statusPage, statusPlaceholder, js, 1))
}
