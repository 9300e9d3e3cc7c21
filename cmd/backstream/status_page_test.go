package main

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/browsertest"
	"github.com/backstream/backstream/subscribe"
)

// TestStatusPageServeReport renders serve's own report, built from a real
// store, on the admin listener's /status in Chromium: the page reads the
// keys serve writes (the archive's size and newest seq, repos by status,
// failures by class and host, the listRepos checkpoint, the history, the
// last warnings, the roster's hosts by status) and shows them with labels and human units. The fixture
// reports of subscribe's TestStatusPageInBrowser cannot see a key renamed
// here; this test does.
func TestStatusPageServeReport(t *testing.T) {
	bin := browsertest.Chromium(t)
	store, _ := openSeeded(t, func(t *testing.T, dir string) { seedRoster(t, dir, 500) })
	recent := &recentLog{}
	log := slog.New(recent.handler(slog.NewTextHandler(io.Discard, nil)))
	s := &server{reg: newRegistry(), log: log, store: store, recent: recent,
		hist: subscribe.NewStatusHistory(subscribe.DefaultHistoryInterval, subscribe.DefaultHistoryPoints)}
	t0 := time.Now().Add(-time.Minute)
	for i := range 3 {
		at := t0.Add(time.Duration(i) * subscribe.DefaultHistoryInterval)
		s.hist.Add(at, historyReading(s.reg, at))
	}
	log.Warn("relay connection lost", "err", "EOF")
	sub, err := subscribe.New(subscribe.Config{Ready: s.ready, StatusJSON: s.statusJSON})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s.sub = sub
	hs := httptest.NewServer(s.adminHandler())
	defer hs.Close()

	p := browsertest.Render(t, bin, hs.URL+"/status", "status-serve")
	p.RequireHuman(t)
	rep := p.FollowJSON(t, "raw-json")
	arch, _ := rep["archive"].(map[string]any)
	if d, _ := arch["disk_bytes"].(float64); d <= 0 {
		t.Fatalf("the report has no disk size: %v", rep)
	}
	if got := p.TextOf(t, "events"); got != "2" {
		t.Errorf("events %q, want 2", got)
	}
	if got := p.TextOf(t, "disk"); !regexp.MustCompile(`^\d+(\.\d)? (B|KiB|MiB)$`).MatchString(got) {
		t.Errorf("on disk %q, want a size in B, KiB or MiB", got)
	}
	if n := p.ChartPoints(t, "chart-ingest"); n != 2 {
		t.Errorf("ingest chart: %d points, want 2", n)
	}
	for _, want := range []string{"Complete 2", "Failed 3", "Not started 1", "Inactive (any status) 1", "Total 6",
		"transient 2", "timeout 1", "pds1.test 2", "pds2.test 1", "listRepos checkpoint page-7",
		"warn relay connection lost — err=EOF", "Mode hosts", "By status · Banned 1", "By status · Left 1"} {
		if !strings.Contains(p.Text, want) {
			t.Errorf("page lacks %q:\n%s", want, p.Text)
		}
	}
}
