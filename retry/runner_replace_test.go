package retry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
)

func replaceWorld() oracle.Config {
	return oracle.Config{Accounts: 40, RecordsMean: 8, Hosts: 2, Seed: 31, Traffic: oracle.TrafficNone}
}

// pick returns the first account matching ok.
func (e *env) pick(ok func(a world.Account) bool, not ...string) world.Account {
	e.t.Helper()
next:
	for _, a := range e.net.World().Accounts() {
		for _, d := range not {
			if a.DID == d {
				continue next
			}
		}
		if ok(a) {
			return a
		}
	}
	e.t.Fatal("no account fits")
	return world.Account{}
}

// replaceInChunks resets did's repo upstream (a #sync) and has one retry
// pass replace it through cw, ten records a chunk, one chunk in flight:
// the replacement must complete, uninterrupted, in at least five chunks.
func replaceInChunks(t *testing.T, e *env, cw *chunkWriter, did string) {
	t.Helper()
	e.jobs = e.newJobs(func(o *backfill.Options) { o.Writer = cw; o.ChunkRows = 10; o.ChunksInFlight = 1 })
	e.emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(did, 45) })
	eventually(t, 10*time.Second, "the #sync mark", func() bool { return e.state(did).Refetch == archive.RefetchSync })
	ps, err := e.runner(nil).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ps.Results[retry.ResultStale] != 0 || ps.Results[retry.ResultComplete] != 1 || cw.chunks < 5 {
		t.Fatalf("results %v, %d replacement chunks; want one uninterrupted replacement", ps.Results, cw.chunks)
	}
}

// commitAndWait emits a new record for did and waits until the live
// consumer has archived it (the ratchet is at its rev).
func (e *env) commitAndWait(did string) (string, error) {
	em, err := e.post(did, "live")
	if err != nil {
		return "", err
	}
	rev := em.Commit.Rev
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := e.store.Rev(did)
		if err == nil && got == rev {
			return rev, nil
		}
		if time.Now().After(deadline) {
			return "", errors.New("live commit not archived in time")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// replaced checks the repo is complete at the world's rev with its retry
// state cleared, and that the archive folds to the world's records.
func (e *env) replaced(did string) {
	e.t.Helper()
	st := e.state(did)
	a, _ := e.net.World().Account(did)
	if st.Status != archive.StatusComplete || st.BackfillRev != a.Rev || st.Refetch != archive.RefetchNone ||
		st.Attempts != 0 || st.ErrClass != "" || st.LastError != "" || st.NextAttemptUS != 0 {
		e.t.Fatalf("%s after the replacement: %+v; want complete at %s with retry state cleared", did, st, a.Rev)
	}
	if got := fold(e.t, e.store)[did]; !e.sameRecords(did, got) {
		e.t.Fatalf("%s folds to %d records, the network has %d", did, len(got), len(e.net.World().Records(did)))
	}
}

// TestLiveCommitBetweenFetchAndSubmit (S9, S5): a #sync makes a repo due;
// while its replacement is between download and submission, a live commit
// lands and moves the ratchet past the snapshot. The replacement is refused
// whole, fetched again and applied; the fold is exact and revs never go
// backwards.
func TestLiveCommitBetweenFetchAndSubmit(t *testing.T) {
	e := newEnv(t, replaceWorld())
	e.archiveAll()
	e.live()
	tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 2 })
	e.emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(tgt.DID, 5) })
	eventually(t, 10*time.Second, "the #sync mark", func() bool { return e.state(tgt.DID).Refetch == archive.RefetchSync })
	e.src.afterGet = func(did string, n int) {
		if did == tgt.DID && n == 1 {
			if _, err := e.commitAndWait(did); err != nil {
				t.Error(err)
			}
		}
	}
	ps, err := e.runner(nil).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ps.Results[retry.ResultStale] != 1 || ps.Results[retry.ResultComplete] != 1 || e.src.callsOf(tgt.DID) != 2 {
		t.Fatalf("results %v, %d fetches; want one refusal, then a second fetch applied", ps.Results, e.src.callsOf(tgt.DID))
	}
	if got := metric(t, e.reg, "backstream_retry_replacements_refused_total", nil); got != 1 {
		t.Fatalf("replacements_refused_total = %v", got)
	}
	e.replaced(tgt.DID)
	for _, a := range e.net.World().Accounts() {
		if a.Active && !e.sameRecords(a.DID, fold(t, e.store)[a.DID]) {
			t.Fatalf("%s does not fold to the network's records", a.DID)
		}
	}
}

