package main

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/subscribe"
	"github.com/backstream/backstream/upstream"
)

// seedStore writes a store with a known shape: two complete repos, three
// failed (two transient, one timeout; two on pds1.test, one on pds2.test),
// one inactive not_started, a page checkpoint and two rows.
func seedStore(t *testing.T, dir string) {
	t.Helper()
	writeStore(t, dir, func(_ *archive.Store, w *archive.Writer) error {
		return seedUnit(w)
	})
}

// writeStore opens the store in dir with a writer, runs write, and closes
// both.
func writeStore(t *testing.T, dir string, write func(s *archive.Store, w *archive.Writer) error) {
	t.Helper()
	s, err := archive.Open(dir, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := write(s, w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// seedUnit is seedStore's unit.
func seedUnit(w *archive.Writer) error {
	st := func(did string, status archive.RepoStatus, active bool) archive.RepoUpdate {
		return archive.RepoUpdate{DID: did, Fields: archive.FieldStatus | archive.FieldActive,
			State: archive.RepoState{Status: status, Active: active}}
	}
	failed := func(did, class, host string) archive.RepoUpdate {
		return archive.RepoUpdate{DID: did, Fields: archive.FieldStatus | archive.FieldActive | archive.FieldError | archive.FieldHost,
			State: archive.RepoState{Status: archive.StatusFailed, Active: true, ErrClass: class, LastError: "x", Host: host}}
	}
	cp, _ := archive.EncodeListCursor(archive.ListCursor{Cursor: "page-7"})
	row := func(rkey string) archive.Event {
		return archive.Event{Kind: archive.KindCreate, DID: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", Collection: "app.bsky.feed.post",
			RKey: rkey, Rev: "3kabcdefghi22", CID: []byte{1, 2}, Record: []byte{0xa0}, Source: archive.SourceBackfill}
	}
	_, err := w.Apply(context.Background(), &archive.Unit{
		Events: []archive.Event{row("a"), row("b")},
		Repos: []archive.RepoUpdate{
			st("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", archive.StatusComplete, true),
			st("did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", archive.StatusComplete, true),
			failed("did:plc:cccccccccccccccccccccccc", "transient", "pds1.test"),
			failed("did:plc:eeeeeeeeeeeeeeeeeeeeeeee", "timeout", "pds1.test"),
			failed("did:plc:ffffffffffffffffffffffff", "transient", "pds2.test"),
			st("did:plc:dddddddddddddddddddddddd", archive.StatusNotStarted, false),
		},
		Puts: []archive.KV{{Key: archive.KeyCursorListRepos, Value: cp}},
	})
	return err
}

// statusJSON runs `backstream status --json` on dir.
func statusJSON(t *testing.T, dir string) string {
	t.Helper()
	code, out, stderr := runCLI(t, nil, "status", "--data-dir", dir, "--json")
	if code != 0 {
		t.Fatalf("status: %d %s", code, stderr)
	}
	return out
}

func TestStatusReportJSON(t *testing.T) {
	dir := t.TempDir()
	seedStore(t, dir)
	out := statusJSON(t, dir)
	var r map[string]any
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	repos := r["repos"].(map[string]any)
	want := map[string]float64{"not_started": 1, "pending": 0, "complete": 2, "failed": 3, "unavailable": 0}
	for k, v := range want {
		if repos[k] != v {
			t.Fatalf("repos[%s] = %v, want %v (%s)", k, repos[k], v, out)
		}
	}
	if r["phase"] != "bootstrap" || r["archive"].(map[string]any)["tip_seq"] != float64(2) {
		t.Fatalf("report %s", out)
	}
	if r["cursors"].(map[string]any)["listrepos"] != "page-7" {
		t.Fatalf("checkpoint in %s", out)
	}
	// Failed repos by class and the hosts with most failures.
	var failed struct {
		Failed struct {
			ByClass  map[string]int64 `json:"by_class"`
			TopHosts []struct {
				Host   string `json:"host"`
				Failed int64  `json:"failed"`
			} `json:"top_hosts"`
		} `json:"failed"`
	}
	if err := json.Unmarshal([]byte(out), &failed); err != nil {
		t.Fatal(err)
	}
	f := failed.Failed
	if len(f.ByClass) != 2 || f.ByClass["transient"] != 2 || f.ByClass["timeout"] != 1 {
		t.Fatalf("failed by class %v in %s", f.ByClass, out)
	}
	if len(f.TopHosts) != 2 || f.TopHosts[0].Host != "pds1.test" || f.TopHosts[0].Failed != 2 || f.TopHosts[1].Host != "pds2.test" || f.TopHosts[1].Failed != 1 {
		t.Fatalf("top hosts %+v in %s", f.TopHosts, out)
	}
}

func TestStatusReportTable(t *testing.T) {
	dir := t.TempDir()
	seedStore(t, dir)
	code, out, stderr := runCLI(t, nil, "status", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("status: %d %s", code, stderr)
	}
	for _, want := range []string{"phase", "bootstrap", "complete", "2", "failed", "failed by class", "transient", "hosts with most failed repos", "pds1.test", "listRepos checkpoint", "page-7", "archive tip seq"} {
		if !strings.Contains(out, want) {
			t.Fatalf("table lacks %q:\n%s", want, out)
		}
	}
	// Sizes in binary units, not a raw byte count.
	if !regexp.MustCompile(`store on disk +[0-9][0-9.]* (B|KiB|MiB|GiB)\n`).MatchString(out) {
		t.Fatalf("the store's size is not in human units:\n%s", out)
	}
}

// openSeeded is a seeded store in dir, with more seeds when given, held
// open until the test ends.
func openSeeded(t *testing.T, more ...func(t *testing.T, dir string)) (*archive.Store, string) {
	t.Helper()
	dir := t.TempDir()
	seedStore(t, dir)
	for _, seed := range more {
		seed(t, dir)
	}
	s, err := archive.Open(dir, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

// TestStatusHeldStore: a store another holder has open is named as such.
func TestStatusHeldStore(t *testing.T) {
	_, dir := openSeeded(t)
	code, _, stderr := runCLI(t, nil, "status", "--data-dir", dir)
	if code != 1 || !strings.Contains(stderr, "held open by another process") || !strings.Contains(stderr, "/status") {
		t.Fatalf("held store: code %d, %s", code, stderr)
	}
}

// TestServeStatusBeforeOpen: /status answers 200 with the required keys
// before the store is open.
func TestServeStatusBeforeOpen(t *testing.T) {
	s := &server{reg: newRegistry(), state: "opening"}
	sub, err := subscribe.New(subscribe.Config{Ready: s.ready, StatusJSON: s.statusJSON})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s.sub = sub
	rec := httptest.NewRecorder()
	s.publicHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	var r map[string]any
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &r) != nil {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	repos, ok := r["repos"].(map[string]any)
	failed, fok := r["failed"].(map[string]any)
	if !fok || failed["by_class"] == nil || failed["top_hosts"] == nil {
		t.Fatalf("status before open lacks the failed section: %s", rec.Body)
	}
	if r["phase"] != "opening" || !ok || repos["complete"] != float64(0) || r["archive"].(map[string]any)["tip_seq"] != float64(0) {
		t.Fatalf("status before open: %s", rec.Body)
	}
}

// TestServeProbesAfterFatal: once serve has seen a fatal error, /healthz and
// /readyz answer 503 and /status says so, for as long as the process takes
// to go: the admin listener's /healthz and /status naming it, the public
// one's saying there is one.
func TestServeProbesAfterFatal(t *testing.T) {
	s := &server{reg: newRegistry(), state: "opening"}
	sub, err := subscribe.New(subscribe.Config{Ready: s.ready, Healthy: s.health.Err, StatusJSON: s.statusJSON, PublicStatus: publicStatus})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s.sub = sub
	// Both listeners answer the probes and /status, with the same codes.
	public, adm := s.publicHandler(), s.adminHandler()
	var adminBody string
	get := func(path string) (int, string) {
		rec, admin := httptest.NewRecorder(), httptest.NewRecorder()
		public.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		adm.ServeHTTP(admin, httptest.NewRequest(http.MethodGet, path, nil))
		if admin.Code != rec.Code {
			t.Fatalf("%s: public %d, admin %d", path, rec.Code, admin.Code)
		}
		adminBody = admin.Body.String()
		return rec.Code, rec.Body.String()
	}
	s.health.SetPhase(archive.PhaseSteadyState)
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d while healthy", code)
	}
	if !s.ready() {
		t.Fatal("not ready in steady_state while healthy")
	}
	s.health.Fail(errors.New("write to the store failed: disk on fire"))
	if s.ready() {
		t.Fatal("ready after a fatal error")
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(path); code != http.StatusServiceUnavailable {
			t.Fatalf("%s after a fatal error: %d %q, want 503", path, code, body)
		}
	}
	if _, body := get("/healthz"); !strings.Contains(adminBody, "disk on fire") || !strings.Contains(body, subscribe.WithheldError) || strings.Contains(body, "disk on fire") {
		t.Fatalf("/healthz after a fatal error: admin %q, public %q; want the admin one naming it, the public one saying there is one", adminBody, body)
	}
	if _, body := get("/status"); !strings.Contains(adminBody, "disk on fire") || !strings.Contains(body, subscribe.WithheldError) || strings.Contains(body, "disk on fire") {
		t.Fatalf("/status after a fatal error: admin %s\npublic %s\nwant the admin one naming it, the public one saying there is one (%q)", adminBody, body, subscribe.WithheldError)
	}
}

// TestServeStatusPhaseIsTheLifecycles: /status reports the phase the
// lifecycle has entered, the one /readyz and /subscribe follow, not the
// store's row. The row is committed before the lifecycle enters its phase
// (and is there from the first read on a restart): a client that waited
// for /status to say steady_state was refused its websocket with a 503.
func TestServeStatusPhaseIsTheLifecycles(t *testing.T) {
	store, _ := openSeeded(t)
	if err := store.CommitSteadyState(time.Now()); err != nil {
		t.Fatal(err)
	}
	s := &server{reg: newRegistry(), store: store}
	sub, err := subscribe.New(subscribe.Config{Ready: s.ready, StatusJSON: s.statusJSON})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	w, err := archive.NewWriter(store, archive.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sub.Attach(store, w)
	s.sub = sub
	h := s.publicHandler()
	for _, tc := range []struct {
		entered archive.Phase
		want    string
	}{{"", "opening"}, {archive.PhaseMerging, "merging"}, {archive.PhaseSteadyState, "steady_state"}} {
		s.health.SetPhase(tc.entered)
		rec, ready := httptest.NewRecorder(), httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
		h.ServeHTTP(ready, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		var r struct {
			Phase string `json:"phase"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
			t.Fatalf("/status: %v: %s", err, rec.Body)
		}
		if r.Phase != tc.want || (r.Phase == "steady_state") != (ready.Code == http.StatusOK) {
			t.Fatalf("the store in steady_state, the lifecycle in %q: /status says phase %q, /readyz %d; want %q, and ready exactly when it says steady_state",
				tc.entered, r.Phase, ready.Code, tc.want)
		}
	}
}

// seedRoster records a relay's roster in the store in dir: pds1.test
// (which also has failed repos) active, pds3.test banned, pds4.test
// offline; then a whole read naming only the first two marks pds4.test
// left.
func seedRoster(t *testing.T, dir string, accounts int64) {
	t.Helper()
	entries := []upstream.HostEntry{{Host: "pds1.test", Status: "active", Accounts: accounts}, {Host: "pds3.test", Status: "banned"}, {Host: "pds4.test", Status: "offline"}}
	writeStore(t, dir, func(s *archive.Store, w *archive.Writer) error {
		for _, rr := range []bootstrap.Roster{{Entries: entries}, {Entries: entries[:2]}} {
			if _, err := bootstrap.RecordRoster(context.Background(), w, s, rr); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestStatusReportHosts: the report says how discovery and the repair
// passes enumerate and, once a roster is recorded, its hosts by roster
// status (every status the gauge exports, a host that left included): a
// store with failed repos' hosts but no roster is relay mode, with no
// counts; with a roster it is hosts mode, but relay under serve's
// --enumerate relay. The table says the same.
func TestStatusReportHosts(t *testing.T) {
	dir := t.TempDir()
	seedStore(t, dir)
	hostsOf := func() (statusHosts, string) {
		t.Helper()
		out := statusJSON(t, dir)
		var r struct {
			Hosts *statusHosts `json:"hosts"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Hosts == nil {
			t.Fatalf("no hosts in the report (%v): %s", err, out)
		}
		return *r.Hosts, out
	}
	if h, out := hostsOf(); h.Mode != "relay" || h.ByStatus != nil {
		t.Fatalf("no roster recorded: hosts %+v, want mode relay and no counts: %s", h, out)
	}
	seedRoster(t, dir, 0)
	want := map[string]int64{"active": 1, "idle": 0, "offline": 0, "throttled": 0, "banned": 1, "left": 1, "other": 0}
	if h, out := hostsOf(); h.Mode != "relay" || !maps.Equal(h.ByStatus, want) {
		t.Fatalf("a roster recorded without account counts: hosts %+v, want mode relay (discovery and repair list the relay by default) and %v: %s", h, want, out)
	}
	// serve with --enumerate hosts: they list the hosts anyway.
	st, err := archive.Open(dir, archive.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	h, err := readHosts(bootstrap.NewRosterView(st), bootstrap.EnumerateHosts)
	st.Close()
	if err != nil || h.Mode != "hosts" {
		t.Fatalf("--enumerate hosts, a roster without account counts: hosts %+v (%v), want mode hosts", h, err)
	}
	seedRoster(t, dir, 500)
	if h, out := hostsOf(); h.Mode != "hosts" || !maps.Equal(h.ByStatus, want) {
		t.Fatalf("a roster recorded: hosts %+v, want mode hosts and %v: %s", h, want, out)
	}
	// serve with --enumerate relay: they list the relay, whatever roster
	// an earlier hosts-mode run recorded (its counts still shown).
	if st, err = archive.Open(dir, archive.Options{ReadOnly: true}); err != nil {
		t.Fatal(err)
	}
	h, err = readHosts(bootstrap.NewRosterView(st), bootstrap.EnumerateRelay)
	st.Close()
	if err != nil || h.Mode != "relay" || !maps.Equal(h.ByStatus, want) {
		t.Fatalf("--enumerate relay, a roster with account counts: hosts %+v (%v), want mode relay and %v", h, err, want)
	}
	code, out, stderr := runCLI(t, nil, "status", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("status: %d %s", code, stderr)
	}
	if !regexp.MustCompile(`enumeration +hosts\n(.*\n)*roster hosts by status *\n(.*\n)*  banned +1\n(.*\n)*  left +1\n`).MatchString(out) {
		t.Fatalf("the table lacks the roster:\n%s", out)
	}
}

// TestStatusCountsTheWAL: `backstream status` on a stopped store counts
// every file of it in the store's size, the write-ahead log included: a
// store whose rows have not been flushed to a table yet (a fresh
// checkpoint, a small store stopped soon after its start) holds them all
// in its log, and the report of its size must not say 0 B. A read-only
// open, which status uses, counts no log of its own.
func TestStatusCountsTheWAL(t *testing.T) {
	dir := t.TempDir()
	seedStore(t, dir)
	entries, err := os.ReadDir(filepath.Join(dir, archive.StoreDir))
	if err != nil {
		t.Fatal(err)
	}
	var files, logs int64
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		files += fi.Size()
		if strings.HasSuffix(e.Name(), ".log") {
			logs += fi.Size()
		}
	}
	if logs == 0 {
		t.Fatalf("the seeded store has no write-ahead log to count: %v", entries)
	}
	code, out, stderr := runCLI(t, nil, "status", "--json", "--data-dir", dir)
	if code != 0 {
		t.Fatalf("status: %d %s", code, stderr)
	}
	var r struct {
		Archive struct {
			DiskBytes int64 `json:"disk_bytes"`
		} `json:"archive"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if d := r.Archive.DiskBytes; d < logs || d > files {
		t.Fatalf("status says the store takes %d bytes; its files take %d, %d of them its write-ahead log", d, files, logs)
	}
}

// TestStatusListReposCheckpointLine: the table's listRepos line says
// "listing starts from the beginning" only where a restart would: a
// relay-mode bootstrap without a checkpoint. A hosts-mode store keeps a
// checkpoint per roster host (and none of the relay's unless it fell back
// to it); past bootstrap no listing starts again. Before, a hosts-mode
// bootstrap killed half way said its listing would start from the
// beginning.
func TestStatusListReposCheckpointLine(t *testing.T) {
	line := func(phase, mode string) string {
		r := emptyStatus(phase)
		r.Hosts = &statusHosts{Mode: mode}
		var out strings.Builder
		printStatus(&out, r)
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(l, "listRepos checkpoint") {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		t.Fatalf("no listRepos line:\n%s", out.String())
		return ""
	}
	for _, c := range []struct{ phase, mode, want string }{
		{"bootstrap", "relay", "listRepos checkpoint (none: listing starts from the beginning)"},
		{"bootstrap", "hosts", "listRepos checkpoint (none of the relay's: hosts mode keeps one per roster host)"},
		{"steady_state", "hosts", "listRepos checkpoint (none of the relay's: hosts mode keeps one per roster host)"},
		{"steady_state", "relay", "listRepos checkpoint (none)"},
		{"merging", "relay", "listRepos checkpoint (none)"},
	} {
		if got := line(c.phase, c.mode); got != c.want {
			t.Errorf("%s, hosts mode %q: %q, want %q", c.phase, c.mode, got, c.want)
		}
	}
}
