package deploy

// compose_test.go checks the deployment files where no Docker engine runs:
// docker-compose.yml parses and its services, ports, volumes and mounted
// files exist and agree with prometheus.yml, the Grafana provisioning, the
// Dockerfile and the CLI; the Dockerfile is multi-stage, static and
// non-root on the go.mod Go version; alerts.yml is well formed and every
// alert is documented in docs/operating.md.

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/backstream/backstream/internal/citest"
)

// composeFile is the part of the compose schema the tests read (short
// syntax for ports and volumes, a map for environment).
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

type composeService struct {
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Profiles    []string          `yaml:"profiles"`
	NetworkMode string            `yaml:"network_mode"`
	DependsOn   []string          `yaml:"depends_on"`
}

// mount is one short-syntax volume: a named volume or a bind mount.
type mount struct {
	source, target string
	bind           bool // source is a host path
}

func (s composeService) mounts(t *testing.T) []mount {
	t.Helper()
	var out []mount
	for _, v := range s.Volumes {
		parts := strings.Split(v, ":")
		if len(parts) < 2 || len(parts) > 3 {
			t.Fatalf("volume %q: want source:target[:mode]", v)
		}
		if len(parts) == 3 && parts[2] != "ro" && parts[2] != "rw" {
			t.Errorf("volume %q: mode %q", v, parts[2])
		}
		src := parts[0]
		out = append(out, mount{source: src, target: parts[1], bind: strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/")})
	}
	return out
}

// containerPorts maps each published container port to its host port.
func (s composeService) containerPorts(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		if len(parts) != 2 {
			t.Fatalf("port %q: want host:container", p)
		}
		out[parts[1]] = parts[0]
	}
	return out
}

var interpolation = regexp.MustCompile(`\$\{([A-Z0-9_]+)(:-([^}]*))?\}`)

// interpolate applies compose's ${VAR:-default} with an empty environment.
func interpolate(s string) string {
	return interpolation.ReplaceAllString(s, "$3")
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal(readFile(t, "docker-compose.yml"), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for name, s := range c.Services {
		for i := range s.Command {
			s.Command[i] = interpolate(s.Command[i])
		}
		for k, v := range s.Environment {
			s.Environment[k] = interpolate(v)
		}
		c.Services[name] = s
	}
	return c
}

// promConfig is the part of prometheus.yml the tests read.
type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
		DNSSDConfigs []struct {
			Names []string `yaml:"names"`
			Type  string   `yaml:"type"`
			Port  int      `yaml:"port"`
		} `yaml:"dns_sd_configs"`
	} `yaml:"scrape_configs"`
}