// poll reports whether cond became true within d (for goroutines that
// may not call t.Fatal).
func poll(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// chunkWriter submits to the real writer; before the second replacement
// chunk of did it runs mid once (a live commit in the middle of a
// multi-chunk replacement).
type chunkWriter struct {
	backfill.Writer
	did    string
	chunks int
	mid    func()
}

func (c *chunkWriter) Submit(ctx context.Context, u *archive.Unit) error {
	if u.Replace != nil && u.Replace.DID == c.did {
		c.chunks++
		if c.chunks == 2 && c.mid != nil {
			c.mid()
		}
	}
	return c.Writer.Submit(ctx, u)
}

// TestLiveCommitMidReplacement (S5): a live commit lands while a
// multi-chunk replacement is in flight. The writer holds it back until the
// replacement's final unit — it really waits (the archive's held-units
// gauge) while another account's live commit is archived meanwhile: the
// replacement is applied uninterrupted, with no refusal, and the live
// commit right after it (newer than the snapshot, the ratchet keeps it);
// the fold is exact and revs never go backwards.
func TestLiveCommitMidReplacement(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 10, RecordsMean: 60, Hosts: 2, Seed: 33, Traffic: oracle.TrafficNone})
	e.archiveAll()
	live := e.live()
	tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 40 })
	other := e.pick(func(a world.Account) bool { return a.Active }, tgt.DID)
	cw := &chunkWriter{Writer: e.w, did: tgt.DID}
	var liveRev string
	cw.mid = func() {
		// The first chunk is durable (one chunk in flight): the replacement
		// holds the account. Commit live and wait until the live consumer
		// has submitted it and the writer holds it.
		em, err := e.post(tgt.DID, "live")
		if err != nil {
			t.Error(err)
			return
		}
		liveRev = em.Commit.Rev
		if !poll(10*time.Second, func() bool {
			return live.LastAccepted() >= em.Seq && metric(t, e.reg, "backstream_archive_held_units", nil) >= 1
		}) {
			t.Error("the live commit of the replaced account never waited behind the replacement")
			return
		}
		// Only the replaced account waits: another account's commit is
		// archived while the replacement is still open.
		if _, err := e.commitAndWait(other.DID); err != nil {
			t.Errorf("another account during the replacement: %v", err)
		}
		if r, _ := e.store.Rev(tgt.DID); r == liveRev {
			t.Error("the held live commit was archived before the replacement ended")
		}
	}
	replaceInChunks(t, e, cw, tgt.DID)
	eventually(t, 10*time.Second, "the held live commit", func() bool { r, _ := e.store.Rev(tgt.DID); return liveRev != "" && r == liveRev })
	if n := metric(t, e.reg, "backstream_archive_held_units_total", nil); n < 1 {
		t.Fatalf("held_units_total = %v: the live commit never waited", n)
	}
	// The replacement's rows (from its sync row on) are uninterrupted: no
	// live row of the account between them, the live commit after.
	it, err := e.store.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	var srcs []archive.Source
	for it.Next() {
		ev := it.Event()
		if ev.DID != tgt.DID {
			continue
		}
		if ev.Kind == archive.KindSync && ev.Source == archive.SourceRetry {
			srcs = srcs[:0]
		}
		srcs = append(srcs, ev.Source)
	}
	it.Close()
	last := len(srcs) - 1
	for i, src := range srcs {
		if (i < last && src != archive.SourceRetry) || (i == last && src != archive.SourceLive) {
			t.Fatalf("account rows after the replacement's sync row: %v; want retry rows then the live commit", srcs)
		}
	}
	if got := fold(t, e.store)[tgt.DID]; !e.sameRecords(tgt.DID, got) {
		t.Fatalf("%s folds to %d records, the network has %d", tgt.DID, len(got), len(e.net.World().Records(tgt.DID)))
	}
}

