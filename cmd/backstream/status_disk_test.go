package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/subscribe"
)

// TestStatusShowsFreeSpace: serve checks the data dir's volume against the
// --min-free floor every 5 s and stops below it. Before, neither /status
// nor /metrics said how much was free or where the floor was, so nothing
// on the status page, and no alert, could warn before the process
// stopped (node_exporter knows the free space, not the floor). Now
// /status's archive has free_bytes and min_free_bytes, and /metrics
// backstream_store_free_bytes and backstream_store_min_free_bytes, as the
// last check read them.
func TestStatusShowsFreeSpace(t *testing.T) {
	dir := t.TempDir()
	seedStore(t, dir)
	const floor, total = 1 << 30, 100 << 30
	var free atomic.Uint64
	free.Store(3 << 29) // 1.5 GiB
	store, err := archive.Open(dir, archive.Options{MinFree: floor,
		Space: func(string) (diskspace.Space, error) { return diskspace.Space{Free: free.Load(), Total: total}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	reg := newRegistry()
	reg.MustRegister(archive.NewPebbleCollector(store))
	s := &server{reg: reg, store: store}
	sub, err := subscribe.New(subscribe.Config{Ready: s.ready, StatusJSON: s.statusJSON})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	s.sub = sub
	h := s.adminHandler()
	get := func(path string) string {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		b, _ := io.ReadAll(rec.Body)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: %d %s", path, rec.Code, b)
		}
		return string(b)
	}
	for _, want := range []uint64{3 << 29, floor + 1} {
		free.Store(want)
		if err := store.CheckSpace(); err != nil {
			t.Fatalf("%d bytes free over a floor of %d: %v", want, floor, err)
		}
		var r struct {
			Archive map[string]any `json:"archive"`
		}
		if body := get("/status?format=json"); json.Unmarshal([]byte(body), &r) != nil {
			t.Fatalf("/status: %s", body)
		}
		if r.Archive["free_bytes"] != float64(want) || r.Archive["min_free_bytes"] != float64(floor) {
			t.Errorf("%d bytes free over a floor of %d: /status archive %v, want free_bytes %d and min_free_bytes %d",
				want, floor, r.Archive, want, floor)
		}
		m := get("/metrics")
		for _, line := range []string{"backstream_store_free_bytes " + promFloat(want), "backstream_store_min_free_bytes " + promFloat(floor)} {
			if !strings.Contains(m, "\n"+line+"\n") {
				t.Errorf("%d bytes free over a floor of %d: /metrics lacks %q", want, floor, line)
			}
		}
	}
}

// promFloat is v as the Prometheus text format writes a gauge.
func promFloat(v uint64) string { return strconv.FormatFloat(float64(v), 'g', -1, 64) }
