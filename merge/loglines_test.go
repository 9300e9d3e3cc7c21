package merge

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/logtest"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
)

// TestPendingPassStaleLogBounded: every pending repo's host serves a
// snapshot older than the archive (a lagging PDS, or an account busier
// than its replacement). Each is left pending and counted in
// backstream_merge_pending_total{result="stale"}; the log gets one line a
// minute, not one per repo.
func TestPendingPassStaleLogBounded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const n = 1000
	net, client := quietNetwork(t, oracle.Config{Accounts: n, RecordsMean: 1, Hosts: 2, Seed: 5})
	r := newRig(t)
	jobs, err := backfill.NewRunner(backfill.Options{Source: client, Writer: r.w, Current: r.store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	var ups []archive.RepoUpdate
	var evs []archive.Event
	for _, a := range net.World().Accounts() {
		if !a.Active || a.Status == "deleted" {
			continue
		}
		ups = append(ups, archive.RepoUpdate{DID: a.DID, Fields: archive.FieldStatus | archive.FieldActive,
			State: archive.RepoState{Status: archive.StatusPending, Active: true}})
		// A live row far in the future moves the ratchet above any snapshot.
		evs = append(evs, archive.Event{Kind: archive.KindDelete, DID: a.DID, Collection: "app.bsky.feed.post",
			RKey: "x", Rev: "jzzzzzzzzzzzz", Source: archive.SourceLive})
	}
	r.apply(r.w, &archive.Unit{Repos: ups})
	r.apply(r.w, &archive.Unit{Events: evs})
	var lines logtest.Counter
	reg := prometheus.NewRegistry()
	if err := PendingPass(ctx, Config{Store: r.store, Writer: r.w, Jobs: jobs, Logger: lines.Logger(), Metrics: NewMetrics(reg)}); err != nil {
		t.Fatalf("pending pass: %v", err)
	}
	counted := promtest.Value(t, reg, "backstream_merge_pending_total", map[string]string{"result": "stale"})
	if got := lines.Of(staleLine); got != 1 || counted != float64(len(ups)) {
		t.Fatalf("%d pending repos served stale: %d lines %q (want 1), backstream_merge_pending_total{result=stale} = %v (want %d)",
			len(ups), got, staleLine, counted, len(ups))
	}
}
