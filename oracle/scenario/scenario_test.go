package scenario

import (
	"errors"
	"fmt"
	"github.com/backstream/backstream/bootstrap"
	"math/rand/v2"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// size picks the short or the long value.
func size(short, long int) int {
	if testing.Short() {
		return short
	}
	return long
}

// planRand is the seeded source of a scenario's fault plan (which accounts
// are hit, thresholds), independent of the world's own derivation.
func planRand(seed int64, salt uint64) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(seed), salt))
}

// listedAccounts splits the accounts listRepos shows into active and
// inactive (deactivated, takendown, suspended), in DID order.
func listedAccounts(n *oracle.Network) (active, inactive []world.Account) {
	accts := n.World().Accounts()
	sort.Slice(accts, func(i, j int) bool { return accts[i].DID < accts[j].DID })
	for _, a := range accts {
		switch {
		case a.Status == world.StatusDeleted:
		case a.Active:
			active = append(active, a)
		default:
			inactive = append(inactive, a)
		}
	}
	return active, inactive
}

func dids(accts []world.Account) []string {
	out := make([]string, len(accts))
	for i, a := range accts {
		out[i] = a.DID
	}
	return out
}

// TestInactiveAndLongCursor (inactive unknown repos at
// enumeration, a listRepos cursor longer than 4 KiB; E12, E1, M6). The relay
// pads every listRepos cursor beyond 4 KiB and lists deactivated,
// takendown and suspended accounts with active=false. One active repo on a
// later page hangs, so the first run stops with a long page cursor as its
// durable checkpoint; the restart resumes listRepos from exactly that
// cursor. In the end: no inactive account was ever asked for at the relay
// or a PDS, every active one is complete, and the archive folds to the
// network's records.
func TestInactiveAndLongCursor(t *testing.T) {
	forSeeds(t, func(t *testing.T, seed int64) {
		n := startNetwork(t, seed, size(150, 600), 6, 3)
		rng := planRand(seed, 1)
		cursorSize := 4097 + rng.IntN(2048)
		n.Faults().LongCursor(cursorSize)
		active, inactive := listedAccounts(n)
		if len(inactive) < 3 {
			t.Fatalf("the world lists %d inactive accounts; the scenario needs the three statuses", len(inactive))
		}
		const pageLimit = 20
		// The held repo sits on page 3 or later, so the checkpoint passes at
		// least two pages and stops before it.
		heldIdx := 2*pageLimit + rng.IntN(len(active)-2*pageLimit)
		held := active[heldIdx].DID
		n.Faults().HangBody(held, 1)
		t.Logf("plan: %d active, %d inactive listed; cursors padded to %d bytes; %s hangs (active #%d)", len(active), len(inactive), cursorSize, held, heldIdx)

		rec := newListRecorder(t, n.RelayURL())
		drv := newDriver(n, seed, size(60, 300), 10*time.Millisecond, nil).start(t)
		fs := vfs.NewMem()
		opts := nodeOpts{ListURL: rec.URL, PageLimit: pageLimit, Workers: 4, AttemptTimeout: 10 * time.Minute, Enumerate: bootstrap.EnumerateRelay}

		nd := startNode(t, n, fs, opts)
		var checkpoint string
		nd.waitFor(30*time.Second, "a long page checkpoint and the held repo requested", func() bool {
			c, err := nd.store.ListCursor(false)
			if err != nil || c.Finished {
				return false
			}
			checkpoint = c.Cursor
			return n.RepoCounts(held).Requests > 0
		})
		if len(checkpoint) <= 4096 {
			t.Fatalf("durable checkpoint is %d bytes, want > 4 KiB", len(checkpoint))
		}
		if err := nd.stop(); err != nil {
			t.Fatalf("run 1: %v", err)
		}
		// Repos of the pages before the held one may still have completed
		// between the wait and the stop, moving the checkpoint on: the
		// restart must resume from the one durable at the stop.
		if c := reopenListCursor(t, fs); c.Finished || c.Cursor != checkpoint {
			t.Logf("the checkpoint moved after the wait: %d bytes, finished %v", len(c.Cursor), c.Finished)
			checkpoint = c.Cursor
		}
		if len(checkpoint) <= 4096 {
			t.Fatalf("durable checkpoint at the stop is %d bytes, want > 4 KiB", len(checkpoint))
		}

		// The restart lists through a recorder of its own: a request the
		// first run sent as it stopped may reach the first one's handler
		// after the stop has returned.
		rec = newListRecorder(t, n.RelayURL())
		opts.ListURL = rec.URL
		nd = startNode(t, n, fs, opts)
		nd.converged(60*time.Second, drv)
		got := rec.cursors()
		if len(got) == 0 || got[0] != checkpoint {
			first, size := "<none>", 0
			if len(got) > 0 {
				first, size = got[0][:min(len(got[0]), 40)]+"…", len(got[0])
			}
			t.Fatalf("restart listed first from %s (%d bytes), want the durable %d-byte checkpoint %s…", first, size, len(checkpoint), checkpoint[:min(len(checkpoint), 40)])
		}
		for _, c := range got[1:] {
			if c != "" && len(c) <= 4096 {
				t.Fatalf("relay handed out a %d-byte cursor; the fault should pad every cursor", len(c))
			}
		}
		if f := n.Faults().Fired(oracle.FaultLongCursor); f == 0 {
			t.Fatal("the long-cursor fault never fired")
		}
		if f := n.Faults().Fired(oracle.FaultHangBody); f != 1 {
			t.Fatalf("hang fault fired %d times, want 1", f)
		}
		st := nd.states()
		if err := nd.stop(); err != nil {
			t.Fatalf("run 2: %v", err)
		}
		for _, a := range inactive {
			rc := n.RepoCounts(a.DID)
			if rc.RelayRequests != 0 || rc.Requests != 0 {
				t.Errorf("inactive %s (%s) was requested: relay %d, PDS %d", a.DID, a.Status, rc.RelayRequests, rc.Requests)
			}
			s, ok := st[a.DID]
			if !ok || s.Active {
				t.Errorf("inactive %s: stored %+v (known %v), want active=false", a.DID, s, ok)
			}
		}
		for _, a := range active {
			if s := st[a.DID]; s.Status != archive.StatusComplete {
				t.Errorf("active %s ended %s", a.DID, s.Status)
			}
		}
		if rc := n.RepoCounts(held); rc.Complete != 1 {
			t.Errorf("held repo served complete %d times, want 1 (after the restart)", rc.Complete)
		}
		verify(t, n, fs)
		t.Logf("%d listRepos requests after the restart; %d live events driven", len(got), drv.emitted.Load())
	})
}

