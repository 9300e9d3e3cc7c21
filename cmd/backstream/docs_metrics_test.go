package main

// docs_metrics_test.go keeps the metrics the docs name true: every
// backstream_* name that README.md, CONTRIBUTING.md, docs/ and the doc.go
// files mention is one `backstream serve` registers, with the labels and
// label values they give it. A renamed or removed metric left in the
// runbook would send an operator to a query that is always empty.

import (
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/backstream/backstream/node"
	"github.com/prometheus/client_golang/prometheus"
)

// metricInfo is what the docs may say of one registered metric: its label
// names, and the values a label's series have at the first scrape (the
// closed sets exported at zero; empty where no series exists yet).
type metricInfo struct {
	labels map[string]bool
	values map[string]map[string]bool
}

// descRecorder registers on a real registry and keeps the name and label
// names of every metric each collector describes (a vector with no series
// yet included).
type descRecorder struct {
	*prometheus.Registry
	metrics map[string]*metricInfo
}

var descParts = regexp.MustCompile(`^Desc\{fqName: "([^"]+)",.*variableLabels: \{([^}]*)\}\}$`)

func (d *descRecorder) info(name string) *metricInfo {
	m := d.metrics[name]
	if m == nil {
		m = &metricInfo{labels: map[string]bool{}, values: map[string]map[string]bool{}}
		d.metrics[name] = m
	}
	return m
}

func (d *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() {
		c.Describe(ch)
		close(ch)
	}()
	for desc := range ch {
		if p := descParts.FindStringSubmatch(desc.String()); p != nil {
			m := d.info(p[1])
			for _, l := range strings.Split(p[2], ",") {
				if l != "" {
					m.labels[l] = true
				}
			}
		}
	}
	return d.Registry.Register(c)
}

func (d *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := d.Register(c); err != nil {
			panic(err)
		}
	}
}