// TestRefusedTooOftenFails (S9): an account that commits between every
// download and its submission is refused 1+3 times in a row; then it is an
// ordinary failure with backoff, its replacement mark kept.
func TestRefusedTooOftenFails(t *testing.T) {
	e := newEnv(t, replaceWorld())
	e.archiveAll()
	e.live()
	tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 0 })
	e.emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(tgt.DID, 3) })
	eventually(t, 10*time.Second, "the #sync mark", func() bool { return e.state(tgt.DID).Refetch == archive.RefetchSync })
	e.src.afterGet = func(did string, n int) {
		if did == tgt.DID {
			if _, err := e.commitAndWait(did); err != nil {
				t.Error(err)
			}
		}
	}
	start := time.Now()
	ps, err := e.runner(func(c *retry.Config) { c.Rand = func() float64 { return 0.5 } }).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ps.Results[retry.ResultStale] != 4 || e.src.callsOf(tgt.DID) != 4 {
		t.Fatalf("results %v, %d fetches; want 4 refusals (the first fetch and 3 more)", ps.Results, e.src.callsOf(tgt.DID))
	}
	if got := metric(t, e.reg, "backstream_retry_replacements_refused_total", nil); got != 4 {
		t.Fatalf("replacements_refused_total = %v, want 4", got)
	}
	st := e.state(tgt.DID)
	next := time.UnixMicro(st.NextAttemptUS)
	if st.Status != archive.StatusFailed || st.ErrClass != retry.ClassStale || st.Attempts != 1 || st.Refetch != archive.RefetchSync ||
		next.Before(start.Add(time.Minute)) || next.After(time.Now().Add(time.Minute)) {
		t.Fatalf("after 4 refusals: %+v (next in %v); want failed/stale_replacement, 1 attempt, next attempt one interval on, mark kept", st, time.Until(next))
	}
	// Not due again before its backoff.
	ps, err = e.runner(nil).RunOnce(context.Background())
	if err != nil || ps.Due != 0 {
		t.Fatalf("second pass: %+v %v; want nothing due", ps, err)
	}
}

// TestSyncReplacesAccount (S7): a #sync (the network reset the account's
// repo) reaches the archive through the live consumer; the running runner
// replaces the account and folding the archive from seq 0 gives exactly
// the new record set, no ghost of the old one.
func TestSyncReplacesAccount(t *testing.T) {
	e := newEnv(t, replaceWorld())
	e.archiveAll()
	e.live()
	tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 3 })
	old := e.net.World().Records(tgt.DID)
	stop := runBG(e.runner(nil))
	e.emit(func(w *world.World) (world.Event, error) { return w.ResetRepo(tgt.DID, 4) })
	eventually(t, 15*time.Second, "the replacement", func() bool {
		st := e.state(tgt.DID)
		a, _ := e.net.World().Account(tgt.DID)
		return st.Status == archive.StatusComplete && st.BackfillRev == a.Rev && st.Refetch == archive.RefetchNone
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.replaced(tgt.DID)
	got := fold(t, e.store)[tgt.DID]
	for p := range old {
		if _, ok := e.net.World().Records(tgt.DID)[p]; !ok {
			if _, ghost := got[p]; ghost {
				t.Fatalf("ghost record %s from before the reset", p)
			}
		}
	}
	if n := e.src.callsOf(tgt.DID); n != 1 {
		t.Fatalf("%d fetches of the account, want one replacement", n)
	}
}

// TestReactivationReplacesAccount (S8): an account inactive at enumeration
// and one that was unavailable come back active; each is fetched and
// replaced while the runner runs, no restart. An inactive account carrying
// a replacement mark is never fetched.
func TestReactivationReplacesAccount(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 80, RecordsMean: 8, Hosts: 2, Seed: 35, Traffic: oracle.TrafficNone})
	e.archiveAll()
	inactive := e.pick(func(a world.Account) bool { return !a.Active && a.Status == world.StatusDeactivated })
	gone := e.pick(func(a world.Account) bool { return !a.Active && a.Status != world.StatusDeleted }, inactive.DID)
	// gone was fetched while inactive: unavailable (E11).
	if res, err := e.jobs.Run(context.Background(), backfill.Request{DID: gone.DID}); err != nil || res.Status != archive.StatusUnavailable {
		t.Fatalf("fetch of an inactive account: %v %v", res.Status, err)
	}
	// A third inactive account marked for a replacement must stay alone.
	marked := e.pick(func(a world.Account) bool { return !a.Active && a.Status != world.StatusDeleted }, inactive.DID, gone.DID)
	e.apply(&archive.Unit{Repos: []archive.RepoUpdate{{DID: marked.DID, Fields: archive.FieldRefetch | archive.FieldNextAttempt,
		State: archive.RepoState{Refetch: archive.RefetchSync, NextAttemptUS: 1}}}})
	e.live()
	calls := e.src.callsOf(marked.DID)
	stop := runBG(e.runner(nil))
	for _, a := range []world.Account{inactive, gone} {
		e.emit(func(w *world.World) (world.Event, error) { return w.SetStatus(a.DID, world.StatusActive) })
	}
	for _, a := range []world.Account{inactive, gone} {
		eventually(t, 15*time.Second, "the reactivated account's replacement", func() bool {
			st := e.state(a.DID)
			return st.Status == archive.StatusComplete && st.Active && st.Refetch == archive.RefetchNone
		})
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []world.Account{inactive, gone} {
		e.replaced(a.DID)
	}
	if e.src.callsOf(marked.DID) != calls {
		t.Fatalf("an inactive account was fetched")
	}
}

