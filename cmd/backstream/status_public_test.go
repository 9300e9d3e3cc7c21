package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/browsertest"
	"github.com/backstream/backstream/subscribe"
)

// publicStatusServer is serve's server over a store in its own data dir,
// taking checkpoints under a backup dir of its own, in the state whose
// report names local files in every place it can: a warning logged with a
// store file's path, a checkpoint written (its destination), a malformed
// compaction state (its recovery names the data dir) and a fatal error
// naming a store file. It returns the server, its admin handler (made once:
// it registers the checkpoint metrics), the data dir and the backup dir.
func publicStatusServer(t *testing.T) (s *server, admin http.Handler, dataDir, backupDir string) {
	t.Helper()
	dataDir, backupDir = t.TempDir(), t.TempDir()
	store := openTestStore(t, dataDir)
	if err := store.DB().Set(archive.KeyCompaction, []byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s = testServer(t, store, backupDir, 0)
	s.recent = &recentLog{}
	s.log = slog.New(s.recent.handler(slog.NewTextHandler(io.Discard, nil)))
	s.log.Warn("a store file could not be read", "path", filepath.Join(dataDir, "store", "000001.sst"))
	admin = s.adminHandler()
	if rec := post(admin, "b1"); rec.Code != http.StatusOK {
		t.Fatalf("checkpoint: %d %s", rec.Code, rec.Body)
	}
	s.health.SetPhase(archive.PhaseSteadyState)
	s.health.Fail(fmt.Errorf("disk fault: write %s: input/output error", filepath.Join(dataDir, "store", "000002.log")))
	return s, admin, dataDir, backupDir
}

// getStatus GETs /status from h, as JSON or (html) as a browser asks.
func getStatus(t *testing.T, h http.Handler, html bool) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/status", nil)
	if html {
		req.Header.Set("Accept", "text/html")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("/status: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// unhealthy GETs /healthz from h after a fatal error: 503.
func unhealthy(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/healthz after a fatal error: %d %s, want 503", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// refusedSubscribe GETs /subscribe from h while the process does not
// serve: the 503 refusal, which carries the report.
func refusedSubscribe(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/subscribe", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "NotReady") {
		t.Fatalf("/subscribe after a fatal error: %d %s, want 503 NotReady", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// TestStatusPublicWithholdsOperatorSections: the public listener's /status
// (JSON and page), the report /subscribe's refusal carries and /healthz's
// 503 name no local file, neither the data dir nor the backup dir, and carry none of
// the operator's sections (checkpoint, last_errors) nor an error's text,
// while /status still says what a client needs: the phase, that there is
// an error, the repos, cursors, archive, compaction (halted) and
// subscribers. The admin listener's /status keeps every section and text.
func TestStatusPublicWithholdsOperatorSections(t *testing.T) {
	s, admin, dataDir, backupDir := publicStatusServer(t)
	public := s.publicHandler()
	for name, body := range map[string]string{
		"/status":                 getStatus(t, public, false),
		"/status page":            getStatus(t, public, true),
		"/subscribe's 503 answer": refusedSubscribe(t, public),
		"/healthz":                unhealthy(t, public),
	} {
		for _, dir := range []string{dataDir, backupDir} {
			if strings.Contains(body, dir) {
				t.Errorf("the public listener's %s names the local dir %s:\n%s", name, dir, body)
			}
		}
	}
	var pub map[string]any
	if err := json.Unmarshal([]byte(getStatus(t, public, false)), &pub); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"checkpoint", "last_errors"} {
		if _, ok := pub[k]; ok {
			t.Errorf("the public /status has the operator's %q: %v", k, pub[k])
		}
	}
	comp, _ := pub["compaction"].(map[string]any)
	if pub["phase"] != "steady_state" || pub["error"] != subscribe.WithheldError || pub["public"] != true ||
		pub["repos"] == nil || pub["cursors"] == nil || pub["archive"] == nil || pub["subscribe"] == nil ||
		comp["halted"] != true || comp["halt_reason"] != nil || comp["halt_recovery"] != nil {
		t.Errorf("the public /status: phase %v, error %q, public %v, compaction %v; want steady_state, %q, true, halted without its texts, and the repos, cursors, archive and subscribe sections:\n%v",
			pub["phase"], pub["error"], pub["public"], comp, subscribe.WithheldError, pub)
	}

	if got, want := unhealthy(t, admin), "disk fault: write "+filepath.Join(dataDir, "store", "000002.log"); !strings.Contains(got, want) {
		t.Errorf("the admin /healthz: %q, want it to name the error (%s)", got, want)
	}
	adm := getStatus(t, admin, false)
	for _, want := range []string{`"backup_dir": "` + backupDir + `"`, `"last_success_to": "` + filepath.Join(backupDir, "b1"),
		"a store file could not be read", "disk fault: write " + filepath.Join(dataDir, "store", "000002.log"),
		"--data-dir " + dataDir} {
		if !strings.Contains(adm, want) {
			t.Errorf("the admin /status lacks %q:\n%s", want, adm)
		}
	}
	if strings.Contains(adm, `"public"`) {
		t.Errorf("the admin /status says it is the public form:\n%s", adm)
	}
}

// TestStatusPagePublic renders both listeners' /status pages in Chromium
// for a report that names local files in every place it can
// (publicStatusServer): the public page renders without error, says there
// is an error without its text, shows no checkpoint section and, for the
// last warnings, where they are shown, and names no local dir anywhere in
// its DOM (the inlined report included); the admin page shows the
// checkpoints, the warnings and the error's text.
func TestStatusPagePublic(t *testing.T) {
	bin := browsertest.Chromium(t)
	s, admin, dataDir, backupDir := publicStatusServer(t)
	pub := httptest.NewServer(s.publicHandler())
	defer pub.Close()
	adm := httptest.NewServer(admin)
	defer adm.Close()

	p := browsertest.Render(t, bin, pub.URL+"/status", "status-public")
	for _, dir := range []string{dataDir, backupDir} {
		if strings.Contains(p.DOM, dir) {
			t.Errorf("the public page names the local dir %s:\n%s", dir, p.DOM)
		}
	}
	if got := p.TextOf(t, "error"); got != subscribe.WithheldError {
		t.Errorf("the public page's error: %q, want %q", got, subscribe.WithheldError)
	}
	if got := p.TextOf(t, "last-errors-withheld"); !strings.Contains(got, "admin listener") {
		t.Errorf("the public page's last warnings: %q, want where they are shown", got)
	}
	if p.Has("checkpoint") || p.Has("section-public") || p.Has("checkpoint-dir") {
		t.Errorf("the public page shows a checkpoint section, or its public mark as a section:\n%s", p.Text)
	}
	if rep := p.FollowJSON(t, "raw-json"); rep["public"] != true || rep["checkpoint"] != nil {
		t.Errorf("the public page's JSON: %v, want the public form", rep)
	}

	a := browsertest.Render(t, bin, adm.URL+"/status", "status-admin")
	if got := a.TextOf(t, "checkpoint-dir"); got != backupDir {
		t.Errorf("the admin page's backup dir: %q, want %s", got, backupDir)
	}
	for _, want := range []string{"a store file could not be read", "disk fault: write " + filepath.Join(dataDir, "store", "000002.log")} {
		if !strings.Contains(a.Text, want) {
			t.Errorf("the admin page lacks %q:\n%s", want, a.Text)
		}
	}
	if a.Has("last-errors-withheld") {
		t.Errorf("the admin page says its warnings are withheld:\n%s", a.Text)
	}
}
