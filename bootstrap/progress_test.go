package bootstrap_test

import (
	"context"
	"math"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/oracle/world"
)

// TestProgressBarWindowAhead is the case of a bootstrap of 30,000 accounts
// whose listing ran ahead of recording: the store knows 12,358 repos, 11,197
// of them terminal; the queue holds 18,771 repos, 17,642 of them not yet
// recorded, and 32 are in flight. The bar is done of known and known of
// listed; subtracting the whole queue from Known read "0 of 12358".
func TestProgressBarWindowAhead(t *testing.T) {
	var c archive.Counts
	c.ByStatus[archive.StatusComplete] = 11_136
	c.ByStatus[archive.StatusFailed] = 40
	c.ByStatus[archive.StatusUnavailable] = 21
	c.ByStatus[archive.StatusPending] = 32
	c.ByStatus[archive.StatusNotStarted] = 1_129
	if c.Total() != 12_358 {
		t.Fatalf("fixture: %d known", c.Total())
	}
	p := bootstrap.Progress{Queued: 18_771, InFlight: 32, Unrecorded: 17_642}
	p.SetCounts(c)
	if p.Known != 12_358 || p.Done != 11_197 || p.Listed != 30_000 {
		t.Fatalf("known %d done %d listed %d, want 12358, 11197, 30000", p.Known, p.Done, p.Listed)
	}
	if want := 11_197.0 / 12_358; math.Abs(p.DoneFraction-want) > 1e-12 {
		t.Fatalf("done fraction %v, want %v", p.DoneFraction, want)
	}
	if want := 12_358.0 / 30_000; math.Abs(p.KnownFraction-want) > 1e-12 {
		t.Fatalf("known fraction %v, want %v", p.KnownFraction, want)
	}

	// After a restart: 300 repos recorded beyond the checkpoint were made
	// pending and are not listed (queued) again yet; 50 inactive repos were
	// never fetched. Done is what needs no more work: 650 + 50.
	var r archive.Counts
	r.ByStatus[archive.StatusComplete] = 650
	r.ByStatus[archive.StatusPending] = 300
	r.ByStatus[archive.StatusNotStarted] = 50
	r.Inactive = 50
	restarted := bootstrap.Progress{PendingOnRestart: 300}
	restarted.SetCounts(r)
	if restarted.Done != 700 || restarted.Known != 1000 {
		t.Fatalf("after a restart: done %d of %d, want 700 of 1000", restarted.Done, restarted.Known)
	}

	// Within a run, the queue decides: of 120 known repos, 20 active
	// not_started ones are queued, 10 complete ones are inactive (listed
	// so after they were fetched), so the counts alone would allow 110.
	var q archive.Counts
	q.ByStatus[archive.StatusComplete] = 100
	q.ByStatus[archive.StatusNotStarted] = 20
	q.Inactive = 10
	running := bootstrap.Progress{Queued: 15, InFlight: 5}
	running.SetCounts(q)
	if running.Done != 100 {
		t.Fatalf("with inactive complete repos: done %d, want 100", running.Done)
	}

	// Nothing known yet: zero, not NaN.
	var empty bootstrap.Progress
	empty.SetCounts(archive.Counts{})
	if empty.DoneFraction != 0 || empty.KnownFraction != 0 {
		t.Fatalf("empty store: %+v", empty)
	}
}

// TestDiscoveredCountsNewReposOnce: Progress.Discovered and
// backstream_bootstrap_repos_discovered_total count the repos a run records
// for the first time, each once. A first run over a world records every
// listed account; a second run listing the same world again, in which an
// inactive account the first run recorded (never fetched) is now active,
// discovers nothing: that account is known, not new.
func TestDiscoveredCountsNewReposOnce(t *testing.T) {
	e := newEnv(t, worldCfg(60, 4))
	discovered := func() float64 {
		return metric(t, e.reg, "backstream_bootstrap_repos_discovered_total", map[string]string{"activity": "active"}) +
			metric(t, e.reg, "backstream_bootstrap_repos_discovered_total", map[string]string{"activity": "inactive"})
	}
	b := e.boot(nil)
	e.runToEnd(b)
	listed := e.listed()
	if p := b.Progress(); p.Discovered != int64(len(listed)) || discovered() != float64(len(listed)) {
		t.Fatalf("first run: discovered %d (metric %v), want the %d listed accounts", p.Discovered, discovered(), len(listed))
	}
	var inactive world.Account
	for _, a := range listed {
		if !a.Active && a.Status == world.StatusDeactivated {
			inactive = a
			break
		}
	}
	if inactive.DID == "" {
		t.Fatal("fixture: the world has no deactivated account")
	}
	if _, err := e.net.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(inactive.DID, world.StatusActive) }); err != nil {
		t.Fatal(err)
	}
	// Forget the finished checkpoint so the next run lists everything again.
	if _, err := e.w.Apply(context.Background(), &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorListRepos}}}); err != nil {
		t.Fatal(err)
	}
	before := discovered()
	b = e.boot(nil)
	e.runToEnd(b)
	if p := b.Progress(); p.Discovered != 0 || discovered() != before {
		t.Fatalf("second run over the same %d accounts (one reactivated): discovered %d (metric +%v), want 0", len(listed), p.Discovered, discovered()-before)
	}
	if st := e.states()[inactive.DID]; st.Status != archive.StatusComplete {
		t.Fatalf("reactivated account: %+v, want fetched", st)
	}
}
