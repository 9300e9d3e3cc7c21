package bootstrap_test

// A host whose announced rate limit is spent waits for its reset without
// holding one of the listRepos request slots the hosts share.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/upstream"
)

// pacedHost answers every listRepos page with one inactive account and a
// next cursor, announcing its budget spent until 5 minutes from now.
func pacedHost(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		w.Header().Set("Ratelimit-Limit", "1")
		w.Header().Set("Ratelimit-Remaining", "0")
		w.Header().Set("Ratelimit-Reset", strconv.FormatInt(time.Now().Add(5*time.Minute).Unix(), 10))
		writeListing(w, fmt.Sprintf("did:plc:paced%019d", n), strconv.Itoa(n+1))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// writeListing writes a listRepos page of one deactivated account.
func writeListing(w http.ResponseWriter, did, cursor string) {
	page := map[string]any{"repos": []map[string]any{{"did": did, "head": "", "rev": "", "active": false, "status": "deactivated"}}}
	if cursor != "" {
		page["cursor"] = cursor
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(page)
}

// TestFleetPacedHostHoldsNoRequestSlot: two roster hosts have announced
// their budget spent for the next 5 minutes (ratelimit-remaining 0), with
// 2 request slots (Workers) shared by the hosts' listings. A third host,
// which has announced nothing, is listed through its last page at once:
// the spent hosts' pages wait for their reset parked, on no slot. Before,
// each held a slot while it waited, so every other host's listing waited
// 5 minutes for each of their pages.
func TestFleetPacedHostHoldsNoRequestSlot(t *testing.T) {
	e := newEnv(t, worldCfg(3, 1)) // its store; its network is not asked
	limited := []*httptest.Server{pacedHost(t), pacedHost(t)}
	var healthyPages atomic.Int64
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
		healthyPages.Add(1)
		next := strconv.Itoa(n + 1)
		if n == 2 {
			next = ""
		}
		writeListing(w, fmt.Sprintf("did:plc:healthy%017d", n), next)
	}))
	t.Cleanup(healthy.Close)
	name := func(s *httptest.Server) string { return s.Listener.Addr().String() }
	// The healthy host is idle to the relay: listings begin it after the
	// active ones.
	hosts := []map[string]any{
		{"hostname": name(limited[0]), "status": "active", "accountCount": 10},
		{"hostname": name(limited[1]), "status": "active", "accountCount": 10},
		{"hostname": name(healthy), "status": "idle", "accountCount": 10},
	}
	relay := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"hosts": hosts})
	}))
	t.Cleanup(relay.Close)
	c, err := upstream.New(relay.URL, upstream.Options{ScratchDir: t.TempDir(),
		LoopbackHosts: []string{name(limited[0]), name(limited[1]), name(healthy)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each limited host has announced its budget spent before the run
	// (an earlier request of the process: a download, a page).
	for _, s := range limited {
		if _, err := c.HostListRepos(ctx, name(s), "", 1); err != nil {
			t.Fatalf("announcing %s's budget: %v", name(s), err)
		}
	}
	jobs := &countJobs{runs: map[string]int{}}
	b := e.bootOver(c, e.w, jobs, func(cfg *bootstrap.Config) { cfg.Workers, cfg.PageLimit = 2, 1 })
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	deadline := time.After(10 * time.Second)
	for healthyPages.Load() < 3 {
		select {
		case <-time.After(5 * time.Millisecond):
		case err := <-done:
			t.Fatalf("bootstrap ended before the healthy host was listed: %v", err)
		case <-deadline:
			t.Fatalf("the healthy host served %d of its 3 pages in 10 s: its listing waits for a request slot held by hosts waiting out their announced rate limit (5 minutes)",
				healthyPages.Load())
		}
	}
	cancel()
	<-done
}
