package subscribe

// This file owns the /status page for browsers: the same report as the
// JSON, as a self-contained HTML page (no external assets) that refreshes
// itself, with a progress bar for bootstrap and the repos by status.

import (
	"encoding/json"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"sort"
	"strings"
	"time"
)

// wantsHTML: the client prefers HTML (a browser), judged by Accept.
func wantsHTML(r *http.Request) bool {
	if r.URL.Query().Get("format") == "json" {
		return false
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}

type statusRow struct{ Key, Value string }

type statusPage struct {
	Phase      string
	Error      string
	Generated  string
	HasBoot    bool
	Done       int64
	Known      int64
	Percent    float64
	BootRows   []statusRow
	Repos      []statusRow
	ReposTotal string
	FailedBy   []statusRow // failed repos by error class, most first
	FailedHost []statusRow // hosts with most failed repos, as ranked by the report
	Serving    []statusRow
	Other      []statusRow
	Raw        string
}

func num(v any) (float64, bool) {
	f, ok := v.(float64)
	return f, ok
}

func show(v any) string {
	switch x := v.(type) {
	case nil:
		return "—"
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return fmt.Sprintf("%d", int64(x))
		}
		return fmt.Sprintf("%.2f", x)
	case string:
		return x
	case bool:
		return fmt.Sprint(x)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func rows(m map[string]any, skip ...string) []statusRow {
	var out []statusRow
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
next:
	for _, k := range keys {
		for _, s := range skip {
			if k == s {
				continue next
			}
		}
		out = append(out, statusRow{k, show(m[k])})
	}
	return out
}

func buildStatusPage(m map[string]any) *statusPage {
	p := &statusPage{Phase: show(m["phase"]), Generated: time.Now().UTC().Format(time.RFC3339)}
	if e, ok := m["error"].(string); ok {
		p.Error = e
	}
	if b, ok := m["bootstrap"].(map[string]any); ok {
		p.HasBoot = true
		d, _ := num(b["done"])
		k, _ := num(b["known"])
		p.Done, p.Known = int64(d), int64(k)
		if k > 0 {
			p.Percent = math.Min(100, 100*d/k)
		}
		if eta, ok := num(b["eta_seconds"]); ok && eta >= 0 {
			b["eta"] = (time.Duration(eta) * time.Second).String()
		}
		p.BootRows = rows(b)
	}
	if r, ok := m["repos"].(map[string]any); ok {
		p.ReposTotal = show(r["total"])
		p.Repos = rows(r, "total")
	}
	if f, ok := m["failed"].(map[string]any); ok {
		if byClass, ok := f["by_class"].(map[string]any); ok {
			p.FailedBy = rows(byClass)
			sort.SliceStable(p.FailedBy, func(i, j int) bool {
				a, _ := num(byClass[p.FailedBy[i].Key])
				b, _ := num(byClass[p.FailedBy[j].Key])
				return a > b
			})
		}
		if hosts, ok := f["top_hosts"].([]any); ok {
			for _, h := range hosts {
				if hm, ok := h.(map[string]any); ok {
					p.FailedHost = append(p.FailedHost, statusRow{show(hm["host"]), show(hm["failed"])})
				}
			}
		}
	}
	serving := map[string]any{}
	if sub, ok := m["subscribe"].(map[string]any); ok {
		for k, v := range sub {
			serving["subscribe."+k] = v
		}
	}
	if a, ok := m["archive"].(map[string]any); ok {
		for k, v := range a {
			serving["archive."+k] = v
		}
	}
	if c, ok := m["cursors"].(map[string]any); ok {
		for k, v := range c {
			serving["cursors."+k] = v
		}
	}
	p.Serving = rows(serving)
	p.Other = rows(m, "phase", "error", "bootstrap", "repos", "failed", "subscribe", "archive", "cursors")
	raw, _ := json.MarshalIndent(m, "", "  ")
	p.Raw = string(raw)
	return p
}

var statusTmpl = template.Must(template.New("status").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="refresh" content="5">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>backstream · {{.Phase}}</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:60em;padding:0 1em;color:#1d2330;background:#fafbfc}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.6em 0 .4em}
.phase{display:inline-block;padding:.15em .6em;border-radius:1em;background:#1d6fdc;color:#fff;font-weight:600}
.err{background:#fde8e8;border:1px solid #e0a0a0;padding:.5em;border-radius:.3em}
.bar{height:1.4em;background:#e3e7ee;border-radius:.7em;overflow:hidden}
.fill{height:100%;background:linear-gradient(90deg,#1d6fdc,#3fb27f)}
table{border-collapse:collapse;min-width:24em}td{padding:.15em .8em .15em 0;border-bottom:1px solid #e3e7ee}
td:first-child{color:#5b6577}td:last-child{font-variant-numeric:tabular-nums;text-align:right}
pre{background:#f0f2f5;padding:.8em;overflow:auto;font-size:12px}
small{color:#5b6577}
</style></head><body>
<h1>backstream <span class="phase" id="phase">{{.Phase}}</span></h1>
<small>generated {{.Generated}} · refreshes every 5 s · <a href="?format=json">JSON</a></small>
{{if .Error}}<p class="err">{{.Error}}</p>{{end}}
{{if .HasBoot}}<h2>Bootstrap</h2>
<div class="bar" role="progressbar" aria-valuenow="{{printf "%.1f" .Percent}}" aria-valuemin="0" aria-valuemax="100"><div class="fill" id="progress" style="width:{{printf "%.2f" .Percent}}%"></div></div>
<p>{{.Done}} of {{.Known}} repos terminal ({{printf "%.1f" .Percent}}%)</p>
<table>{{range .BootRows}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{end}}
{{if .Repos}}<h2>Repos by status <small>(total {{.ReposTotal}})</small></h2>
<table id="repos">{{range .Repos}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{end}}
{{if .FailedBy}}<h2>Failed repos by error class</h2>
<table id="failed-classes">{{range .FailedBy}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{end}}
{{if .FailedHost}}<h2>Hosts with most failed repos</h2>
<table id="failed-hosts">{{range .FailedHost}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{end}}
{{if .Serving}}<h2>Archive and subscribers</h2>
<table>{{range .Serving}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{end}}
{{if .Other}}<h2>More</h2>
<table>{{range .Other}}<tr><td>{{.Key}}</td><td>{{.Value}}</td></tr>{{end}}</table>{{end}}
<details><summary>raw JSON</summary><pre>{{.Raw}}</pre></details>
</body></html>
`))

func writeStatusHTML(w http.ResponseWriter, m map[string]any) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_ = statusTmpl.Execute(w, buildStatusPage(m))
}
