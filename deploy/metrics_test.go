package deploy

// metrics_test.go proves that what the dashboard and the alert rules query
// exists: every metric name, every label value a selector matches with = or
// a literal =~ alternation, every label a by/on/without clause groups on, in
// the /metrics of a real `backstream serve` that bootstrapped the simulated
// network (with a permanently failing repo and a retried one, so the failure
// series exist). Names outside backstream's own metrics must be PromQL
// functions or keywords, so a misspelt prefix cannot slip through.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// exposition is one scrape of /metrics: every sample name (histograms as
// _bucket/_sum/_count, summaries as name/_sum/_count) with the label sets
// of its series.
type exposition map[string][]map[string]string

func parseExposition(r io.Reader) (exposition, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	exp := exposition{}
	add := func(name string, labels map[string]string) {
		exp[name] = append(exp[name], labels)
	}
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM:
				add(name+"_bucket", withLabel(labels, "le", "+Inf"))
				add(name+"_sum", labels)
				add(name+"_count", labels)
			case dto.MetricType_SUMMARY:
				add(name, withLabel(labels, "quantile", "0.5"))
				add(name+"_sum", labels)
				add(name+"_count", labels)
			default:
				add(name, labels)
			}
		}
	}
	return exp, nil
}

func withLabel(labels map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for lk, lv := range labels {
		out[lk] = lv
	}
	return out
}

// query is one PromQL expression and where it was found.
type query struct{ where, expr string }

// dashboardQueries returns every "expr" of the dashboard's panels and the
// template variables' label_values queries.
func dashboardQueries(t *testing.T) []query {
	t.Helper()
	var dash map[string]any
	if err := json.Unmarshal(readFile(t, "deploy/grafana/dashboards/backstream.json"), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	var out []query
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			title, _ := v["title"].(string)
			if title != "" {
				path = path + "/" + title
			}
			for k, c := range v {
				if s, ok := c.(string); ok && k == "expr" {
					out = append(out, query{where: "dashboard" + path, expr: s})
					continue
				}
				walk(path, c)
			}
		case []any:
			for _, c := range v {
				walk(path, c)
			}
		}
	}
	walk("", dash["panels"])
	tmpl, _ := dash["templating"].(map[string]any)
	vars, _ := tmpl["list"].([]any)
	for _, v := range vars {
		v, _ := v.(map[string]any)
		name, _ := v["name"].(string)
		switch q := v["query"].(type) {
		case string:
			out = append(out, query{where: "dashboard variable " + name, expr: q})
		case map[string]any:
			s, _ := q["query"].(string)
			out = append(out, query{where: "dashboard variable " + name, expr: s})
		}
	}
	if len(out) < 20 {
		t.Fatalf("the dashboard has only %d queries: the walk is broken", len(out))
	}
	return out
}

// alertFile is the shape of deploy/alerts.yml.
type alertFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) alertFile {
	t.Helper()
	var f alertFile
	if err := yaml.Unmarshal(readFile(t, "deploy/alerts.yml"), &f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	return f
}

func alertQueries(t *testing.T) []query {
	t.Helper()
	var out []query
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			out = append(out, query{where: "alert " + r.Alert, expr: r.Expr})
		}
	}
	if len(out) < 10 {
		t.Fatalf("alerts.yml has only %d rules", len(out))
	}
	return out
}

// promqlWords are the PromQL functions, aggregations and keywords the
// queries may use; any other bare identifier must be a metric.
var promqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`sum min max avg count stddev stdvar topk bottomk quantile count_values group
		rate irate increase delta idelta deriv changes resets predict_linear histogram_quantile
		time timestamp vector scalar abs ceil floor round clamp clamp_min clamp_max absent absent_over_time
		avg_over_time min_over_time max_over_time sum_over_time count_over_time last_over_time quantile_over_time
		label_replace label_join sort sort_desc
		by without on ignoring group_left group_right and or unless bool offset
		label_values up`) {
		promqlWords[w] = true
	}
}

