package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/browsertest"
	"github.com/backstream/backstream/node"
)

// startupRepos is how many repo/ rows the store of the startup tests
// holds: several of the steps' progress intervals, and hundreds of
// sstable reads to watch the read through.
const startupRepos = 20_000

// olderStoreWithoutDueIndex writes, on fs, a store of startupRepos repos
// (every third failed and due) as a build before the due index left it:
// meta/due_index absent, every row in sstables, so that the next start
// reads repo/ whole through fs before the store opens.
func olderStoreWithoutDueIndex(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	s, err := archive.Open(dir, archive.Options{FS: fs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < startupRepos; lo += 1000 {
		u := &archive.Unit{}
		for i := lo; i < lo+1000; i++ {
			st := archive.RepoState{Status: archive.StatusComplete, Active: true, Host: "pds.test"}
			if i%3 == 0 {
				st.Status, st.ErrClass, st.NextAttemptUS = archive.StatusFailed, "transient", int64(i+1)
			}
			u.Repos = append(u.Repos, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:start%019d", i),
				Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldError | archive.FieldNextAttempt, State: st})
		}
		if _, err := w.Apply(context.Background(), u); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Delete(archive.KeyDueIndex, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// stepSight is what /status and /metrics said at one sstable read of a
// start's step.
type stepSight struct {
	startup map[string]any // /status's "startup", nil when absent
	phase   string
	gauge   bool // /metrics showed backstream_startup_step{step="due_index"} 1
}

// lineFlag is a slog.Handler that sets on at a line containing start and
// clears it at a line containing end.
type lineFlag struct {
	start, end string
	on         *atomic.Bool
}

func (h lineFlag) Enabled(context.Context, slog.Level) bool { return true }
func (h lineFlag) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h lineFlag) WithGroup(string) slog.Handler            { return h }
func (h lineFlag) Handle(_ context.Context, r slog.Record) error {
	switch {
	case strings.Contains(r.Message, h.start):
		h.on.Store(true)
	case strings.Contains(r.Message, h.end):
		h.on.Store(false)
	}
	return nil
}

// getBody is the body of GET url.
func getBody(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// startupServer is serve's server before the store is open (testServer),
// logging to log, with its startup report, and its admin handler (/status,
// built at each request, and /metrics) on a loopback HTTP server closed
// with the test.
func startupServer(t *testing.T, log *slog.Logger) (*server, string) {
	t.Helper()
	s := testServer(t, nil, "", 0)
	s.log, s.startup, s.recent = log, startupReport(s.reg), &recentLog{}
	hs := httptest.NewServer(s.adminHandler())
	t.Cleanup(hs.Close)
	return s, hs.URL
}

// TestStatusNamesTheStartStep: while a start builds the due index of a
// store from an older build (one read of every repo/ row before the store
// opens, minutes at the network's size), /status names the step, since
// when, the rows read so far, moving as the read goes, and the rows to
// read; /metrics shows backstream_startup_step{step="due_index"} at 1.
// Both are read over HTTP at the sstable reads of the build (from its
// announcement in the log to its end), on the goroutine that reads. Once
// the store is open the step is gone from both.
func TestStatusNamesTheStartStep(t *testing.T) {
	mem := vfs.NewMem()
	olderStoreWithoutDueIndex(t, mem, "/data")

	var building atomic.Bool
	log := slog.New(lineFlag{start: "building the due index", end: "built the due index", on: &building})
	s, url := startupServer(t, log)

	var mu sync.Mutex
	var sights []stepSight
	var probeErr error
	look := func() {
		st, err := getBody(url + "/status?format=json")
		var rep struct {
			Phase   string         `json:"phase"`
			Startup map[string]any `json:"startup"`
		}
		if err == nil {
			err = json.Unmarshal([]byte(st), &rep)
		}
		m, merr := getBody(url + "/metrics")
		mu.Lock()
		defer mu.Unlock()
		if err != nil || merr != nil {
			probeErr = fmt.Errorf("status: %v; metrics: %v", err, merr)
			return
		}
		sights = append(sights, stepSight{startup: rep.Startup, phase: rep.Phase,
			gauge: strings.Contains(m, `backstream_startup_step{step="due_index"} 1`)})
	}
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if building.Load() && (op == errorfs.OpFileReadAt || op == errorfs.OpFileRead) && strings.HasSuffix(path, ".sst") {
			look()
		}
		return nil
	}))
	o := serveOptions{dataDir: "/data", relay: "http://127.0.0.1:1", resetRelay: true}
	cfg := o.nodeConfig(s, nil)
	cfg.Store.FS = fs
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	s.set(func(s *server) { s.node, s.store, s.w, s.state = n, n.Store(), n.Writer(), "" })

	mu.Lock()
	defer mu.Unlock()
	if probeErr != nil {
		t.Fatal(probeErr)
	}
	if len(sights) < 2 {
		t.Fatalf("the due index's build made %d sstable reads after its announcement: too few to watch it", len(sights))
	}
	var least, most float64 = -1, -1
	for _, v := range sights {
		if v.startup == nil || v.startup["step"] != "due_index" {
			t.Fatalf("while the due index was built (%d reads of /status), /status said phase %q and startup %v: want the step due_index named",
				len(sights), v.phase, v.startup)
		}
		if !v.gauge {
			t.Fatalf("while the due index was built, /metrics had no backstream_startup_step{step=\"due_index\"} 1")
		}
		if since, _ := v.startup["since"].(string); since == "" {
			t.Fatalf("startup %v: no since", v.startup)
		}
		if total, _ := v.startup["rows_total"].(float64); total != startupRepos {
			t.Fatalf("startup %v: rows_total, want %d", v.startup, startupRepos)
		}
		read, _ := v.startup["rows_read"].(float64)
		if least < 0 || read < least {
			least = read
		}
		most = max(most, read)
	}
	t.Logf("%d reads of /status during the build: rows_read from %v to %v of %d", len(sights), least, most, startupRepos)
	if most <= least || most > startupRepos {
		t.Fatalf("rows_read from %v to %v of %d while the due index was built: want it to move, within the total", least, most, startupRepos)
	}

	// Open: no step under way.
	st, err := getBody(url + "/status?format=json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(st, `"startup"`) {
		t.Fatalf("after the store opened, /status still names a step: %s", st)
	}
	m, err := getBody(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(m, `backstream_startup_step{step="due_index"} 0`) {
		t.Fatalf("after the store opened, /metrics lacks backstream_startup_step{step=\"due_index\"} 0")
	}
}

// TestStatusPageShowsStartStep renders serve's /status in Chromium while a
// start's step runs: the page names the step in words, with the rows read
// and to read in human numbers, when it started and the line that
// announced it; once it ends, the page has no such section.
func TestStatusPageShowsStartStep(t *testing.T) {
	bin := browsertest.Chromium(t)
	log := slog.New(slog.DiscardHandler)
	s, url := startupServer(t, log)

	p := s.startup.Begin(log, time.Now, archive.StepAnnouncement{Step: archive.StepDueIndex,
		Line: "building the due index: reading every repo/ row once", Still: "still building", Total: 40_000_000})
	for shown := false; !shown; { // the first rows the step shows
		shown = p.Read()
	}
	p.Tick()
	page := browsertest.Render(t, bin, url+"/status", "status-startup")
	page.RequireHuman(t)
	for _, want := range []string{"Starting: Building the due index (every repo)", "building the due index: reading every repo/ row once"} {
		if !strings.Contains(page.Text, want) {
			t.Errorf("page lacks %q:\n%s", want, page.Text)
		}
	}
	for id, want := range map[string]string{"startup-read": "4,096", "startup-total": "40,000,000"} {
		if got := page.TextOf(t, id); got != want {
			t.Errorf("%s %q, want %q", id, got, want)
		}
	}
	if got := page.TextOf(t, "startup-for"); !regexp.MustCompile(`^\d+(\.\d)? (ms|s)$`).MatchString(got) {
		t.Errorf("running for %q, want a duration", got)
	}
	if got := page.TextOf(t, "startup-since"); !strings.Contains(got, "ago") {
		t.Errorf("started %q, want a time with how long ago", got)
	}
	p.End()
	if page = browsertest.Render(t, bin, url+"/status", "status-started"); strings.Contains(page.Text, "Starting") {
		t.Fatalf("after the step the page still shows one:\n%s", page.Text)
	}
}