// TestHeldRepoAcrossKill (N−1 durable completions plus one
// repo held indefinitely; R5, R7). Every listed active repo but one
// completes durably while the PDS holds the last one's getRepo open (half
// the body, then nothing; the attempt deadline is far away). The process
// is then killed (nothing written after the instant survives: a strict
// in-memory filesystem reset to its synced state) and restarted: none of the N−1 is requested at a PDS
// again, the held one is fetched exactly once more and completes, and the
// archive folds to the network's records.
func TestHeldRepoAcrossKill(t *testing.T) {
	forSeeds(t, func(t *testing.T, seed int64) {
		n := startNetwork(t, seed, size(60, 300), 8, 3)
		rng := planRand(seed, 3)
		active, _ := listedAccounts(n)
		held := active[rng.IntN(len(active))].DID
		n.Faults().HangBody(held, 1)
		drv := newDriver(n, seed, size(40, 200), 10*time.Millisecond, nil).start(t)
		fs := vfs.NewStrictMem()
		opts := nodeOpts{Workers: 6, AttemptTimeout: time.Hour}

		nd := startNode(t, n, fs, opts)
		nd.waitFor(30*time.Second, "N−1 durable completions with the held repo in flight", func() bool {
			if n.RepoCounts(held).Requests == 0 {
				return false
			}
			for _, a := range active {
				if a.DID == held {
					continue
				}
				if st, err := nd.store.RepoState(a.DID); err != nil || st.Status != archive.StatusComplete {
					return false
				}
			}
			return true
		})
		// Still held: the run is in bootstrap, the repo not terminal.
		time.Sleep(200 * time.Millisecond)
		if p := nd.Phase(); p != archive.PhaseBootstrap {
			t.Fatalf("phase %s while a repo is held", p)
		}
		nd.kill(fs)
		if st := reopenStates(t, fs)[held]; st.Status != archive.StatusNotStarted || !st.Active {
			t.Fatalf("held repo after the kill: %+v, want active not_started", st)
		}
		if f := n.Faults().Fired(oracle.FaultHangBody); f != 1 {
			t.Fatalf("hang fault fired %d times, want 1", f)
		}
		before := pdsRequests(n)
		if before[held] != 1 {
			t.Fatalf("held repo requested %d times before the kill, want 1", before[held])
		}

		nd = startNode(t, n, fs, opts)
		nd.converged(60*time.Second, drv)
		st := nd.states()
		if err := nd.stop(); err != nil {
			t.Fatalf("run 2: %v", err)
		}
		after := pdsRequests(n)
		again := 0
		for _, a := range active {
			d := after[a.DID] - before[a.DID]
			switch {
			case a.DID == held:
				if d != 1 || st[a.DID].Status != archive.StatusComplete {
					t.Errorf("held repo: %d more requests, %s; want exactly one and complete", d, st[a.DID].Status)
				}
			case d != 0:
				again++
				t.Errorf("%s was complete before the kill and was requested %d more times", a.DID, d)
			}
		}
		verify(t, n, fs)
		t.Logf("%d repos complete before the kill, %d requested again; held repo completed after the restart", len(active)-1, again)
	})
}

