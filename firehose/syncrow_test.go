package firehose

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// TestLiveSyncChains: a live #sync archives no row but still moves its
// account's ratchet to its rev, so the next commit (whose since is the
// #sync's rev) chains from it: no chain break is counted and the commit is
// archived. A #sync that moved nothing would make every commit after a
// reset, until the replacement lands, look like a lost commit.
func TestLiveSyncChains(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 21, Accounts: 6})
	a := activeDIDs(n.World())[0]
	s := openStore(t)
	reg := prometheus.NewRegistry()
	wr := newWriterOpts(t, s, archive.WriterOptions{Metrics: archive.NewMetrics(reg)})
	zero := int64(0)
	c, _ := newConsumer(t, Config{Relay: n.RelayURL(), Writer: wr, Mode: ModeLive, Cursor: &zero})
	startRun(t, c)
	post := func(w *world.World) (world.Event, error) {
		return w.CreateRecord(a, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": "x", "createdAt": "2024-01-01T00:00:00Z"})
	}
	var last oracle.Emitted
	for _, f := range []func(*world.World) (world.Event, error){
		post, // the account's ratchet gets a rev
		func(w *world.World) (world.Event, error) { return w.ResetRepo(a, 2) },
		post, // since = the #sync's rev
	} {
		ev, err := n.Emit(f)
		if err != nil {
			t.Fatal(err)
		}
		last = ev
	}
	waitCaughtUp(t, n, c, nil)
	commits := 0
	for _, r := range readLog(t, s, false) {
		switch {
		case r.Kind == archive.KindSync:
			t.Fatalf("the #sync archived a row: %+v", r)
		case r.DID == a && r.Kind == archive.KindCreate:
			commits++
		}
	}
	if commits != 2 {
		t.Errorf("%d creates of %s archived, want 2", commits, a)
	}
	if rev, err := s.Rev(a); err != nil || rev != last.Commit.Rev {
		t.Errorf("ratchet %q (%v), want the last commit's %s", rev, err, last.Commit.Rev)
	}
	if got := promtest.Value(t, reg, "backstream_archive_chain_breaks_total", nil); got != 0 {
		t.Errorf("%v chain breaks after a #sync, want 0", got)
	}
}
