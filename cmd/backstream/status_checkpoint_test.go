package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/internal/browsertest"
	"github.com/backstream/backstream/internal/promtest"
)

// statusSection GETs /status from h as JSON and returns its section key
// (nil when absent) and the whole report.
func statusSection(t *testing.T, url, key string) (map[string]any, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url+"/status?format=json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("/status: %d: %v", resp.StatusCode, err)
	}
	sec, _ := rep[key].(map[string]any)
	return sec, rep
}

// TestStatusCheckpointStuck: serve's /status has a checkpoint section
// that shows what an operator needs during a stuck checkpoint, from the
// checkpoint endpoint's own state: while a checkpoint's call on a backup
// volume that stopped answering is out, the checkpoint running, its
// destination and since when; once the request gave up (500), the last
// failure's time and its error cut to checkpointErrorMax bytes, and the
// call still out since when (every checkpoint refused until it returns);
// once it returned and the next checkpoint was written, that one's time
// and destination, and no call out.
func TestStatusCheckpointStuck(t *testing.T) {
	// Long enough for /status to be read while the call is held and the
	// request has not given up yet.
	const bound = 3 * time.Second
	base := t.TempDir()
	name := "b1-" + strings.Repeat("x", 200) // an error longer than the bound on it
	dest := filepath.Join(base, name)
	s, h, store, stuck := stuckCheckpoint(t, base, bound, func(op errorfs.Op, path string) bool {
		return op == errorfs.OpMkdirAll && strings.HasPrefix(path, dest)
	})
	hs := httptest.NewServer(s.sub.StatusHandler(nil)) // the admin listener's /status: the whole report
	defer hs.Close()

	answered := make(chan *httptest.ResponseRecorder, 1)
	go func() { answered <- post(h, name) }()
	promtest.Eventually(t, 10*time.Second, "the checkpoint's mkdir held", func() bool { return stuck.Holds() > 0 })
	ck, rep := statusSection(t, hs.URL, "checkpoint")
	run, _ := ck["running"].(map[string]any)
	if run["to"] != dest || run["since"] == nil || ck["backup_dir"] != base {
		t.Fatalf("/status while a checkpoint's call is held: checkpoint %v; want it running to %s, since when, under %s (report %v)", ck, dest, base, rep)
	}
	select {
	case rec := <-answered:
		if rec.Code != http.StatusInternalServerError {
			t.Fatalf("a checkpoint to a volume that stopped answering: %d %s; want 500", rec.Code, rec.Body)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("a checkpoint to a volume that stopped answering: no answer 30 s in (MaxWriteStall %v)", store.MaxWriteStall())
	}

	ck, _ = statusSection(t, hs.URL, "checkpoint")
	msg, _ := ck["last_error"].(string)
	stuckOut, _ := ck["stuck"].(map[string]any)
	kept, _, cut := strings.Cut(msg, "…")
	if ck["running"] != nil || ck["last_failure_at"] == nil || !strings.HasPrefix(msg, "archive: checkpoint to "+dest) || !cut || len(kept) > checkpointErrorMax ||
		stuckOut["call"] != "making "+dest || stuckOut["since"] == nil || ck["last_success_at"] != nil {
		t.Fatalf("/status once the stuck checkpoint failed: checkpoint %v; want no checkpoint running, the failure's time and error (cut to %d bytes: %d here, cut %v), the call out (making %s) since when, no success",
			ck, checkpointErrorMax, len(kept), cut, dest)
	}

	stuck.Release()
	waitCheckpointWritten(t, h, "b3")
	ck, _ = statusSection(t, hs.URL, "checkpoint")
	if ck["stuck"] != nil || ck["running"] != nil || ck["last_success_at"] == nil || ck["last_success_to"] != filepath.Join(base, "b3") || ck["last_failure_at"] == nil {
		t.Fatalf("/status once the call returned and a checkpoint was written: checkpoint %v; want no call out, the success's time and destination %s, the failure kept", ck, filepath.Join(base, "b3"))
	}
}

// TestStatusPageCheckpoint renders serve's report during a stuck
// checkpoint on the status page in Chromium: its Checkpoints section
// shows the call still out, marked, and the failure with its error,
// marked as newer than any success; once the call returned and the next
// checkpoint was written, that one, and no call out.
func TestStatusPageCheckpoint(t *testing.T) {
	bin := browsertest.Chromium(t)
	const bound = 200 * time.Millisecond
	base := t.TempDir()
	dest := filepath.Join(base, "b1")
	s, h, store, stuck := stuckCheckpoint(t, base, bound, func(op errorfs.Op, path string) bool {
		return op == errorfs.OpMkdirAll && strings.HasPrefix(path, dest)
	})
	hs := httptest.NewServer(s.sub.StatusHandler(nil)) // the admin listener's /status: the whole report
	defer hs.Close()
	if rec := postWithin(t, h, "b1", "a checkpoint to a volume that stopped answering", store); rec.Code != http.StatusInternalServerError {
		t.Fatalf("a checkpoint to a volume that stopped answering: %d %s; want 500", rec.Code, rec.Body)
	}
	p := browsertest.Render(t, bin, hs.URL+"/status", "status-checkpoint-stuck")
	if got := p.TextOf(t, "checkpoint-stuck"); !strings.HasPrefix(got, "making "+dest+" has not returned since 20") || !strings.Contains(got, "no checkpoint starts until it does") {
		t.Errorf("stuck: %q, want the call out and since when", got)
	}
	if got := p.TextOf(t, "checkpoint-failed"); !strings.Contains(got, "ago): archive: checkpoint to "+dest+": checkpoint destination stuck: making "+dest) {
		t.Errorf("last failure: %q, want when and the error", got)
	}
	for _, id := range []string{"checkpoint-stuck", "checkpoint-failed"} {
		if !strings.Contains(p.Attr(t, id, "class"), "stale") {
			t.Errorf("#%s is not marked: %s", id, p.Tag(t, id))
		}
	}
	for id, want := range map[string]string{"checkpoint-dir": base, "checkpoint-running": "none", "checkpoint-ok": "none since the process started"} {
		if got := p.TextOf(t, id); got != want {
			t.Errorf("#%s: %q, want %q", id, got, want)
		}
	}

	stuck.Release()
	waitCheckpointWritten(t, h, "b3")
	p = browsertest.Render(t, bin, hs.URL+"/status", "status-checkpoint-written")
	if p.Has("checkpoint-stuck") || strings.Contains(p.Attr(t, "checkpoint-failed", "class"), "stale") {
		t.Errorf("after a checkpoint written: a call still shown stuck, or the older failure still marked:\n%s", p.Text)
	}
	if got := p.TextOf(t, "checkpoint-ok"); !strings.HasSuffix(got, " ago) to "+filepath.Join(base, "b3")) {
		t.Errorf("last written: %q, want when and where", got)
	}
}