// TestRestartSkipsCompleted (a restart proving completed
// repos are skipped, counted at the PDS; R7). Some repos are served slowly
// so that bootstrap is still running when the process is killed at a
// seeded fraction of completions (a strict in-memory filesystem reset to
// its synced state). After the restart, no repo complete
// before the stop is requested at a PDS again; those interrupted are
// fetched once more (the pending pass); a further restart in steady state
// requests nothing at all. The archive folds to the network's records.
func TestRestartSkipsCompleted(t *testing.T) {
	forSeeds(t, func(t *testing.T, seed int64) {
		n := startNetwork(t, seed, size(80, 400), 8, 3)
		rng := planRand(seed, 4)
		active, _ := listedAccounts(n)
		slow := pick(rng, active, size(8, 16))
		for _, a := range slow {
			n.Faults().SlowBody(a.DID, 2048, 1)
		}
		frac := 0.3 + 0.4*rng.Float64()
		threshold := int(frac * float64(len(active)))
		drv := newDriver(n, seed, size(40, 200), 10*time.Millisecond, nil).start(t)
		fs := vfs.NewStrictMem()
		opts := nodeOpts{Workers: 4}

		nd := startNode(t, n, fs, opts)
		var complete map[string]bool
		nd.waitFor(30*time.Second, "the seeded fraction of completions", func() bool {
			complete = map[string]bool{}
			for _, a := range active {
				if st, err := nd.store.RepoState(a.DID); err == nil && st.Status == archive.StatusComplete {
					complete[a.DID] = true
				}
			}
			return len(complete) >= threshold
		})
		nd.kill(fs)
		// Completions that became durable between the last poll and the kill
		// count as complete too: read the store as the restart will.
		s1 := reopenStates(t, fs)
		complete = map[string]bool{}
		for did, st := range s1 {
			if st.Status == archive.StatusComplete {
				complete[did] = true
			}
		}
		if len(complete) == len(active) {
			t.Fatalf("the stop landed after every repo was complete (threshold %d of %d)", threshold, len(active))
		}
		if n.Faults().Fired(oracle.FaultSlowBody) == 0 {
			t.Fatal("no slow body was served")
		}
		n.Faults().Clear() // slow bodies not yet served would only slow the restart
		before := pdsRequests(n)

		nd = startNode(t, n, fs, opts)
		nd.converged(60*time.Second, drv)
		st := nd.states()
		if err := nd.stop(); err != nil {
			t.Fatalf("run 2: %v", err)
		}
		after := pdsRequests(n)
		refetched := 0
		for _, a := range active {
			d := after[a.DID] - before[a.DID]
			if complete[a.DID] && d != 0 {
				t.Errorf("%s was complete before the stop and was requested %d more times", a.DID, d)
			}
			if !complete[a.DID] {
				refetched++
				if d < 1 {
					t.Errorf("%s was not complete before the stop (%s) and was not requested again", a.DID, s1[a.DID].Status)
				}
			}
			if st[a.DID].Status != archive.StatusComplete {
				t.Errorf("%s ended %s", a.DID, st[a.DID].Status)
			}
		}
		// A restart in steady state downloads nothing.
		nd = startNode(t, n, fs, opts)
		nd.converged(30*time.Second, nil)
		if err := nd.stop(); err != nil {
			t.Fatalf("run 3: %v", err)
		}
		for did, c := range pdsRequests(n) {
			if c != after[did] {
				t.Errorf("steady-state restart requested %s %d times", did, c-after[did])
			}
		}
		verify(t, n, fs)
		t.Logf("stopped at %d of %d complete (threshold %d); %d fetched after the restart, none of the complete ones",
			len(complete), len(active), threshold, refetched)
	})
}

