package deploy

// prometheus_test.go is the Prometheus integration test (make
// test-long): a real Prometheus server on loopback, configured from
// deploy/prometheus.yml with its target pointed at a running backstream and
// deploy/alerts.yml loaded, scrapes it; backstream_repos is then read back
// through Prometheus's HTTP API and every alert group is loaded and healthy.
// Skipped under -short and where no `prometheus` binary is installed
// (Debian's package of that name, which `make check-metrics` installs).

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle/crash"
)

func TestPrometheusScrapesBackstream(t *testing.T) {
	citest.Long(t, "starts a Prometheus server")
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		citest.Need(t, "no prometheus binary (apt-get install prometheus, or make check-metrics)")
	}
	listen, _ := runningServe(t) // the admin listener, where /metrics is

	// deploy/prometheus.yml, with the compose targets replaced by ours and
	// a 1 s scrape interval; alerts.yml next to it.
	var cfg map[string]any
	if err := yaml.Unmarshal(readFile(t, "deploy/prometheus.yml"), &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["global"] = map[string]any{"scrape_interval": "1s", "evaluation_interval": "1s"}
	var found bool
	for _, sc := range cfg["scrape_configs"].([]any) {
		sc := sc.(map[string]any)
		if sc["job_name"] == "backstream" {
			found = true
			sc["static_configs"] = []any{map[string]any{"targets": []any{listen}}}
			delete(sc, "dns_sd_configs")
		}
	}
	if !found {
		t.Fatal("deploy/prometheus.yml has no backstream job")
	}
	dir := t.TempDir()
	b, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), readFile(t, "deploy/alerts.yml"), 0o644); err != nil {
		t.Fatal(err)
	}

	promAddr := crash.FreeAddr(t)
	logs := &syncBuffer{}
	cmd := exec.Command(promBin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "tsdb"), "--web.listen-address="+promAddr)
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd) })

	c := http.Client{Timeout: 5 * time.Second}
	api := "http://" + promAddr + "/api/v1/"
	deadline := time.Now().Add(90 * time.Second)
	var complete float64
	for complete <= 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never returned backstream_repos{status=\"complete\"} > 0; its log:\n%s", logs.String())
		}
		time.Sleep(500 * time.Millisecond)
		var res struct {
			Status string `json:"status"`
			Data   struct {
				Result []struct {
					Metric map[string]string `json:"metric"`
					Value  [2]any            `json:"value"`
				} `json:"result"`
			} `json:"data"`
		}
		if err := getInto(&c, api+"query?query="+url.QueryEscape(`backstream_repos{job="backstream"}`), &res); err != nil || res.Status != "success" {
			continue
		}
		for _, r := range res.Data.Result {
			if r.Metric["status"] == "complete" && r.Metric["instance"] == listen {
				s, _ := r.Value[1].(string)
				complete, _ = strconv.ParseFloat(s, 64)
			}
		}
	}
	t.Logf("Prometheus reads backstream_repos{status=\"complete\"} = %v from %s", complete, listen)

	// Every rule group of alerts.yml is loaded and evaluates without error.
	want := map[string]bool{}
	for _, g := range loadAlerts(t).Groups {
		want[g.Name] = true
	}
	for {
		var res struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					Rules []struct {
						Name      string `json:"name"`
						Health    string `json:"health"`
						LastError string `json:"lastError"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		if err := getInto(&c, api+"rules", &res); err != nil {
			t.Fatal(err)
		}
		pending, loaded := 0, 0
		for _, g := range res.Data.Groups {
			if !want[g.Name] {
				continue
			}
			loaded++
			for _, r := range g.Rules {
				switch r.Health {
				case "ok":
				case "unknown":
					pending++ // not evaluated yet
				default:
					t.Errorf("rule %s: health %s: %s", r.Name, r.Health, r.LastError)
				}
			}
		}
		if loaded != len(want) {
			t.Fatalf("Prometheus loaded %d of the %d alert groups", loaded, len(want))
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d rules never evaluated", pending)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func getInto(c *http.Client, url string, v any) error {
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}
