package main

// Tests of the admin surface: nothing of it on the public listener, even
// through a same-host reverse proxy that adds no headers; checkpoints only
// under --backup-dir (symlinks resolved), one at a time, at most one per
// interval, with room for the store; http.Server's error log through the
// process logger.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/subscribe"
)

// testServer is serve's server over store (nil: not open yet) with a
// subscribe server, checkpoints under backupDir ("" = none).
func testServer(t *testing.T, store *archive.Store, backupDir string, interval time.Duration) *server {
	t.Helper()
	ck, err := newCheckpointConfig(backupDir, interval)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{reg: newRegistry(), log: slog.New(slog.DiscardHandler), store: store, ck: ck, state: "opening"}
	sub, err := subscribe.New(subscribe.Config{Ready: s.ready, Healthy: s.health.Err, StatusJSON: s.statusJSON, PublicStatus: publicStatus,
		Metrics: subscribe.NewMetrics(s.reg), Logger: s.log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	s.sub = sub
	return s
}

func openTestStore(t *testing.T, dir string) *archive.Store {
	t.Helper()
	store, err := archive.Open(dir, archive.Options{Logger: slog.New(slog.DiscardHandler), CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

// TestAdminNotBehindProxy: a reverse proxy on loopback that forwards to
// the public listener and adds no headers (so every request reaches serve
// from 127.0.0.1) gets 404 for /metrics, /debug/pprof/ and the checkpoint
// endpoint, and no checkpoint is written; the admin listener answers them.
func TestAdminNotBehindProxy(t *testing.T) {
	base := t.TempDir()
	backups := filepath.Join(base, "backups")
	s := testServer(t, openTestStore(t, filepath.Join(base, "data")), backups, 0)
	hs, err := s.listenHTTP("127.0.0.1:0", httpOptions{adminListen: "127.0.0.1:0", idleTimeout: time.Minute, readTimeout: time.Minute},
		connLimits{Global: 100, PerIP: 100})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.shutdown(time.Second)
	target, _ := url.Parse("http://" + hs.publicAddr.String())
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Director = func(r *http.Request) { // a bare proxy: no X-Forwarded-For
		r.URL.Scheme, r.URL.Host = target.Scheme, target.Host
		r.Header.Del("X-Forwarded-For")
	}
	proxy := httptest.NewServer(rp)
	defer proxy.Close()

	do := func(base, method, path string) (int, string) {
		req, _ := http.NewRequest(method, base+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	ckPath := checkpointPath + "?to=" + url.QueryEscape(filepath.Join(backups, "via-proxy"))
	for _, c := range []struct{ method, path string }{
		{"GET", "/metrics"}, {"GET", "/debug/pprof/"}, {"GET", "/debug/pprof/profile?seconds=1"}, {"GET", "/debug/pprof/heap"}, {"POST", ckPath},
	} {
		if code, body := do(proxy.URL, c.method, c.path); code != http.StatusNotFound {
			t.Errorf("%s %s through the proxy: %d, want 404: %.200s", c.method, c.path, code, body)
		}
		if code, _ := do("http://"+hs.publicAddr.String(), c.method, c.path); code != http.StatusNotFound {
			t.Errorf("%s %s on the public listener: %d, want 404", c.method, c.path, code)
		}
	}
	if _, err := os.Stat(filepath.Join(backups, "via-proxy")); !os.IsNotExist(err) {
		t.Fatalf("a checkpoint through the proxy was written: %v", err)
	}
	// The public listener still serves clients through the proxy.
	if code, _ := do(proxy.URL, "GET", "/healthz"); code != 200 {
		t.Fatalf("/healthz through the proxy: %d", code)
	}
	// The admin listener answers the operator.
	admin := "http://" + hs.adminAddr.String()
	if code, body := do(admin, "GET", "/metrics"); code != 200 || !strings.Contains(body, "backstream_build_info") {
		t.Fatalf("admin /metrics: %d %.200s", code, body)
	}
	if code, _ := do(admin, "GET", "/debug/pprof/heap"); code != 200 {
		t.Fatalf("admin pprof: %d", code)
	}
	for _, p := range []string{"/healthz", "/readyz", "/status"} {
		if code, _ := do(admin, "GET", p); code == http.StatusNotFound {
			t.Fatalf("admin %s: 404", p)
		}
	}
	if code, body := do(admin, "POST", ckPath); code != 200 {
		t.Fatalf("admin checkpoint: %d %s", code, body)
	}
}

// post asks h for a checkpoint to to, from loopback.
func post(h http.Handler, to string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, checkpointPath+"?to="+url.QueryEscape(to), nil)
	req.RemoteAddr = "127.0.0.1:40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func errorOf(t *testing.T, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var e checkpointError
	if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil {
		t.Fatalf("%d: %v: %s", rec.Code, err, rec.Body)
	}
	return e.Error
}

// TestCheckpointNeedsBackupDir: without --backup-dir the endpoint refuses
// every checkpoint, saying how to enable them.
func TestCheckpointNeedsBackupDir(t *testing.T) {
	base := t.TempDir()
	s := testServer(t, openTestStore(t, filepath.Join(base, "data")), "", 0)
	rec := post(s.checkpointEndpoint(), filepath.Join(base, "b"))
	if rec.Code != http.StatusForbidden || !strings.Contains(errorOf(t, rec), "--backup-dir") {
		t.Fatalf("no backup dir: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(filepath.Join(base, "b")); !os.IsNotExist(err) {
		t.Fatalf("a checkpoint was written: %v", err)
	}
	if v := promtest.Value(t, s.reg, "backstream_checkpoint_refused_total", map[string]string{"reason": ckNoBackupDir}); v != 1 {
		t.Fatalf("refusal counted %v times", v)
	}
}

// TestCheckpointSymlinkEscape: a symlink inside --backup-dir pointing out
// of it, as the destination or as its parent, is refused once resolved; so
// is a path climbing out with "..". Nothing is written outside.
func TestCheckpointSymlinkEscape(t *testing.T) {
	base := t.TempDir()
	backups, outside := filepath.Join(base, "backups"), filepath.Join(base, "outside")
	for _, d := range []string{backups, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(backups, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "new"), filepath.Join(backups, "dangling")); err != nil {
		t.Fatal(err)
	}
	s := testServer(t, openTestStore(t, filepath.Join(base, "data")), backups, 0)
	h := s.checkpointEndpoint()
	for _, to := range []string{
		filepath.Join(backups, "link", "x"), "link/x", "link", "dangling",
		filepath.Join(backups, "..", "outside", "y"), "../outside/y", backups, outside,
	} {
		rec := post(h, to)
		if rec.Code != http.StatusForbidden || !strings.Contains(errorOf(t, rec), "under --backup-dir") {
			t.Errorf("%s: %d %s, want 403 naming --backup-dir", to, rec.Code, rec.Body)
		}
	}
	if names, _ := os.ReadDir(outside); len(names) != 0 {
		t.Fatalf("a refused checkpoint wrote %v outside the backup dir", names)
	}
	// A relative name under the backup dir is taken.
	if rec := post(h, "nightly/1"); rec.Code != 200 {
		t.Fatalf("relative destination: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(filepath.Join(backups, "nightly", "1", archive.StoreDir)); err != nil {
		t.Fatal(err)
	}
}

// TestCheckpointOneAtATimeAndInterval: a checkpoint while one runs is 409;
// a second within --checkpoint-interval of the first's end is 429 with
// Retry-After, and none is written; after the interval it goes through.
func TestCheckpointOneAtATimeAndInterval(t *testing.T) {
	base := t.TempDir()
	s := testServer(t, openTestStore(t, filepath.Join(base, "data")), base, time.Minute)
	h := s.checkpointEndpoint().(*checkpointHandler)
	now := time.Unix(1_800_000_000, 0)
	h.now = func() time.Time { return now }

	h.running.Lock() // one is running
	if rec := post(h, "a"); rec.Code != http.StatusConflict || !strings.Contains(errorOf(t, rec), "another checkpoint is running") {
		t.Fatalf("while one runs: %d %s", rec.Code, rec.Body)
	}
	h.running.Unlock()

	if rec := post(h, "a"); rec.Code != 200 {
		t.Fatalf("first: %d %s", rec.Code, rec.Body)
	}
	now = now.Add(15 * time.Second)
	rec := post(h, "b")
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "45" || !strings.Contains(errorOf(t, rec), "--checkpoint-interval") {
		t.Fatalf("second within the interval: %d Retry-After %q %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}
	if _, err := os.Stat(filepath.Join(base, "b")); !os.IsNotExist(err) {
		t.Fatalf("the refused checkpoint was written: %v", err)
	}
	// A destination refused as not empty wrote nothing: it does not count.
	now = now.Add(46 * time.Second)
	if rec := post(h, "a"); rec.Code != http.StatusConflict {
		t.Fatalf("non-empty destination: %d %s", rec.Code, rec.Body)
	}
	if rec := post(h, "b"); rec.Code != 200 {
		t.Fatalf("after the interval: %d %s", rec.Code, rec.Body)
	}
	if v := promtest.Value(t, s.reg, "backstream_checkpoint_refused_total", map[string]string{"reason": ckInterval}); v != 1 {
		t.Fatalf("interval refusals counted %v", v)
	}
}

// TestCheckpointNeedsRoom: a volume without room for the store above the
// free-space floor refuses the checkpoint (507) before writing anything.
func TestCheckpointNeedsRoom(t *testing.T) {
	base := t.TempDir()
	store := openTestStore(t, filepath.Join(base, "data"))
	s := testServer(t, store, base, 0)
	h := s.checkpointEndpoint().(*checkpointHandler)
	size := store.DB().Metrics().DiskSpaceUsage()
	if size == 0 {
		t.Fatal("the store reports no size")
	}
	const total = 10 << 30
	floor := diskspace.Floor(0, total)
	free := size + floor - 1 // one byte short
	h.stat = func(string) (diskspace.Space, error) { return diskspace.Space{Free: free, Total: total}, nil }
	rec := post(h, "full")
	if rec.Code != http.StatusInsufficientStorage || !strings.Contains(errorOf(t, rec), "not enough space") {
		t.Fatalf("no room: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(filepath.Join(base, "full")); !os.IsNotExist(err) {
		t.Fatalf("written without room: %v", err)
	}
	free++
	if rec := post(h, "full"); rec.Code != 200 {
		t.Fatalf("just enough room: %d %s", rec.Code, rec.Body)
	}
}

// TestCheckpointNeedsRoomToStage: a checkpoint whose staged copies (the
// write-ahead logs, the manifest, the options file, copied into the store
// dir on the live volume) would take that volume below its --min-free
// floor is refused (507, counted no_space) before anything is written, and
// the live store records no fault.
func TestCheckpointNeedsRoomToStage(t *testing.T) {
	base := t.TempDir()
	const floor = 1 << 30
	var free atomic.Uint64
	free.Store(floor) // the floor exactly: room for nothing more
	store, err := archive.Open(filepath.Join(base, "data"), archive.Options{Logger: slog.New(slog.DiscardHandler), CacheSize: 8 << 20,
		MinFree: floor, Space: func(string) (diskspace.Space, error) {
			return diskspace.Space{Free: free.Load(), Total: 100 << 30}, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	s := testServer(t, store, base, 0)
	h := s.checkpointEndpoint().(*checkpointHandler)
	h.stat = func(string) (diskspace.Space, error) { return diskspace.Space{Free: 50 << 30, Total: 100 << 30}, nil } // the destination has room
	rec := post(h, "ck")
	if rec.Code != http.StatusInsufficientStorage || !strings.Contains(errorOf(t, rec), "--min-free") {
		t.Fatalf("no room on the store's volume to stage the checkpoint: %d %s; want 507 naming --min-free", rec.Code, rec.Body)
	}
	if v := promtest.Value(t, s.reg, "backstream_checkpoint_refused_total", map[string]string{"reason": ckNoSpace}); v != 1 {
		t.Fatalf("no_space refusals counted %v, want 1", v)
	}
	if _, err := os.Stat(filepath.Join(base, "ck")); !os.IsNotExist(err) {
		t.Fatalf("written without room to stage: %v", err)
	}
	if f := store.Fault(); f != nil {
		t.Fatalf("the refusal is a fault of the live store: %v", f)
	}
	free.Store(floor + 1<<30)
	if rec := post(h, "ck"); rec.Code != 200 {
		t.Fatalf("with room to stage: %d %s", rec.Code, rec.Body)
	}
}

// TestHTTPErrorLog: http.Server's error lines reach the process's JSON
// log at WARN, truncated; a client's long garbage does not become a long
// line.
func TestHTTPErrorLog(t *testing.T) {
	var out bytes.Buffer
	l := errorLog(slog.New(slog.NewJSONHandler(&out, nil)).With("component", "http"))
	l.Printf("http: TLS handshake error from 192.0.2.1:5: %s", strings.Repeat("é", 2000))
	var rec map[string]any
	if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
		t.Fatalf("not one JSON line: %v: %s", err, out.String())
	}
	msg, _ := rec["msg"].(string)
	if rec["level"] != "WARN" || rec["component"] != "http" || len(msg) > errorLogMax+40 || !strings.Contains(msg, "truncated") ||
		!strings.HasPrefix(msg, "http: TLS handshake error") {
		t.Fatalf("error log line: %s", out.String())
	}
	if !utf8.ValidString(msg) {
		t.Fatalf("truncation split a rune: %q", msg)
	}
}

// TestReleaseRefusesCrashpoint: serve built without -tags crashpoint (as
// this test binary and the release are) refuses BACKSTREAM_CRASHPOINT at
// start, exit 2 naming it, before it listens or creates anything; it never
// kills itself (this test binary would die with it).
func TestReleaseRefusesCrashpoint(t *testing.T) {
	if crashpoint.Built {
		t.Fatal("cmd/backstream's tests must run without -tags crashpoint")
	}
	t.Setenv(crashpoint.EnvVar, crashpoint.CaptureStarted)
	dir := filepath.Join(t.TempDir(), "data")
	listen := freeAddr(t)
	var stderr bytes.Buffer
	code := run(context.Background(), []string{"serve", "--relay", "http://127.0.0.1:9", "--data-dir", dir, "--listen", listen,
		"--admin-listen", "", "--log-format", "json"}, nil, &bytes.Buffer{}, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "this build has no crash points") {
		t.Fatalf("serve with %s in a release build: exit %d, %s", crashpoint.EnvVar, code, stderr.String())
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused start created the data dir: %v", err)
	}
	// compaction reset has a crash point too: refused the same way, before
	// the store is opened.
	stderr.Reset()
	t.Setenv(crashpoint.EnvVar, crashpoint.ResetIndex)
	code = run(context.Background(), []string{"compaction", "reset", "--data-dir", dir}, nil, &bytes.Buffer{}, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "this build has no crash points") {
		t.Fatalf("compaction reset with %s in a release build: exit %d, %s", crashpoint.EnvVar, code, stderr.String())
	}
}

// TestAdminPprofIndexLinks: every link of the admin listener's
// /debug/pprof/ index answers 200 (profile and trace, which run for
// seconds, with seconds=1), and /symbol answers a POST as `go tool pprof`
// sends it.
func TestAdminPprofIndexLinks(t *testing.T) {
	s := testServer(t, openTestStore(t, filepath.Join(t.TempDir(), "data")), "", 0)
	hs := httptest.NewServer(s.adminHandler())
	defer hs.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, index := get("/debug/pprof/")
	if code != 200 {
		t.Fatalf("/debug/pprof/: %d", code)
	}
	links := regexp.MustCompile(`href=['"]([^'"#]+)['"]`).FindAllStringSubmatch(index, -1)
	seen := map[string]bool{}
	for _, l := range links {
		path, _, _ := strings.Cut(l[1], "?")
		seen[path] = true
		if path == "profile" || path == "trace" {
			l[1] = path + "?seconds=1"
		}
		if code, body := get("/debug/pprof/" + l[1]); code != 200 {
			t.Errorf("/debug/pprof/%s, linked from the index: %d %.200s", l[1], code, body)
		}
	}
	for _, want := range []string{"cmdline", "symbol", "profile", "trace", "heap"} {
		if !seen[want] {
			t.Errorf("the index links no %s: %v", want, links)
		}
	}
	resp, err := http.Post(hs.URL+"/debug/pprof/symbol", "text/plain", strings.NewReader("0x1"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("POST /debug/pprof/symbol: %d", resp.StatusCode)
	}
}