func loadYAML(t *testing.T, rel string, v any) {
	t.Helper()
	if err := yaml.Unmarshal(readFile(t, rel), v); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

// listenPort is the port of a backstream service's BACKSTREAM_LISTEN.
func listenPort(t *testing.T, name string, s composeService) string {
	t.Helper()
	_, port, err := net.SplitHostPort(s.Environment["BACKSTREAM_LISTEN"])
	if err != nil {
		t.Fatalf("service %s: BACKSTREAM_LISTEN %q: %v", name, s.Environment["BACKSTREAM_LISTEN"], err)
	}
	return port
}

// flagValue returns the value after --name in a command line.
func flagValue(cmd []string, name string) string {
	for i, a := range cmd {
		if a == "--"+name && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func TestComposeFile(t *testing.T) {
	root := repoRoot(t)
	c := loadCompose(t)
	want := map[string][]string{ // service → profiles
		"backstream": nil, "prometheus": nil, "grafana": nil,
		"devnet": {"devnet"}, "backstream-devnet": {"devnet"},
		"nats-1": {"nats"}, "nats-2": {"nats"}, "nats-3": {"nats"},
	}
	for name, profiles := range want {
		s, ok := c.Services[name]
		if !ok {
			t.Fatalf("service %s missing", name)
		}
		if strings.Join(s.Profiles, ",") != strings.Join(profiles, ",") {
			t.Errorf("service %s: profiles %v, want %v", name, s.Profiles, profiles)
		}
	}

	// Builds, files, volumes, host ports.
	usedVolumes := map[string]bool{}
	hostPorts := map[string]string{}
	for name, s := range c.Services {
		if s.Build != nil {
			ctx := filepath.Join(root, s.Build.Context)
			if st, err := os.Stat(ctx); err != nil || !st.IsDir() {
				t.Errorf("service %s: build context %s: %v", name, s.Build.Context, err)
			}
			if _, err := os.Stat(filepath.Join(ctx, s.Build.Dockerfile)); err != nil {
				t.Errorf("service %s: dockerfile: %v", name, err)
			}
		}
		for _, m := range s.mounts(t) {
			if !path.IsAbs(m.target) {
				t.Errorf("service %s: mount target %q is not absolute", name, m.target)
			}
			if m.bind {
				if _, err := os.Stat(filepath.Join(root, m.source)); err != nil {
					t.Errorf("service %s: mounted file: %v", name, err)
				}
				continue
			}
			if _, ok := c.Volumes[m.source]; !ok {
				t.Errorf("service %s: volume %q is not declared under volumes:", name, m.source)
			}
			usedVolumes[m.source] = true
		}
		for container, host := range s.containerPorts(t) {
			if other, dup := hostPorts[host]; dup {
				t.Errorf("host port %s published by %s and %s", host, other, name)
			}
			hostPorts[host] = name + ":" + container
		}
		if s.NetworkMode != "" && len(s.Ports) > 0 {
			t.Errorf("service %s: network_mode %q cannot publish ports", name, s.NetworkMode)
		}
	}
	for v := range c.Volumes {
		if !usedVolumes[v] {
			t.Errorf("volume %s is declared but mounted by no service", v)
		}
	}

	// backstream services: serve, valid variables, data on a named volume.
	serveVars := cliVariables(t, "serve")
	for _, name := range []string{"backstream", "backstream-devnet"} {
		s := c.Services[name]
		if len(s.Command) == 0 || s.Command[0] != "serve" {
			t.Errorf("service %s: command %v, want serve", name, s.Command)
		}
		for k := range s.Environment {
			if !serveVars[k] {
				t.Errorf("service %s: %s is not a variable of backstream serve (it would refuse to start)", name, k)
			}
		}
		if s.Environment["BACKSTREAM_DATA_DIR"] != "/data" {
			t.Errorf("service %s: BACKSTREAM_DATA_DIR %q, want /data", name, s.Environment["BACKSTREAM_DATA_DIR"])
		}
		onData := false
		for _, m := range s.mounts(t) {
			onData = onData || (!m.bind && m.target == "/data")
		}
		if !onData {
			t.Errorf("service %s: no named volume on /data", name)
		}
		if _, err := url.Parse(s.Environment["BACKSTREAM_RELAY"]); err != nil || s.Environment["BACKSTREAM_RELAY"] == "" {
			t.Errorf("service %s: BACKSTREAM_RELAY %q", name, s.Environment["BACKSTREAM_RELAY"])
		}
	}
	bs := c.Services["backstream"]
	port := listenPort(t, "backstream", bs)
	if port != "6008" || bs.containerPorts(t)["6008"] != "6008" {
		t.Errorf("backstream: listens on %s, publishes %v; want 6008:6008", port, bs.Ports)
	}

	// The devnet profile: the simulated network, and a backstream sharing
	// its network namespace (its PDS hosts listen on loopback only).
	dn, bd := c.Services["devnet"], c.Services["backstream-devnet"]
	if len(dn.Command) == 0 || dn.Command[0] != "devnet" {
		t.Fatalf("devnet: command %v, want devnet ...", dn.Command)
	}
	devnetVars := cliVariables(t, "devnet")
	for _, a := range dn.Command[1:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if v := "BACKSTREAM_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")); !devnetVars[v] {
				t.Errorf("devnet: --%s is not a flag of backstream devnet", name)
			}
		}
	}
	dnHost, dnPort, err := net.SplitHostPort(flagValue(dn.Command, "listen"))
	if err != nil || dnHost != "0.0.0.0" {
		t.Errorf("devnet: --listen %q, want 0.0.0.0:<port>", flagValue(dn.Command, "listen"))
	}
	if bd.NetworkMode != "service:devnet" {
		t.Errorf("backstream-devnet: network_mode %q, want service:devnet", bd.NetworkMode)
	}
	if want := "http://127.0.0.1:" + dnPort; bd.Environment["BACKSTREAM_RELAY"] != want {
		t.Errorf("backstream-devnet: BACKSTREAM_RELAY %q, want %s", bd.Environment["BACKSTREAM_RELAY"], want)
	}
	if _, ok := dn.containerPorts(t)[listenPort(t, "backstream-devnet", bd)]; !ok {
		t.Errorf("devnet does not publish backstream-devnet's port %s: %v", listenPort(t, "backstream-devnet", bd), dn.Ports)
	}

	// Prometheus: the mounted config is the one it reads, its rule files
	// are mounted next to it, its targets are services on their ports.
	pr := c.Services["prometheus"]
	var cfgPath string
	for _, a := range pr.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			cfgPath = v
		}
	}
	mountedFrom := func(s composeService, target string) string {
		for _, m := range s.mounts(t) {
			if m.bind && m.target == target {
				return path.Clean(m.source)
			}
		}
		return ""
	}
	if got := mountedFrom(pr, cfgPath); got != "deploy/prometheus.yml" {
		t.Errorf("prometheus: --config.file %q is mounted from %q, want ./deploy/prometheus.yml", cfgPath, got)
	}
	var pc promConfig
	loadYAML(t, "deploy/prometheus.yml", &pc)
	for _, rf := range pc.RuleFiles {
		target := path.Join(path.Dir(cfgPath), rf)
		if got := mountedFrom(pr, target); got != path.Join("deploy", rf) {
			t.Errorf("prometheus: rule file %s (%s in the container) is mounted from %q, want ./deploy/%s", rf, target, got, rf)
		}
	}
	// adminPort: a backstream service in the network namespace of name
	// (itself, or one with network_mode service:name) has its admin
	// listener (where /metrics is) on port.
	adminPort := func(name, port string) bool {
		for other, s := range c.Services {
			if other != name && s.NetworkMode != "service:"+name {
				continue
			}
			if _, p, err := net.SplitHostPort(s.Environment["BACKSTREAM_ADMIN_LISTEN"]); err == nil && p == port {
				return true
			}
		}
		return false
	}
	servicePort := func(name, port string) bool {
		s, ok := c.Services[name]
		if !ok {
			return false
		}
		if _, ok := s.containerPorts(t)[port]; ok {
			return true
		}
		return adminPort(name, port) || (s.Environment["BACKSTREAM_LISTEN"] != "" && listenPort(t, name, s) == port)
	}
	jobs := map[string]bool{}
	for _, sc := range pc.ScrapeConfigs {
		jobs[sc.JobName] = true
		for _, st := range sc.StaticConfigs {
			for _, target := range st.Targets {
				host, port, err := net.SplitHostPort(target)
				if err != nil {
					t.Errorf("prometheus job %s: target %q: %v", sc.JobName, target, err)
					continue
				}
				if host != "localhost" && !servicePort(host, port) {
					t.Errorf("prometheus job %s: target %s is no compose service on that port", sc.JobName, target)
				}
				if sc.JobName == "backstream" && !adminPort(host, port) {
					t.Errorf("prometheus job backstream: target %s is not a BACKSTREAM_ADMIN_LISTEN port (/metrics is only there)", target)
				}
			}
		}
		for _, d := range sc.DNSSDConfigs {
			for _, n := range d.Names {
				if !servicePort(n, itoa(d.Port)) {
					t.Errorf("prometheus job %s: dns_sd %s:%d is no compose service publishing that port", sc.JobName, n, d.Port)
				}
				if sc.JobName == "backstream" && !adminPort(n, itoa(d.Port)) {
					t.Errorf("prometheus job backstream: dns_sd %s:%d is not a BACKSTREAM_ADMIN_LISTEN port (/metrics is only there)", n, d.Port)
				}
			}
		}
	}
	if !jobs["backstream"] {
		t.Errorf("prometheus.yml has no backstream job (the alert rules select job=\"backstream\")")
	}

	// Grafana: provisioning mounted where Grafana reads it; the datasource
	// is the prometheus service; the dashboard provider's path is mounted
	// from the directory holding the dashboard.
	gr := c.Services["grafana"]
	if got := mountedFrom(gr, "/etc/grafana/provisioning"); got != "deploy/grafana/provisioning" {
		t.Errorf("grafana: /etc/grafana/provisioning mounted from %q", got)
	}
	var ds struct {
		Datasources []struct {
			UID, Type, URL string
		} `yaml:"datasources"`
	}
	loadYAML(t, "deploy/grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 {
		t.Fatalf("want one provisioned datasource, got %d", len(ds.Datasources))
	}
	u, err := url.Parse(ds.Datasources[0].URL)
	if err != nil || !servicePort(u.Hostname(), u.Port()) || u.Hostname() != "prometheus" {
		t.Errorf("datasource URL %q is not the prometheus service", ds.Datasources[0].URL)
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	loadYAML(t, "deploy/grafana/provisioning/dashboards/backstream.yml", &prov)
	if len(prov.Providers) != 1 {
		t.Fatalf("want one dashboard provider, got %d", len(prov.Providers))
	}
	dashDir := mountedFrom(gr, prov.Providers[0].Options.Path)
	if _, err := os.Stat(filepath.Join(root, dashDir, "backstream.json")); dashDir == "" || err != nil {
		t.Errorf("grafana: provider path %s is mounted from %q, which holds no backstream.json", prov.Providers[0].Options.Path, dashDir)
	}
	if home := gr.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" &&
		home != path.Join(prov.Providers[0].Options.Path, "backstream.json") {
		t.Errorf("grafana: home dashboard %s is not the provisioned one", home)
	}
	checkDashboardDatasources(t, ds.Datasources[0].UID)
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// checkDashboardDatasources: every datasource reference in the dashboard
// is the provisioned one (or Grafana's built-in annotations); panel ids are
// unique, and no two panels cover the same cell of the grid (Grafana would
// push one of them elsewhere).
func checkDashboardDatasources(t *testing.T, uid string) {
	t.Helper()
	var dash map[string]any
	if err := json.Unmarshal(readFile(t, "deploy/grafana/dashboards/backstream.json"), &dash); err != nil {
		t.Fatal(err)
	}
	if dash["uid"] == "" || dash["title"] == "" {
		t.Errorf("dashboard needs a uid and a title")
	}
	ids := map[float64]bool{}
	type cell struct{ x, y int }
	cells := map[cell]string{}
	place := func(title any, g map[string]any) {
		x, y, w, h := int(g["x"].(float64)), int(g["y"].(float64)), int(g["w"].(float64)), int(g["h"].(float64))
		for i := x; i < x+w; i++ {
			for j := y; j < y+h; j++ {
				if other, ok := cells[cell{i, j}]; ok {
					t.Errorf("dashboard: panels %q and %q overlap at (%d, %d)", other, title, i, j)
					return
				}
				cells[cell{i, j}] = fmt.Sprint(title)
			}
		}
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if d, ok := v["datasource"].(map[string]any); ok {
				if d["uid"] != uid && d["type"] != "grafana" {
					t.Errorf("dashboard: datasource %v is not the provisioned %q", d, uid)
				}
			}
			if id, ok := v["id"].(float64); ok && v["gridPos"] != nil {
				if ids[id] {
					t.Errorf("dashboard: panel id %v twice", id)
				}
				ids[id] = true
				place(v["title"], v["gridPos"].(map[string]any))
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(dash)
	if len(ids) < 10 {
		t.Errorf("dashboard: only %d panels", len(ids))
	}
}

// TestDockerfile: multi-stage, static build on the go.mod Go version,
// non-root final image running `backstream serve` with data on /data.
func TestDockerfile(t *testing.T) {
	df := string(readFile(t, "Dockerfile"))
	gomod := string(readFile(t, "go.mod"))
	m := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod has no go directive")
	}
	if !strings.Contains(df, "ARG GO_VERSION="+m[1]+"\n") {
		t.Errorf("Dockerfile: want ARG GO_VERSION=%s (go.mod's go directive)", m[1])
	}
	froms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(df, -1)
	if len(froms) < 2 || !strings.HasPrefix(froms[0][1], "golang:${GO_VERSION}") {
		t.Fatalf("Dockerfile: want a golang:${GO_VERSION} build stage and a final stage, got %v", froms)
	}
	final := df[strings.LastIndex(df, "\nFROM "):]
	for _, want := range []string{
		"CGO_ENABLED=0 go build",
		"./cmd/backstream",
	} {
		if !strings.Contains(df, want) {
			t.Errorf("Dockerfile: missing %q", want)
		}
	}
	for _, want := range []string{
		`ENTRYPOINT ["backstream"]`,
		`CMD ["serve"]`,
		`VOLUME ["/data"]`,
		"ENV BACKSTREAM_DATA_DIR=/data",
	} {
		if !strings.Contains(final, want) {
			t.Errorf("Dockerfile final stage: missing %q", want)
		}
	}
	user := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindStringSubmatch(final)
	if user == nil || user[1] == "root" || strings.HasPrefix(user[1], "0:") || user[1] == "0" {
		t.Errorf("Dockerfile final stage: runs as %v, want a non-root USER", user)
	}
	if strings.Contains(final, "RUN ") {
		t.Errorf("Dockerfile final stage runs commands: the image has no shell (distroless)")
	}
	for _, v := range regexp.MustCompile(`(?m)^ENV\s+(BACKSTREAM_[A-Z_]+)=`).FindAllStringSubmatch(final, -1) {
		if !cliVariables(t, "serve")[v[1]] {
			t.Errorf("Dockerfile: ENV %s is not a variable of backstream serve", v[1])
		}
	}
}

// TestStaticBuild builds the binary as the Dockerfile does and checks it
// has no ELF interpreter, i.e. runs on distroless/static. Slow (a cgo-free
// build shares little of the build cache): skipped under -short.
func TestStaticBuild(t *testing.T) {
	citest.Long(t, "a CGO_ENABLED=0 build takes about a minute on an empty cache")
	out := filepath.Join(t.TempDir(), "backstream")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/backstream")
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, b)
	}
	f, err := elf.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatalf("the CGO_ENABLED=0 binary is dynamically linked")
		}
	}
}

// TestAlertRules: unique names, a severity from a closed set, a summary,
// valid durations, and every alert explained in docs/operating.md.
func TestAlertRules(t *testing.T) {
	docs := string(readFile(t, "docs/operating.md"))
	seen := map[string]bool{}
	for _, g := range loadAlerts(t).Groups {
		if !strings.HasPrefix(g.Name, "backstream.") {
			t.Errorf("group %q: want a backstream.* name", g.Name)
		}
		for _, r := range g.Rules {
			if r.Alert == "" {
				t.Errorf("group %s: a rule without an alert name (recording rules belong elsewhere)", g.Name)
				continue
			}
			if seen[r.Alert] {
				t.Errorf("alert %s twice", r.Alert)
			}
			seen[r.Alert] = true
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s: no summary annotation", r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("alert %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			if !strings.Contains(docs, "`"+r.Alert+"`") {
				t.Errorf("alert %s is not explained in docs/operating.md", r.Alert)
			}
		}
	}
}