// reopenListCursor reads the durable listRepos checkpoint from the store
// in fs (no run may hold it).
func reopenListCursor(t *testing.T, fs vfs.FS) archive.ListCursor {
	t.Helper()
	s := reopenStore(t, fs)
	defer s.Close()
	c, err := s.ListCursor(false)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// reopenStates reads every repo state from the store in fs.
func reopenStates(t *testing.T, fs vfs.FS) map[string]archive.RepoState {
	t.Helper()
	s := reopenStore(t, fs)
	defer s.Close()
	out := map[string]archive.RepoState{}
	if err := s.ScanRepos(func(did string, st archive.RepoState) error { out[did] = st; return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// armedHook is a commit hook that does nothing until a fault is armed.
type armedHook struct {
	f atomic.Pointer[storefault.CommitFault]
}

func (h *armedHook) check(op string, keys [][]byte) error {
	if f := h.f.Load(); f != nil {
		return f.Check(op, keys)
	}
	return nil
}

// TestBootstrapFailureRetriedOnSchedule: a repo that fails through
// bootstrap is written with the node's retry schedule (--retry-interval,
// here 100 ms), not backfill's default of minutes, so the retry runner
// takes it up as soon as steady state begins. No live traffic: nothing
// else (a #sync or a commit for the account) can mark it due sooner. The
// longest delay is 10 minutes, so that backfill's default (3.75 to 6.25
// minutes) stays within the runner's horizon (the longest delay and park
// it writes): a next attempt past it is taken at once, as written by a
// clock that was ahead, and would hide the wrong schedule about one run in
// three (TestRetryStoreFailure, with the harness's 400 ms, did).
func TestBootstrapFailureRetriedOnSchedule(t *testing.T) {
	forSeeds(t, func(t *testing.T, seed int64) {
		n := startNetwork(t, seed, size(40, 200), 6, 2)
		active, _ := listedAccounts(n)
		victim := active[planRand(seed, 3).IntN(len(active))].DID
		n.Faults().FailGetRepo(victim, http.StatusServiceUnavailable, oracle.Always)
		nd := startNode(t, n, vfs.NewMem(), nodeOpts{Workers: 4, RetryMaxDelay: 10 * time.Minute})
		nd.waitFor(30*time.Second, "steady state and the victim retried by the retry runner", func() bool {
			return nd.Phase() == archive.PhaseSteadyState && nd.retrier.Status().Results["failed"] > 0
		})
		st, err := nd.store.RepoState(victim)
		if err != nil || st.Status != archive.StatusFailed || st.Attempts < 2 {
			t.Fatalf("victim after its retry: %+v %v; want failed, attempted by bootstrap and the retry runner", st, err)
		}
		if err := nd.stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestRetryStoreFailure (a retry-store failure with /readyz
// and /healthz asserted; S6: "a failure of the runner itself is
// fatal"). One repo fails through bootstrap; in steady state the retry
// runner retries it, and the synced batch carrying its replacement's rows
// fails (the batch carrying its completion, repo/<did>). The run stops with the injected error; /healthz and /readyz are
// asked over real HTTP what they say at that moment; a restart without the
// fault converges: the repo completes and the archive folds to the
// network's records.
func TestRetryStoreFailure(t *testing.T) {
	forSeeds(t, func(t *testing.T, seed int64) {
		n := startNetwork(t, seed, size(40, 200), 6, 2)
		rng := planRand(seed, 2)
		active, _ := listedAccounts(n)
		var withRecords []world.Account
		for _, a := range active {
			if a.Records > 0 {
				withRecords = append(withRecords, a)
			}
		}
		victim := withRecords[rng.IntN(len(withRecords))].DID
		n.Faults().FailGetRepo(victim, http.StatusServiceUnavailable, oracle.Always)
		drv := newDriver(n, seed, size(30, 150), 10*time.Millisecond, nil).start(t)
		fs := vfs.NewMem()
		hook := &armedHook{}
		opts := nodeOpts{Hook: hook.check, Workers: 4}

		nd := startNode(t, n, fs, opts)
		nd.waitFor(60*time.Second, "steady state, caught up, the victim retried by the retry runner", func() bool {
			if nd.Phase() != archive.PhaseSteadyState || !drv.finished() {
				return false
			}
			c, err := nd.store.RelayCursor()
			if err != nil || c != uint64(n.Status().Seq) {
				return false
			}
			st, err := nd.store.RepoState(victim)
			return err == nil && st.Status == archive.StatusFailed && nd.retrier.Status().Results["failed"] > 0
		})
		if code, _, err := nd.get("/readyz"); err != nil || code != http.StatusOK {
			t.Fatalf("/readyz in steady state: %d %v", code, err)
		}
		// The traffic is over, so the first batch touching repo/<victim>
		// now is the retry runner's replacement (its completion). Not
		// rev/<victim>: when live commits already moved the ratchet to the
		// snapshot's rev, the replacement leaves rev/ alone (seed 5).
		fault := storefault.FailNthCommit(string(archive.RepoKey(victim)), 1)
		hook.f.Store(fault)
		n.Faults().Clear()
		nd.retrier.Wake()
		runErr, ok := nd.waitExit(30 * time.Second)
		if !ok {
			t.Fatalf("the run did not stop after the retry's store failure (fault fired %d)", fault.Fired())
		}
		if fault.Fired() != 1 {
			t.Fatalf("fault fired %d times", fault.Fired())
		}
		if !errors.Is(runErr, storefault.ErrInjected) {
			t.Fatalf("run ended with %v; want the injected store failure", runErr)
		}
		// The live consumer or the retry runner (whichever notices the
		// stopped writer first) ends the lifecycle with the failure.
		if lc := nd.lifecycleErr(); !errors.Is(lc, storefault.ErrInjected) {
			t.Fatalf("the lifecycle ended with %v; want the injected store failure", lc)
		}
		if st, err := nd.store.RepoState(victim); err != nil || st.Status == archive.StatusComplete {
			t.Fatalf("victim after the failed batch: %+v %v; want not complete", st, err)
		}
		t.Logf("run stopped: %v; lifecycle: %v", runErr, nd.lifecycleErr())

		hz, hzBody, err := nd.get("/healthz")
		if err != nil {
			t.Fatalf("/healthz after the fatal error: %v", err)
		}
		rz, rzBody, err := nd.get("/readyz")
		if err != nil {
			t.Fatalf("/readyz after the fatal error: %v", err)
		}
		t.Logf("after the fatal error, before exit: /healthz %d %q, /readyz %d %q", hz, strings.TrimSpace(hzBody), rz, strings.TrimSpace(rzBody))
		// Both probes say so from the moment the failure is seen until the
		// process is gone (lifecycle.Health, wired as serve wires it).
		if hz != http.StatusServiceUnavailable || !strings.Contains(hzBody, "injected") {
			t.Errorf("/healthz answers %d %q after a fatal store error, want 503 naming it", hz, hzBody)
		}
		if rz != http.StatusServiceUnavailable {
			t.Errorf("/readyz answers %d after a fatal store error, want 503", rz)
		}
		if err := nd.stop(); !errors.Is(err, storefault.ErrInjected) {
			t.Fatalf("stop: %v", err)
		}

		nd = startNode(t, n, fs, nodeOpts{Workers: 4})
		nd.converged(60*time.Second, drv)
		st := nd.states()
		if err := nd.stop(); err != nil {
			t.Fatalf("restart: %v", err)
		}
		if s := st[victim]; s.Status != archive.StatusComplete {
			t.Fatalf("victim ended %s after the restart", s.Status)
		}
		verify(t, n, fs)
	})
}

// TestSyncWakesRetry: a #sync in steady state is replaced at once, not at
// the retry runner's next scheduled pass. The runner's scan period is an
// hour, so only the live consumer's wake-up (node wires firehose side
// effects to retry.Runner.Wake) can bring the replacement within the
// deadline.
func TestSyncWakesRetry(t *testing.T) {
	forSeeds(t, func(t *testing.T, seed int64) {
		n := startNetwork(t, seed, 30, 4, 2)
		active, _ := listedAccounts(n)
		victim := pick(planRand(seed, 9), active, 1)[0].DID
		fs := vfs.NewStrictMem()
		nd := startNode(t, n, fs, nodeOpts{Workers: 4, ScanPeriod: time.Hour})
		nd.waitFor(30*time.Second, "steady state", func() bool { return nd.Phase() == archive.PhaseSteadyState })
		// The first pass of the runner starts with steady state; wait until
		// it has found nothing to do, so the next one is an hour away.
		nd.waitFor(10*time.Second, "the first retry pass", func() bool { return nd.retrier.Status().Passes > 0 })
		// The relay has been silent, so the live consumer starts at the
		// relay's live tip: a #sync sent before it is connected would be
		// behind it. Capture connected once; the live consumer is the second.
		nd.waitFor(10*time.Second, "the live consumer connected", func() bool { return n.FirehoseConnections() >= 2 })
		em, err := n.Emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(victim, 3) })
		if err != nil {
			t.Fatal(err)
		}
		var last string
		defer func() {
			if t.Failed() {
				t.Logf("last seen: %s", last)
			}
		}()
		nd.waitFor(30*time.Second, "the #sync's replacement", func() bool {
			st, err := nd.store.RepoState(victim)
			c, cerr := nd.store.RelayCursor()
			last = fmt.Sprintf("cursor %d (%v, #sync at %d), %s: %+v (%v), retry %+v", c, cerr, em.Seq, victim, st, err, nd.retrier.Status())
			return err == nil && cerr == nil && c >= uint64(em.Seq) &&
				st.Status == archive.StatusComplete && st.Refetch == archive.RefetchNone && st.BackfillRev == em.Sync.Rev
		})
		if err := nd.stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		verify(t, n, fs)
	})
}
