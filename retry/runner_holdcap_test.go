package retry_test

import (
	"context"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
	"github.com/prometheus/client_golang/prometheus"
)

// TestAccountRowPastHoldCap (S5, H-bounds): while a replacement holds an
// account, the account floods deletes until its live units pass the
// per-account hold cap, and then it is taken down. A replacement can only
// bring back records, never an account row: the takedown must still be
// archived, so the account folds to nothing once everything settles.
func TestAccountRowPastHoldCap(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 10, RecordsMean: 60, Hosts: 2, Seed: 33, Traffic: oracle.TrafficNone})
	// A writer whose per-account hold cap a few deletes fill.
	_ = e.w.Close()
	e.reg = prometheus.NewRegistry()
	e.m = retry.NewMetrics(e.reg)
	w, err := archive.NewWriter(e.store, archive.WriterOptions{Logger: quiet, LiveLogBytes: 1 << 20,
		Metrics: archive.NewMetrics(e.reg), HoldAccountBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	e.w = w
	e.jobs = e.newJobs(nil)
	e.archiveAll()
	live := e.live()
	tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 40 })
	dropped := func() float64 { return metric(t, e.reg, "backstream_archive_hold_dropped_rows_total", nil) }
	cw := &chunkWriter{Writer: e.w, did: tgt.DID}
	cw.mid = func() {
		// The replacement holds the account: delete records until the
		// writer drops one at the cap, then take the account down.
		paths := []string{}
		for p := range e.net.World().Records(tgt.DID) {
			paths = append(paths, p)
		}
		held := func() float64 { return metric(t, e.reg, "backstream_archive_held_units", nil) }
		for i, p := range paths {
			if _, err := e.net.Emit(func(w *world.World) (world.Event, error) { return w.DeleteRecord(tgt.DID, p) }); err != nil {
				t.Error(err)
				return
			}
			// The writer has taken the delete: it waits or it was dropped.
			if !poll(10*time.Second, func() bool { return held()+dropped() == float64(i+1) }) {
				t.Errorf("delete %d: %v units held, %v rows dropped", i+1, held(), dropped())
				return
			}
			if dropped() > 0 {
				break
			}
		}
		if dropped() == 0 {
			t.Error("the hold cap was never reached")
			return
		}
		before := dropped()
		em, err := e.net.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(tgt.DID, world.StatusTakendown) })
		if err != nil {
			t.Error(err)
			return
		}
		if !poll(10*time.Second, func() bool { return live.LastAccepted() >= em.Seq }) {
			t.Error("the takedown was never accepted")
		}
		// The takedown's unit is past the cap too (a delete row is smaller
		// than an account row and its effect).
		n := held()
		if !poll(10*time.Second, func() bool {
			st, err := e.store.RepoState(tgt.DID)
			return dropped() > before || held() > n || (err == nil && !st.Active)
		}) {
			t.Error("the writer never took the takedown")
		}
		t.Logf("hold_dropped_rows_total %v before the takedown, %v after", before, dropped())
	}
	e.jobs = e.newJobs(func(o *backfill.Options) { o.Writer = cw; o.ChunkRows = 10; o.ChunksInFlight = 1 })
	e.emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(tgt.DID, 45) })
	eventually(t, 10*time.Second, "the #sync mark", func() bool { return e.state(tgt.DID).Refetch == archive.RefetchSync })
	for i := 0; i < 3; i++ {
		if _, err := e.runner(nil).RunOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 10*time.Second, "the account inactive", func() bool { return !e.state(tgt.DID).Active })
	f := fold(t, e.store)
	if _, bad := check.Compare(f, e.net.World(), func(a world.Account) bool { return a.DID == tgt.DID }); len(bad) > 0 {
		t.Fatalf("after a takedown past the hold cap (%v rows dropped): %s", dropped(), check.Describe(bad, 3))
	}
}