// servedMetrics builds what serve builds with its default flags (the
// process registry, the node with verification and the NATS sink's
// metrics, the connection caps, the checkpoint endpoint) on an empty data
// dir without running it, and returns every metric registered.
func servedMetrics(t *testing.T) map[string]*metricInfo {
	t.Helper()
	o, err := serveFlags(t, []string{"--data-dir", t.TempDir(), "--relay", "http://127.0.0.1:1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &descRecorder{Registry: newRegistry(), metrics: map[string]*metricInfo{}}
	s := newServer(o, rec.Registry, slog.New(slog.DiscardHandler), nil)
	cfg := o.nodeConfig(s, nil)
	cfg.Registry = rec
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	newConnMetrics(rec, connLimits{Global: 1, PerIP: 1})
	s.checkpointEndpoint()
	// What was registered past the recorder (the process collectors, the
	// build info, the checkpoint refusals) is known by its series.
	mfs, err := rec.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		m := rec.info(mf.GetName())
		for _, series := range mf.GetMetric() {
			for _, l := range series.GetLabel() {
				m.labels[l.GetName()] = true
				if m.values[l.GetName()] == nil {
					m.values[l.GetName()] = map[string]bool{}
				}
				m.values[l.GetName()][l.GetValue()] = true
			}
		}
	}
	return rec.metrics
}

// docMetric matches a backstream_* name and the selector or label list
// that may follow it: {status="failed"}, {class}, {by="a"|"b"}.
var docMetric = regexp.MustCompile(`\bbackstream_[a-z0-9_]+(\{[^}]*\})?`)

// docLabel is one label of a selector: its name, and after = the values
// (quoted or not; alternatives separated by |, escaped in a table).
var docLabel = regexp.MustCompile(`([a-z_]+)\s*(?:!?=~?\s*([^,}]*))?`)

// lookupMetric: the registered metric name is, or whose histogram or
// summary series it is, or (name ending in "_") the first metric it
// prefixes; nil when none.
func lookupMetric(name string, reg map[string]*metricInfo) *metricInfo {
	if m := reg[name]; m != nil {
		return m
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && reg[base] != nil {
			return reg[base]
		}
	}
	if strings.HasSuffix(name, "_") {
		for r, m := range reg {
			if strings.HasPrefix(r, name) {
				return m
			}
		}
	}
	return nil
}

// checkDocMetric lists what is false in one mention: an unknown name, a
// label the metric does not have, a value its label never takes.
func checkDocMetric(mention string, reg map[string]*metricInfo) []string {
	name, sel, _ := strings.Cut(mention, "{")
	m := lookupMetric(name, reg)
	if m == nil {
		return []string{name + ": no metric of that name is registered"}
	}
	var out []string
	for _, l := range docLabel.FindAllStringSubmatch(strings.TrimSuffix(sel, "}"), -1) {
		if !m.labels[l[1]] {
			out = append(out, fmt.Sprintf("%s: no label %q", name, l[1]))
			continue
		}
		known := m.values[l[1]]
		for _, v := range strings.Split(strings.NewReplacer(`\`, "", `"`, "").Replace(l[2]), "|") {
			if v = strings.TrimSpace(v); v != "" && len(known) > 0 && !known[v] {
				out = append(out, fmt.Sprintf("%s: label %s has no value %q at the first scrape", name, l[1], v))
			}
		}
	}
	return out
}

// unknownDocMetrics lists, as "file:line: what", every mention in the
// docs that the registered metrics contradict.
func unknownDocMetrics(docs map[string]string, reg map[string]*metricInfo) []string {
	var out []string
	for path, text := range docs {
		for i, line := range strings.Split(text, "\n") {
			for _, mention := range docMetric.FindAllString(line, -1) {
				for _, e := range checkDocMetric(mention, reg) {
					out = append(out, fmt.Sprintf("%s:%d: %s", path, i+1, e))
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestDocsMetricsRegistered(t *testing.T) {
	docs := map[string]string{}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.IsDir() && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.Name() != "doc.go" && rel != "README.md" && rel != "CONTRIBUTING.md" && !strings.HasPrefix(rel, "docs"+string(filepath.Separator)) {
			return nil
		}
		b, err := os.ReadFile(p)
		docs[rel] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	reg := servedMetrics(t)
	for _, name := range []string{"backstream_build_info", "backstream_pebble_disk_usage_bytes", "backstream_checkpoint_refused_total", "backstream_nats_state"} {
		if reg[name] == nil {
			t.Fatalf("the registry misses %s, which serve registers (%d metrics)", name, len(reg))
		}
	}
	for _, u := range unknownDocMetrics(docs, reg) {
		t.Error(u)
	}
}

// TestDocsMetricsCatchesUnknown guards the check itself: a misspelt name,
// a prefix nothing has, a label the metric lacks and a value its label
// never takes; a histogram's series and a known prefix pass.
func TestDocsMetricsCatchesUnknown(t *testing.T) {
	reg := map[string]*metricInfo{
		"backstream_archive_commit_seconds": {labels: map[string]bool{}},
		"backstream_repos": {labels: map[string]bool{"status": true},
			values: map[string]map[string]bool{"status": {"failed": true, "pending": true}}},
	}
	docs := map[string]string{"x.md": "ok `backstream_archive_commit_seconds_bucket`, `backstream_archive_`,\n" +
		"`backstream_repos{status=\"failed\"\\|\"pending\"}`, `backstream_repos{status=failed|pending}` and `backstream_repos{status}`\n" +
		"wrong `backstream_archive_commit_second`, `backstream_nothing_`, `backstream_repos{class}`,\n" +
		"`backstream_repos{status=\"done\"}`"}
	got := unknownDocMetrics(docs, reg)
	want := []string{
		"x.md:3: backstream_archive_commit_second: no metric of that name is registered",
		"x.md:3: backstream_nothing_: no metric of that name is registered",
		`x.md:3: backstream_repos: no label "class"`,
		`x.md:4: backstream_repos: label status has no value "done" at the first scrape`,
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}