// TestStoreReadFaultStopsRun (S6): an I/O error under the candidate scan is
// not a per-repo failure: Run stops with an error wrapping ErrFatal and
// archive.ErrRead, counted once. A malformed due index key does the same,
// and so does a malformed state of a due repo.
func TestStoreReadFaultStopsRun(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 20, RecordsMean: 2, Hosts: 2, Seed: 37, Traffic: oracle.TrafficNone})
	var ups []archive.RepoUpdate
	long := string(make([]byte, 1000))
	for i := 0; i < 400; i++ {
		ups = append(ups, archive.RepoUpdate{DID: "did:plc:fault" + string(rune('a'+i%26)) + string(rune('a'+i/26)),
			Fields: archive.FieldStatus | archive.FieldActive | archive.FieldError | archive.FieldNextAttempt,
			State:  archive.RepoState{Status: archive.StatusFailed, Active: true, ErrClass: "x", LastError: long, NextAttemptUS: 1}})
	}
	e.apply(&archive.Unit{Repos: ups})
	if err := e.store.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	e.reopen() // cold block cache: the scan must read the sstable
	r := e.runner(nil)
	e.fault.Store(true)
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run kept going over a failing store")
	}
	e.fault.Store(false)
	if !errors.Is(err, retry.ErrFatal) || !errors.Is(err, archive.ErrRead) {
		t.Fatalf("Run: %v; want ErrFatal wrapping ErrRead", err)
	}
	if got := metric(t, e.reg, "backstream_retry_fatal_total", nil); got != 1 {
		t.Fatalf("fatal_total = %v, want 1", got)
	}

	// A malformed due index key (no DID after its time) stops the pass the
	// same way, naming the key; it sorts before every due entry.
	if err := e.store.DB().Set(append(append([]byte(nil), archive.PrefixDue...), 0, 0, 0), nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err = e.runner(nil).RunOnce(context.Background())
	if !errors.Is(err, retry.ErrFatal) || !errors.Is(err, archive.ErrMalformed) {
		t.Fatalf("RunOnce over a malformed state: %v", err)
	}
	if got := metric(t, e.reg, "backstream_retry_fatal_total", nil); got != 2 {
		t.Fatalf("fatal_total = %v, want 2", got)
	}

	// A malformed state of a due repo, read again when its turn comes,
	// stops the runner the same way.
	bad := append(append([]byte(nil), archive.PrefixDue...), 0, 0, 0)
	if err := e.store.DB().Delete(bad, nil); err != nil {
		t.Fatal(err)
	}
	e.apply(&archive.Unit{Repos: []archive.RepoUpdate{failedDue("did:plc:faultzz", "")}})
	if err := e.store.DB().Set(archive.RepoKey("did:plc:faultzz"), []byte{9, 9}, nil); err != nil {
		t.Fatal(err)
	}
	ps, err := e.runner(nil).RunOnce(context.Background())
	if !errors.Is(err, retry.ErrFatal) || !errors.Is(err, archive.ErrMalformed) || !strings.Contains(err.Error(), "did:plc:faultzz") {
		t.Fatalf("RunOnce over a due repo's malformed state: %v (pass %+v)", err, ps)
	}
	if got := metric(t, e.reg, "backstream_retry_fatal_total", nil); got != 3 {
		t.Fatalf("fatal_total = %v, want 3", got)
	}
}