var (
	// A selector: a name, optionally with matchers in braces.
	selectorRE = regexp.MustCompile(`([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?`)
	matcherRE  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	groupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	rangeRE    = regexp.MustCompile(`\[[^\]]*\]`)
	offsetRE   = regexp.MustCompile(`\boffset\s+-?[0-9a-z]+`)
	stringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	labelVals  = regexp.MustCompile(`^\s*label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
	literalAlt = regexp.MustCompile(`^[a-zA-Z0-9_]+(\|[a-zA-Z0-9_]+)*$`)
)

// targetLabels are attached by Prometheus (or by histogram/summary
// exposition), not by backstream.
var targetLabels = map[string]bool{"instance": true, "job": true, "le": true, "quantile": true}

// checkQuery lists what q asks for that exp does not expose.
func checkQuery(q query, exp exposition) []string {
	var problems []string
	bad := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf("%s: %s\n    in %s", q.where, fmt.Sprintf(format, args...), q.expr))
	}
	if m := labelVals.FindStringSubmatch(q.expr); m != nil {
		if _, ok := exp[m[1]]; !ok {
			bad("metric %s is not exposed", m[1])
		}
		if !targetLabels[m[2]] && !hasLabel(exp[m[1]], m[2]) {
			bad("metric %s has no label %s", m[1], m[2])
		}
		return problems
	}
	expr := q.expr
	var groupings [][]string
	for _, m := range groupingRE.FindAllStringSubmatch(expr, -1) {
		var labels []string
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
		groupings = append(groupings, labels)
	}
	expr = groupingRE.ReplaceAllString(expr, "$1 ")
	expr = rangeRE.ReplaceAllString(expr, " ")
	expr = offsetRE.ReplaceAllString(expr, " ")
	var metrics []string
	for _, m := range selectorRE.FindAllStringSubmatchIndex(expr, -1) {
		name := expr[m[2]:m[3]]
		braces := ""
		if m[4] >= 0 {
			braces = expr[m[4]:m[5]]
		}
		// A number's exponent or a duration never starts an identifier
		// here (ranges and offsets are gone); skip identifiers inside string literals.
		if inString(expr, m[0]) {
			continue
		}
		if braces == "" && promqlWords[name] {
			continue
		}
		if name == "up" {
			continue // synthesized by Prometheus per target
		}
		series, ok := exp[name]
		if !ok {
			bad("metric %s is not exposed", name)
			continue
		}
		metrics = append(metrics, name)
		for _, mm := range matcherRE.FindAllStringSubmatch(braces, -1) {
			label, op, val := mm[1], mm[2], mm[3]
			if targetLabels[label] && label != "le" && label != "quantile" {
				continue
			}
			if strings.Contains(val, "$") {
				continue // a dashboard variable
			}
			switch {
			case op == "=":
				if !hasValue(series, label, val) {
					bad("no series %s{%s=%q} (values: %s)", name, label, val, values(series, label))
				}
			case op == "=~" && literalAlt.MatchString(val):
				for _, alt := range strings.Split(val, "|") {
					if !hasValue(series, label, alt) {
						bad("no series %s{%s=%q} (values: %s)", name, label, alt, values(series, label))
					}
				}
			default:
				if !hasLabel(series, label) {
					bad("metric %s has no label %s", name, label)
				}
			}
		}
	}
	if len(metrics) == 0 && !strings.Contains(q.expr, "up{") {
		bad("queries no metric")
	}
	for _, labels := range groupings {
		for _, l := range labels {
			if targetLabels[l] {
				continue
			}
			found := false
			for _, name := range metrics {
				found = found || hasLabel(exp[name], l)
			}
			if !found {
				bad("groups on label %s, which none of %v has", l, metrics)
			}
		}
	}
	return problems
}

func inString(expr string, at int) bool {
	for _, loc := range stringRE.FindAllStringIndex(expr, -1) {
		if at > loc[0] && at < loc[1] {
			return true
		}
	}
	return false
}

func hasLabel(series []map[string]string, label string) bool {
	for _, s := range series {
		if _, ok := s[label]; ok {
			return true
		}
	}
	return false
}

func hasValue(series []map[string]string, label, val string) bool {
	for _, s := range series {
		if s[label] == val {
			return true
		}
	}
	return false
}

func values(series []map[string]string, label string) string {
	seen := map[string]bool{}
	for _, s := range series {
		if v, ok := s[label]; ok {
			seen[v] = true
		}
	}
	return strings.Join(sortedKeys(seen), ", ")
}

// TestCheckQueryCatchesMistakes: the checker itself fails on a misspelt
// metric, a misspelt prefix, a label value that does not exist, and a
// grouping label no metric has.
func TestCheckQueryCatchesMistakes(t *testing.T) {
	exp := exposition{
		"backstream_repos":                         {{"status": "complete"}, {"status": "failed"}},
		"backstream_archive_commit_seconds_bucket": {{"le": "+Inf"}},
	}
	for _, tc := range []struct {
		expr string
		ok   bool
	}{
		{`sum by (status) (backstream_repos{status="failed", instance=~"$instance"})`, true},
		{`backstream_repos{status=~"complete|failed"} > 0`, true},
		{`histogram_quantile(0.99, sum by (le) (rate(backstream_archive_commit_seconds_bucket[5m]))) > 0.5`, true},
		{`up{job="backstream"} == 0`, true},
		{`label_values(backstream_repos, instance)`, true},
		{`sum(backstream_repo)`, false},                                                  // misspelt metric
		{`sum(backstrem_repos)`, false},                                                  // misspelt prefix
		{`backstream_repos{status="done"}`, false},                                       // no such label value
		{`backstream_repos{status=~"complete|done"}`, false},                             // no such alternative
		{`sum by (state) (backstream_repos)`, false},                                     // no such label
		{`label_values(backstream_repos, state)`, false},                                 // no such label
		{`time() - backstream_firehose_last_event_time`, false},                          // not exposed
		{`increase(backstream_repos_total[1h])`, false},                                  // not exposed
		{`histogram_quantile(0.99, rate(backstream_archive_commit_seconds[5m]))`, false}, // a histogram is queried by _bucket
	} {
		got := checkQuery(query{where: "case", expr: tc.expr}, exp)
		if (len(got) == 0) != tc.ok {
			t.Errorf("checkQuery(%s): problems %q, want ok=%v", tc.expr, got, tc.ok)
		}
	}
}

// runningServe runs the built binary against an in-process simulated
// network with one permanently failing repo and one retried once, until it
// is in steady state with the failure series present; it returns serve's
// admin listen address (where /metrics is) and that scrape. t.Cleanup stops
// both.
func runningServe(t *testing.T) (string, exposition) {
	t.Helper()
	bin := backstreamBinary(t)
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 50, RecordsMean: 10, Hosts: 2, Rate: 20, Seed: 9})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	var active []string
	for _, a := range n.World().Accounts() {
		if a.Active {
			active = append(active, a.DID)
		}
	}
	if len(active) < 2 {
		t.Fatalf("only %d active accounts", len(active))
	}
	n.Faults().FailGetRepo(active[0], http.StatusBadRequest, 1000)      // permanent: failed
	n.Faults().FailGetRepo(active[1], http.StatusServiceUnavailable, 1) // retried once, then complete

	p := crash.Start(t, crash.Run{Bin: bin, Relay: n.RelayURL(), LoopbackHosts: n.LoopbackHosts(),
		DataDir: filepath.Join(t.TempDir(), "data"), Args: []string{"--capture-wait", "2s", "--log-level", "warn"}})
	c := http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(2 * time.Minute)
	var phase string
	for {
		if p.Exited() {
			t.Fatalf("serve exited (%v) before steady_state with the failure series; its log:\n%s", p.Err(), p.Tail())
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not reach steady_state with the failure series (phase %q); its log:\n%s", phase, p.Tail())
		}
		time.Sleep(200 * time.Millisecond)
		if st, ok := p.Status(); ok {
			phase = st.Phase
		}
		if phase != "steady_state" {
			continue
		}
		resp, err := c.Get("http://" + p.Admin + "/metrics")
		if err != nil {
			continue
		}
		exp, err := parseExposition(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("/metrics does not parse: %v", err)
		}
		if hasValue(exp["backstream_backfill_failed_total"], "class", "permanent") &&
			hasValue(exp["backstream_backfill_retries_total"], "budget", "ordinary") {
			return p.Admin, exp
		}
	}
}

// stopProcess sends SIGTERM and waits, killing after 20 s.
func stopProcess(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// syncBuffer is a process's log, written by its output copier and read by
// the test.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func getJSON(c *http.Client, url string) (map[string]any, error) {
	resp, err := c.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v map[string]any
	return v, json.NewDecoder(resp.Body).Decode(&v)
}

// TestDashboardAndAlertMetricsExist is the issue's "every metric the
// dashboard queries exists in /metrics", for the alert rules too.
func TestDashboardAndAlertMetricsExist(t *testing.T) {
	queries := append(dashboardQueries(t), alertQueries(t)...)
	_, exp := runningServe(t)
	var problems []string
	used := map[string]bool{}
	for _, q := range queries {
		problems = append(problems, checkQuery(q, exp)...)
		for _, m := range selectorRE.FindAllStringSubmatch(q.expr, -1) {
			if _, ok := exp[m[1]]; ok {
				used[m[1]] = true
			}
		}
	}
	sort.Strings(problems)
	for _, p := range problems {
		t.Error(p)
	}
	// Not a failure: backstream metrics no panel or rule shows, so a new
	// metric is a conscious choice to leave out.
	var unused []string
	for name := range exp {
		base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
		if strings.HasPrefix(name, "backstream_") && !used[name] && !used[base+"_bucket"] && !used[base] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	t.Logf("%d queries checked against %d exposed series names; backstream metrics in no panel or rule: %v",
		len(queries), len(exp), unused)
}
