package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/subscribe"
)

// TestHistoryReading: a reading finds the metrics the packages register
// under the names it sums (a renamed metric would chart zeros): the events
// appended to a real store's archive, and the others present at zero.
func TestHistoryReading(t *testing.T) {
	reg := prometheus.NewRegistry()
	am := archive.NewMetrics(reg)
	backfill.NewMetrics(reg)
	firehose.NewMetrics(reg)
	subscribe.NewMetrics(reg)
	s, err := archive.Open(t.TempDir(), archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := archive.NewWriter(s, archive.WriterOptions{Metrics: am})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ev := func(rkey string) archive.Event {
		return archive.Event{Kind: archive.KindCreate, DID: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", Collection: "app.bsky.feed.post",
			RKey: rkey, Rev: "3kabcdefghi22", CID: []byte{1, 2}, Record: []byte{0xa0}, Source: archive.SourceBackfill}
	}
	if _, err := w.Apply(context.Background(), &archive.Unit{Events: []archive.Event{ev("a"), ev("b"), ev("c")}}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	for _, name := range []string{metricRecords, metricRepos, metricTip, metricDelivered, metricLastEvent} {
		if !have[name] {
			t.Errorf("no metric %s registered", name)
		}
	}
	r := historyReading(reg, time.Now())
	if r.Events != 3 || r.Records != 0 || r.Repos != 0 || r.Delivered != 0 || !math.IsNaN(r.LagSeconds) {
		t.Fatalf("reading %+v, want 3 events and no lag (no relay event yet)", r)
	}
}

// TestServeStatusLiveSections: serve's report carries the history, the
// store's size on disk, and the last warnings and errors with their
// attributes (those of With and groups included); infos are not kept.
func TestServeStatusLiveSections(t *testing.T) {
	store, _ := openSeeded(t)
	var out bytes.Buffer
	recent := &recentLog{}
	log := slog.New(recent.handler(slog.NewTextHandler(&out, nil)))
	hist := subscribe.NewStatusHistory(10*time.Second, 5)
	t0 := time.Now()
	hist.Add(t0, subscribe.HistoryReading{LagSeconds: math.NaN()})
	hist.Add(t0.Add(10*time.Second), subscribe.HistoryReading{Records: 500, Events: 100, LagSeconds: 2})
	s := &server{reg: newRegistry(), log: log, store: store, hist: hist, recent: recent}

	log.Info("not kept")
	log.With("component", "firehose").WithGroup("conn").Warn("relay connection lost", "err", "EOF")
	for i := range recentLogLines + 3 {
		log.Error("store write failed", "n", i)
	}
	if !strings.Contains(out.String(), "relay connection lost") {
		t.Fatalf("the wrapped handler did not log: %s", out.String())
	}
	b, err := json.Marshal(s.statusJSON())
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Archive    statusArchive           `json:"archive"`
		History    subscribe.HistoryReport `json:"history"`
		LastErrors []logLine               `json:"last_errors"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Archive.DiskBytes == 0 {
		t.Errorf("no disk size: %s", b)
	}
	if len(m.History.Points) != 1 || m.History.Points[0].RecordsPerSec != 50 || m.History.IntervalSeconds != 10 {
		t.Errorf("history %+v", m.History)
	}
	if len(m.LastErrors) != recentLogLines || m.LastErrors[recentLogLines-1].Detail != "n=22" || m.LastErrors[0].Detail != "n=3" {
		t.Fatalf("last errors %+v", m.LastErrors)
	}
	// The warning was pushed out by the errors; log it again and look.
	log.With("component", "firehose").WithGroup("conn").Warn("relay connection lost", "err", "EOF")
	last := recent.last()[recentLogLines-1]
	if last.Level != "WARN" || last.Message != "relay connection lost" || last.Detail != "component=firehose conn.err=EOF" {
		t.Fatalf("last line %+v", last)
	}
}