// TestInFlightIsNotQueuedTwice: passes keep coming while a job hangs; the
// repo is fetched once (deduplicated), and each pass counts it in flight.
func TestInFlightIsNotQueuedTwice(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 20, RecordsMean: 2, Hosts: 2, Seed: 39, Traffic: oracle.TrafficNone})
	a := e.pick(func(a world.Account) bool { return a.Active && a.Records > 0 })
	e.net.Faults().HangBody(a.DID, oracle.Always)
	e.seedFailed([]world.Account{a})
	r := e.runner(func(c *retry.Config) { c.ScanPeriod = 10 * time.Millisecond })
	stop := runBG(r)
	eventually(t, 10*time.Second, "passes while the job hangs", func() bool { return r.Status().Passes >= 10 })
	st := r.Status()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := e.src.callsOf(a.DID); n != 1 {
		t.Fatalf("%d fetches of a repo in flight, want 1", n)
	}
	if st.InFlight != 1 || st.Due != 1 {
		t.Fatalf("status %+v", st)
	}
	if got := metric(t, e.reg, "backstream_retry_due", nil); got != 1 {
		t.Fatalf("retry_due = %v, want 1", got)
	}
}

// TestUnchangedReactivationCostsNoRecordRows: an archived account is
// deactivated and comes back with the same repo; the live consumer marks
// it and the runner replaces it. The replacement archives its sync row
// alone (before, every record again as a create), and the archive still
// folds to the network's records.
func TestUnchangedReactivationCostsNoRecordRows(t *testing.T) {
	e := newEnv(t, replaceWorld())
	e.archiveAll()
	e.live()
	tgt := e.pick(func(a world.Account) bool { return a.Active && a.Records > 3 })
	stop := runBG(e.runner(nil))
	e.emit(func(w *world.World) (world.Event, error) { return w.SetStatus(tgt.DID, world.StatusDeactivated) })
	eventually(t, 10*time.Second, "the deactivation", func() bool { return !e.state(tgt.DID).Active })
	e.emit(func(w *world.World) (world.Event, error) { return w.SetStatus(tgt.DID, world.StatusActive) })
	eventually(t, 15*time.Second, "the reactivation's replacement", func() bool {
		it, err := e.store.Events(0)
		if err != nil {
			t.Fatal(err)
		}
		defer it.Close()
		for it.Next() {
			if ev := it.Event(); ev.DID == tgt.DID && ev.Source == archive.SourceRetry {
				st := e.state(tgt.DID)
				return st.Active && st.Refetch == archive.RefetchNone
			}
		}
		return false
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.replaced(tgt.DID)
	it, err := e.store.Events(0)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	kinds := map[archive.Kind]int{}
	for it.Next() {
		if ev := it.Event(); ev.DID == tgt.DID && ev.Source == archive.SourceRetry {
			kinds[ev.Kind]++
		}
	}
	if len(kinds) != 1 || kinds[archive.KindSync] != 1 {
		t.Fatalf("the replacement of an unchanged %d-record repo archived %v, want its sync row alone", tgt.Records, kinds)
	}
}
