package main

// In-process tests of `backstream checkpoint`: the direct path on a data dir
// no process holds, and the admin endpoint on a real loopback HTTP server
// over a store the writer is committing to. The process-level test (a real
// serve under live traffic) is checkpoint_process_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/subscribe"
)

// TestCheckpointLocal: without --admin-listen the CLI checkpoints a data dir no
// process holds; `status --data-dir` on the checkpoint reports the same
// phase, counts, cursors and tip; a second checkpoint to the same place is
// refused and leaves the first intact.
func TestCheckpointLocal(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	seedStore(t, data)
	ck := filepath.Join(base, "backups", "b1")
	code, out, stderr := runCLI(t, nil, "checkpoint", "--data-dir", data, "--to", ck, "--json")
	if code != 0 {
		t.Fatalf("checkpoint: %d %s", code, stderr)
	}
	var res checkpointResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if res.To != ck || res.Phase != "bootstrap" || res.TipSeq != 2 {
		t.Fatalf("result %+v", res)
	}
	_, live, _ := runCLI(t, nil, "status", "--data-dir", data, "--json")
	code, got, stderr := runCLI(t, nil, "status", "--data-dir", ck, "--json")
	if code != 0 {
		t.Fatalf("status of the checkpoint: %d %s", code, stderr)
	}
	// The same report but for the size: a copy's files are not the
	// original's (its write-ahead log, say).
	if withoutSize(t, got) != withoutSize(t, live) {
		t.Fatalf("status of the checkpoint differs:\n%s\nlive:\n%s", got, live)
	}
	code, _, stderr = runCLI(t, nil, "checkpoint", "--data-dir", data, "--to", ck)
	if code != 1 || !strings.Contains(stderr, "not empty") {
		t.Fatalf("second checkpoint to %s: code %d, %s", ck, code, stderr)
	}
	if code, _, _ := runCLI(t, nil, "status", "--data-dir", ck); code != 0 {
		t.Fatal("the refused second checkpoint damaged the first")
	}
	if code, _, stderr := runCLI(t, nil, "checkpoint", "--data-dir", data); code != 2 || !strings.Contains(stderr, "--to") {
		t.Fatalf("no --to: code %d, %s", code, stderr)
	}
	if code, _, stderr := runCLI(t, nil, "checkpoint", "--data-dir", filepath.Join(base, "nothing"), "--to", filepath.Join(base, "x")); code != 1 || !strings.Contains(stderr, "no store here") {
		t.Fatalf("missing data dir: code %d, %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(base, "nothing")); !os.IsNotExist(err) {
		t.Fatalf("a checkpoint of a missing data dir created it: %v", err)
	}
}

// withoutSize is a `status --json` report without the store's size on
// disk, as JSON.
func withoutSize(t *testing.T, report string) string {
	t.Helper()
	var r map[string]any
	if err := json.Unmarshal([]byte(report), &r); err != nil {
		t.Fatalf("%v: %s", err, report)
	}
	arch, ok := r["archive"].(map[string]any)
	if !ok {
		t.Fatalf("no archive in %s", report)
	}
	if d, _ := arch["disk_bytes"].(float64); d <= 0 {
		t.Fatalf("the report gives the store no size: %s", report)
	}
	delete(arch, "disk_bytes")
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCheckpointLocalHeldStore: a store another process holds is named as
// such, and the message points to --admin-listen.
func TestCheckpointLocalHeldStore(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	seedStore(t, data)
	s, err := archive.Open(data, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, _, stderr := runCLI(t, nil, "checkpoint", "--data-dir", data, "--to", filepath.Join(base, "ck"))
	if code != 1 || !strings.Contains(stderr, "held open by another process") || !strings.Contains(stderr, "--admin-listen") {
		t.Fatalf("held store: code %d, %s", code, stderr)
	}
}

// endpointServer is serve's admin handler over an open store, on loopback,
// taking checkpoints under backupDir with no interval.
func endpointServer(t *testing.T, store *archive.Store, backupDir string) *httptest.Server {
	t.Helper()
	ck, err := newCheckpointConfig(backupDir, 0)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{reg: newRegistry(), log: slog.New(slog.DiscardHandler), store: store, ck: ck}
	sub, err := subscribe.New(subscribe.Config{Ready: s.ready, StatusJSON: s.statusJSON})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	s.sub = sub
	hs := httptest.NewServer(s.adminHandler())
	t.Cleanup(hs.Close)
	return hs
}

// TestCheckpointEndpointWhileWriting: the CLI with --admin-listen asks serve's
// handler for a checkpoint while the writer commits; the checkpoint opens,
// its tip is below the live tip, and every event in it equals the live
// event at its seq.
func TestCheckpointEndpointWhileWriting(t *testing.T) {
	base := t.TempDir()
	store, err := archive.Open(filepath.Join(base, "data"), archive.Options{Logger: slog.New(slog.DiscardHandler), CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	w, err := archive.NewWriter(store, archive.WriterOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ctx.Err() == nil; i++ {
			ev := archive.Event{Kind: archive.KindCreate, DID: fmt.Sprintf("did:plc:%024d", i%40), Collection: "app.bsky.feed.post",
				RKey: fmt.Sprintf("r%d", i), Rev: fmt.Sprintf("3m%011d", i), CID: []byte{1, byte(i)}, Record: []byte{0xa0}, Source: archive.SourceLive}
			if _, err := w.Apply(ctx, &archive.Unit{Events: []archive.Event{ev}}); err != nil && ctx.Err() == nil {
				t.Errorf("apply: %v", err)
				return
			}
		}
	}()
	defer func() { cancel(); wg.Wait(); w.Close() }()
	for tip, _ := store.Tip(); tip < 200; tip, _ = store.Tip() {
		time.Sleep(5 * time.Millisecond)
	}
	hs := endpointServer(t, store, base)
	listen := strings.TrimPrefix(hs.URL, "http://")
	ck := filepath.Join(base, "ck")
	code, out, stderr := runCLI(t, nil, "checkpoint", "--admin-listen", listen, "--to", ck, "--json")
	if code != 0 {
		t.Fatalf("checkpoint --admin-listen: %d %s", code, stderr)
	}
	var res checkpointResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	for tip, _ := store.Tip(); tip <= res.TipSeq+100; tip, _ = store.Tip() {
		time.Sleep(5 * time.Millisecond) // the live store moves on
	}
	cancel()
	wg.Wait()
	ckStore, err := archive.Open(ck, archive.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("checkpoint does not open: %v", err)
	}
	defer ckStore.Close()
	liveTip, _ := store.Tip()
	n := compareCheckpoint(t, ckStore, store)
	if n != res.TipSeq || n < 200 || n >= liveTip {
		t.Fatalf("checkpoint holds %d events, reported tip %d, live tip %d", n, res.TipSeq, liveTip)
	}
	// The same destination again: 409, named as refused.
	code, _, stderr = runCLI(t, nil, "checkpoint", "--admin-listen", listen, "--to", ck)
	if code != 1 || !strings.Contains(stderr, "409") || !strings.Contains(stderr, "not empty") {
		t.Fatalf("second checkpoint: code %d, %s", code, stderr)
	}
}

// compareCheckpoint asserts that the checkpoint is a prefix of the live
// store up to its tip: every live event at or below that tip is in the
// checkpoint, equal, and a checkpoint event the live store lacks was
// removed by compaction since (superseded below the live store's
// watermark: check.Vanished). It returns the checkpoint's tip.
func compareCheckpoint(t *testing.T, ck, live *archive.Store) uint64 {
	t.Helper()
	ckRows, err := check.Rows(ck)
	if err != nil {
		t.Fatal(err)
	}
	liveRows, err := check.Rows(live)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := live.Compaction()
	if err != nil {
		t.Fatal(err)
	}
	if len(ckRows) == 0 {
		return 0
	}
	tip := ckRows[len(ckRows)-1].Seq
	bySeq := make(map[uint64]*archive.Event, len(ckRows))
	for i := range ckRows {
		bySeq[ckRows[i].Seq] = &ckRows[i]
	}
	for i := range liveRows {
		y := &liveRows[i]
		if y.Seq > tip {
			break
		}
		x, ok := bySeq[y.Seq]
		if !ok {
			t.Fatalf("live seq %d (at or below the checkpoint's tip %d) is not in the checkpoint", y.Seq, tip)
		}
		if x.DID != y.DID || x.Collection != y.Collection || x.RKey != y.RKey || x.Rev != y.Rev ||
			x.Kind != y.Kind || x.TimeUS != y.TimeUS || string(x.CID) != string(y.CID) || string(x.Record) != string(y.Record) ||
			x.Handle != y.Handle || x.Active != y.Active || x.Status != y.Status || x.UpstreamSeq != y.UpstreamSeq || x.Source != y.Source {
			t.Fatalf("event %d differs:\ncheckpoint %+v\nlive       %+v", y.Seq, *x, *y)
		}
	}
	if gone := check.Vanished(ckRows, liveRows, cs.Watermark); len(gone) > 0 {
		t.Fatalf("checkpoint seq %d is not in the live store, and no row below its watermark %d supersedes it", gone[0], cs.Watermark)
	}
	return tip
}

// TestCheckpointEndpointRefusals: the endpoint answers only loopback
// callers not behind a proxy, only POST, only paths under --backup-dir, and
// never an existing non-empty directory or a path inside the live store.
func TestCheckpointEndpointRefusals(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	store, err := archive.Open(data, archive.Options{Logger: slog.New(slog.DiscardHandler), CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	hs := endpointServer(t, store, base)
	full := filepath.Join(base, "full")
	if err := os.MkdirAll(full, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(full, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	post := func(to string, hdr http.Header) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, hs.URL+checkpointPath+"?to="+url.QueryEscape(to), nil)
		for k, v := range hdr {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var e checkpointError
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return resp.StatusCode, e.Error
	}
	for _, tc := range []struct {
		name string
		to   string
		hdr  http.Header
		code int
		msg  string
	}{
		{"escaping", "../x", nil, 403, "not under --backup-dir"},
		{"outside", filepath.Dir(base), nil, 403, "not under --backup-dir"},
		{"empty", "", nil, 400, "required"},
		{"proxied", filepath.Join(base, "p"), http.Header{"X-Forwarded-For": {"203.0.113.9"}}, 403, "proxy"},
		{"forwarded", filepath.Join(base, "p"), http.Header{"Forwarded": {"for=203.0.113.9"}}, 403, "proxy"},
		{"non-empty", full, nil, 409, "not empty"},
		{"inside store", filepath.Join(data, "store", "x"), nil, 409, "inside the live store"},
		{"the data dir", data, nil, 409, "refused"},
	} {
		code, msg := post(tc.to, tc.hdr)
		if code != tc.code || !strings.Contains(msg, tc.msg) {
			t.Errorf("%s: %d %q, want %d and %q", tc.name, code, msg, tc.code, tc.msg)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "p")); !os.IsNotExist(err) {
		t.Fatalf("a refused request wrote a checkpoint: %v", err)
	}
	if names, _ := os.ReadDir(full); len(names) != 1 {
		t.Fatalf("a refused request touched %s", full)
	}
	resp, err := http.Get(hs.URL + checkpointPath + "?to=" + url.QueryEscape(filepath.Join(base, "g")))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatal("GET took a checkpoint")
	}
	if _, err := os.Stat(filepath.Join(base, "g")); !os.IsNotExist(err) {
		t.Fatalf("GET wrote a checkpoint: %v", err)
	}
	// A caller on another address is refused before anything else.
	h := (&server{log: slog.New(slog.DiscardHandler), store: store, ck: checkpointConfig{backupDir: base}}).checkpointEndpoint()
	req := httptest.NewRequest(http.MethodPost, checkpointPath+"?to="+url.QueryEscape(filepath.Join(base, "r")), nil)
	req.RemoteAddr = "192.0.2.7:40000"
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden || !strings.Contains(rec.Body.String(), "loopback") {
		t.Fatalf("remote caller: %d %s", rec.Code, rec.Body)
	}
	if _, err := os.Stat(filepath.Join(base, "r")); !os.IsNotExist(err) {
		t.Fatalf("a remote caller wrote a checkpoint: %v", err)
	}
	// And the endpoint works for a good request.
	if code, msg := post(filepath.Join(base, "good"), nil); code != 200 {
		t.Fatalf("good request: %d %s", code, msg)
	}
}

func TestCheckpointURL(t *testing.T) {
	for listen, want := range map[string]string{
		":6008":          "http://127.0.0.1:6008" + checkpointPath + "?to=%2Fb",
		"0.0.0.0:6008":   "http://127.0.0.1:6008" + checkpointPath + "?to=%2Fb",
		"[::]:6008":      "http://127.0.0.1:6008" + checkpointPath + "?to=%2Fb",
		"127.0.0.1:9":    "http://127.0.0.1:9" + checkpointPath + "?to=%2Fb",
		"localhost:6008": "http://localhost:6008" + checkpointPath + "?to=%2Fb",
		"[::1]:6008":     "http://[::1]:6008" + checkpointPath + "?to=%2Fb",
	} {
		if got, err := checkpointURL(listen, "/b"); err != nil || got != want {
			t.Errorf("%s: %s %v, want %s", listen, got, err, want)
		}
	}
	if _, err := checkpointURL("6008", "/b"); err == nil {
		t.Error("a port without a colon was accepted")
	}
}

// TestCheckpointCLIPublicListener: the CLI pointed at serve's public
// listener (which has no admin endpoint) says to use --admin-listen; with
// BACKSTREAM_ADMIN_LISTEN set, as for serve in a container, it reaches the
// admin listener with no flag.
func TestCheckpointCLIPublicListener(t *testing.T) {
	base := t.TempDir()
	s := testServer(t, openTestStore(t, filepath.Join(base, "data")), filepath.Join(base, "backups"), 0)
	hs, err := s.listenHTTP("127.0.0.1:0", httpOptions{adminListen: "127.0.0.1:0", idleTimeout: time.Minute, readTimeout: time.Minute}, connLimits{})
	if err != nil {
		t.Fatal(err)
	}
	defer hs.shutdown(time.Second)
	code, _, stderr := runCLI(t, nil, "checkpoint", "--admin-listen", hs.publicAddr.String(), "--to", "a")
	if code != 1 || !strings.Contains(stderr, "--admin-listen") || !strings.Contains(stderr, "404") {
		t.Fatalf("checkpoint against the public listener: %d %s", code, stderr)
	}
	code, out, stderr := runCLI(t, []string{"BACKSTREAM_ADMIN_LISTEN=" + hs.adminAddr.String()}, "checkpoint", "--to", "a", "--json")
	if code != 0 {
		t.Fatalf("checkpoint with BACKSTREAM_ADMIN_LISTEN: %d %s", code, stderr)
	}
	var res checkpointResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.To != filepath.Join(s.ck.backupDir, "a") {
		t.Fatalf("result %+v (%v), want under %s", res, err, s.ck.backupDir)
	}
}

// TestCheckpointDataDirAndAdminListen: a --data-dir on the command line
// while --admin-listen is set, by flag or by BACKSTREAM_ADMIN_LISTEN (as in
// a container, which sets BACKSTREAM_DATA_DIR too), is a usage error, not
// a checkpoint of the serve's store instead; the variables alone go to the
// admin listener, and an emptied BACKSTREAM_ADMIN_LISTEN lets --data-dir
// through.
func TestCheckpointDataDirAndAdminListen(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	seedStore(t, data)
	container := []string{"BACKSTREAM_ADMIN_LISTEN=127.0.0.1:1", "BACKSTREAM_DATA_DIR=" + filepath.Join(base, "other")}
	code, _, stderr := runCLI(t, container, "checkpoint", "--data-dir", data, "--to", filepath.Join(base, "a"))
	if code != 2 || !strings.Contains(stderr, "--data-dir and BACKSTREAM_ADMIN_LISTEN=127.0.0.1:1") || !strings.Contains(stderr, "pass one of them") {
		t.Fatalf("--data-dir with BACKSTREAM_ADMIN_LISTEN: exit %d, %s", code, stderr)
	}
	code, _, stderr = runCLI(t, nil, "checkpoint", "--data-dir", data, "--admin-listen", "127.0.0.1:1", "--to", filepath.Join(base, "b"))
	if code != 2 || !strings.Contains(stderr, "--data-dir and --admin-listen are both set") {
		t.Fatalf("--data-dir with --admin-listen: exit %d, %s", code, stderr)
	}
	code, _, stderr = runCLI(t, container, "checkpoint", "--to", "c")
	if code != 1 || !strings.Contains(stderr, "no backstream serve answers on 127.0.0.1:1") {
		t.Fatalf("the variables alone: exit %d, %s", code, stderr)
	}
	code, _, stderr = runCLI(t, []string{"BACKSTREAM_ADMIN_LISTEN="}, "checkpoint", "--data-dir", data, "--to", filepath.Join(base, "d"))
	if code != 0 {
		t.Fatalf("--data-dir with BACKSTREAM_ADMIN_LISTEN emptied: exit %d, %s", code, stderr)
	}
}

// TestCheckpointRefusesCrossSiteBrowser: a web page the operator opens
// can make the browser POST to the admin listener (a "simple" request, no
// preflight): it comes from loopback with no proxy header. The checkpoint
// endpoint refuses a cross-origin browser request; the CLI sends neither
// Origin nor Sec-Fetch-Site.
func TestCheckpointRefusesCrossSiteBrowser(t *testing.T) {
	base := t.TempDir()
	backups := filepath.Join(base, "backups")
	s := testServer(t, openTestStore(t, filepath.Join(base, "data")), backups, 0)
	h := s.adminHandler() // the admin listener's handler, as serve mounts it
	req := httptest.NewRequest(http.MethodPost, checkpointPath+"?to="+url.QueryEscape("from-evil"), nil)
	req.RemoteAddr = "127.0.0.1:40000"
	// What a browser sends for a form POST / fetch(…, {method:"POST", mode:"no-cors"})
	// issued by a page on https://evil.example.
	req.Header.Set("Origin", "https://evil.example")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	req.Header.Set("Sec-Fetch-Mode", "no-cors")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if _, err := os.Stat(filepath.Join(backups, "from-evil")); err == nil || rec.Code == http.StatusOK {
		t.Fatalf("a cross-site browser request (Origin https://evil.example, Sec-Fetch-Site cross-site) took a checkpoint: %d %s", rec.Code, rec.Body)
	}
}
