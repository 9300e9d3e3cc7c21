package bootstrap_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// TestBootstrapEndToEnd: every listed account ends in its terminal state
// with exactly its records archived; inactive entries are stored inactive
// and never fetched (E12); active ones are fetched once; the checkpoint
// records "finished" and the last non-empty cursor.
func TestBootstrapEndToEnd(t *testing.T) {
	e := newEnv(t, worldCfg(200, 8))
	e.runToEnd(e.boot(nil))
	states, rows := e.states(), e.rowCounts()
	listed := e.listed()
	if len(states) != len(listed) {
		t.Fatalf("%d repos stored, %d listed", len(states), len(listed))
	}
	for _, a := range listed {
		st := states[a.DID]
		rc := e.net.RepoCounts(a.DID)
		if !a.Active {
			if st.Active || st.Status != archive.StatusNotStarted || st.AccountStatus != a.Status || rc.RelayRequests != 0 {
				t.Fatalf("inactive %s: state %+v, %d getRepo; want inactive not_started (%s), never fetched", a.DID, st, rc.RelayRequests, a.Status)
			}
			continue
		}
		if st.Status != archive.StatusComplete || st.BackfillRev != a.Rev || rows[a.DID] != a.Records || rc.RelayRequests != 1 {
			t.Fatalf("%s: state %v rev %s rows %d getRepo %d; want complete at %s with %d rows, fetched once",
				a.DID, st.Status, st.BackfillRev, rows[a.DID], rc.RelayRequests, a.Rev, a.Records)
		}
	}
	c, ok := e.checkpoint()
	if !ok || !c.Finished {
		t.Fatalf("checkpoint %+v (present %v), want finished", c, ok)
	}
	calls := e.src.calls()
	last, err := e.store.ListCursor(true)
	if err != nil || last.Cursor != calls[len(calls)-1].cursor || last.Cursor == "" {
		t.Fatalf("last cursor %q (%v), want the final page's request cursor", last.Cursor, err)
	}
	for _, c := range calls {
		if c.limit != 40 {
			t.Fatalf("listRepos limit %d, want the configured page (40)", c.limit)
		}
	}
	e.scratchEmpty()
}

func (e *env) scratchEmpty() {
	e.t.Helper()
	ents, err := os.ReadDir(e.store.ScratchDir())
	if err != nil || len(ents) != 0 {
		e.t.Fatalf("scratch holds %v (%v)", ents, err)
	}
}

// TestEnumerationResumesFromCheckpoint (E1): pages of 1000 from the last
// durable cursor; after a restart the first request carries the durable
// checkpoint and no earlier page is listed again.
func TestEnumerationResumesFromCheckpoint(t *testing.T) {
	citest.Long(t, "2,500-account world")
	e := newEnv(t, worldCfg(2500, 1))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.PageLimit = 0; c.Workers = 16 })
	e.src.onList = func(n int) {
		if n != 2 {
			return
		}
		// Before the third page: wait for a durable checkpoint, then crash.
		eventually(t, 30*time.Second, "a checkpoint", func() bool { _, ok := e.checkpoint(); return ok })
		cancel()
	}
	if err := b.Run(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("run 1: %v", err)
	}
	first := e.src.calls()
	e.reopen()
	cp, ok := e.checkpoint()
	if !ok || cp.Finished {
		t.Fatalf("checkpoint after the crash: %+v %v", cp, ok)
	}
	e.runToEnd(e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.PageLimit = 0; c.Workers = 16 }))
	second := e.src.calls()
	if second[0].cursor != cp.Cursor {
		t.Fatalf("restart listed from %q, want the durable checkpoint", second[0].cursor)
	}
	for _, c := range append(first, second...) {
		if c.limit != 1000 {
			t.Fatalf("listRepos limit %d, want 1000", c.limit)
		}
	}
	for _, c := range second {
		if c.cursor == "" {
			t.Fatalf("the first page was listed again after the restart")
		}
	}
	if c, _ := e.checkpoint(); !c.Finished {
		t.Fatalf("checkpoint %+v, want finished", c)
	}
}

// TestShuffle (E2): the production helper returns a permutation in a
// different order, and different seeds give different orders.
func TestShuffle(t *testing.T) {
	in := make([]string, 200)
	for i := range in {
		in[i] = "did:plc:" + strings.Repeat("a", 20) + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	a := slices.Clone(in)
	bootstrap.Shuffle(a, rand.New(rand.NewPCG(1, 2)))
	b := slices.Clone(in)
	bootstrap.Shuffle(b, rand.New(rand.NewPCG(3, 4)))
	if slices.Equal(a, in) || slices.Equal(a, b) {
		t.Fatalf("shuffle left the order unchanged or identical across seeds")
	}
	for _, s := range [][]string{a, b} {
		sorted := slices.Clone(s)
		sort.Strings(sorted)
		want := slices.Clone(in)
		sort.Strings(want)
		if !slices.Equal(sorted, want) {
			t.Fatalf("shuffle is not a permutation")
		}
	}
	// Positions moved a lot: consecutive listing neighbours rarely stay adjacent.
	pos := map[string]int{}
	for i, d := range a {
		pos[d] = i
	}
	adjacent := 0
	for i := 1; i < len(in); i++ {
		if d := pos[in[i]] - pos[in[i-1]]; d == 1 || d == -1 {
			adjacent++
		}
	}
	if adjacent > 10 {
		t.Fatalf("%d listing neighbours still adjacent after the shuffle", adjacent)
	}
}

// TestDispatchIsShuffled (E2): with one worker, getRepo order is a
// permutation of the page's active repos, not the listing order.
func TestDispatchIsShuffled(t *testing.T) {
	e := newEnv(t, worldCfg(60, 2))
	e.runToEnd(e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.Workers = 1; c.PageLimit = 100 }))
	got := e.src.getOrder()
	var want []string
	for _, a := range e.listed() {
		if a.Active {
			want = append(want, a.DID)
		}
	}
	if slices.Equal(got, want) {
		t.Fatalf("dispatch followed the listing order")
	}
	sorted := slices.Clone(got)
	sort.Strings(sorted)
	if !slices.Equal(sorted, want) {
		t.Fatalf("dispatch is not a permutation of the active repos")
	}
}

// TestWorkersBoundConcurrentGetRepo (E3): with every getRepo held, exactly
// N are in flight and no N+1th starts; each one released lets exactly one
// more start; the run ends with every active repo fetched once, never more
// than N at a time. In a bubble: once it settles, every worker that could
// start a request has started it.
func TestWorkersBoundConcurrentGetRepo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(80, 2))
		e.mem.hold = func(string) bool { return true }
		const n = 7
		b := e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.Workers = n })
		done := make(chan error, 1)
		go func() { done <- b.Run(context.Background()) }()
		for released := 0; released <= 3; released++ {
			settle(30 * time.Second) // three progress periods
			calls, inflight, _ := e.mem.counts()
			if inflight != n || calls != n+released {
				t.Fatalf("%d released: %d getRepo in flight, %d made; want exactly %d in flight and %d made", released, inflight, calls, n, n+released)
			}
			if got := metric(t, e.reg, "backstream_getrepo_inflight", nil); got != n {
				t.Fatalf("getrepo_inflight = %v, want %d", got, n)
			}
			e.mem.release <- struct{}{}
		}
		close(e.mem.release)
		if err := <-done; err != nil {
			t.Fatalf("run: %v", err)
		}
		active := e.activeListed()
		if calls, _, peak := e.mem.counts(); calls != active || peak != n {
			t.Fatalf("%d getRepo for %d active repos, at most %d at once; want each once, at most %d", calls, active, peak, n)
		}
	})
}

// TestInactiveFlipPreservesRow (E12): an inactive entry is not_started and
// inactive; listed active later, only its activity changes and it is
// fetched; a complete repo listed inactive keeps its status and rows.
func TestInactiveFlipPreservesRow(t *testing.T) {
	e := newEnv(t, worldCfg(60, 4))
	e.runToEnd(e.boot(nil))
	var inactive, complete world.Account
	for _, a := range e.listed() {
		switch {
		case !a.Active && a.Status == world.StatusDeactivated && inactive.DID == "":
			inactive = a
		case a.Active && a.Records > 0 && complete.DID == "":
			complete = a
		}
	}
	before := e.rowCounts()[complete.DID]
	for _, ev := range []struct{ did, status string }{{inactive.DID, world.StatusActive}, {complete.DID, world.StatusDeactivated}} {
		if _, err := e.net.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(ev.did, ev.status) }); err != nil {
			t.Fatal(err)
		}
	}
	// Forget the finished checkpoint so the next run lists everything again.
	if _, err := e.w.Apply(context.Background(), &archive.Unit{Puts: []archive.KV{{Key: archive.KeyCursorListRepos}}}); err != nil {
		t.Fatal(err)
	}
	e.runToEnd(e.boot(nil))
	st := e.states()
	if s := st[inactive.DID]; !s.Active || s.Status != archive.StatusComplete {
		t.Fatalf("reactivated not_started repo: %+v, want active and fetched", s)
	}
	if s := st[complete.DID]; s.Active || s.Status != archive.StatusComplete || s.BackfillRev != complete.Rev || e.rowCounts()[complete.DID] != before {
		t.Fatalf("deactivated complete repo: %+v, want inactive, still complete with its rows", s)
	}
	if rc := e.net.RepoCounts(complete.DID); rc.RelayRequests != 1 {
		t.Fatalf("complete repo fetched %d times", rc.RelayRequests)
	}
}

// TestDebugRepos (E13): --repos backfills exactly the named DIDs in order,
// lists nothing and writes no cursor.
func TestDebugRepos(t *testing.T) {
	e := newEnv(t, worldCfg(40, 2))
	var dids []string
	for _, a := range e.listed() {
		if a.Active && len(dids) < 6 {
			dids = append(dids, a.DID)
		}
	}
	slices.Reverse(dids)
	e.runToEnd(e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.Repos = dids; c.Workers = 1 }))
	if got := e.src.getOrder(); !slices.Equal(got, dids) {
		t.Fatalf("getRepo order %v, want %v", got, dids)
	}
	if n := len(e.src.calls()); n != 0 {
		t.Fatalf("%d listRepos calls in --repos mode", n)
	}
	if _, ok := e.checkpoint(); ok {
		t.Fatalf("--repos wrote a listRepos cursor")
	}
	if _, err := e.store.ListCursor(true); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("--repos wrote a last cursor: %v", err)
	}
	if st := e.states(); len(st) != len(dids) {
		t.Fatalf("%d repos stored, want exactly the %d named", len(st), len(dids))
	}
}

// TestDebugMaxRepos (E13): --max-repos stops after N listed repos and never
// commits a resumable cursor.
func TestDebugMaxRepos(t *testing.T) {
	e := newEnv(t, worldCfg(120, 2))
	e.runToEnd(e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.MaxRepos = 50 }))
	if st := e.states(); len(st) != 50 {
		t.Fatalf("%d repos stored, want 50", len(st))
	}
	if n := len(e.src.calls()); n != 2 {
		t.Fatalf("%d listRepos pages for 50 repos of pages of 40", n)
	}
	if _, ok := e.checkpoint(); ok {
		t.Fatalf("--max-repos wrote a listRepos cursor")
	}
	if _, err := e.store.ListCursor(true); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("--max-repos wrote a last cursor: %v", err)
	}
}

// TestDuplicateListingNotDispatchedTwice: a DID listed again while its job
// is in flight is not dispatched again, and its later pages still
// checkpoint (the earlier page counts it). In a bubble the held getRepo
// meets its attempt deadline only once everything else is blocked, so the
// later pages are all listed while the job is in flight.
func TestDuplicateListingNotDispatchedTwice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(120, 2))
		e.src.dupFirst = true
		first := e.listed()[0].DID
		if a, _ := e.world.Account(first); !a.Active {
			t.Skip("first listed account is inactive in this world")
		}
		e.mem.holdOnly(first)
		e.runToEnd(e.boot(func(_ *bootstrap.Config, o *backfill.Options) { o.AttemptTimeout = 1500 * time.Millisecond }))
		fetched := 0
		for _, d := range e.src.getOrder() {
			if d == first {
				fetched++
			}
		}
		if fetched != 1 {
			t.Fatalf("duplicate-listed repo fetched %d times, want once", fetched)
		}
		if n := len(e.src.calls()); n != 3 {
			t.Fatalf("%d listRepos pages, want 3 (each after the first lists the held DID again)", n)
		}
		if c, _ := e.checkpoint(); !c.Finished {
			t.Fatalf("checkpoint %+v", c)
		}
		if st := e.states()[first]; st.Status != archive.StatusFailed || st.ErrClass != backfill.ClassTimeout {
			t.Fatalf("hung repo %+v", st)
		}
	})
}

// rowGuard records a unit with rows of a repo whose state is not yet
// durable (R7: the not_started row comes first). It makes every state-only
// unit (the not_started batches among them) durable late: Submit returns at
// once and the unit reaches the writer a while after. On the fake clock of
// a bubble that while ends only once every other goroutine is blocked, so a
// job dispatched before its batch is durable — whether its batch was not
// yet submitted or only not yet acknowledged — has submitted its rows by
// then, every time.
type rowGuard struct {
	backfill.Writer
	e   *env
	wg  sync.WaitGroup
	mu  sync.Mutex
	bad string
	err error
}

func (g *rowGuard) Submit(ctx context.Context, u *archive.Unit) error {
	for _, ev := range u.Events {
		if _, err := g.e.store.RepoState(ev.DID); err != nil {
			g.mu.Lock()
			g.bad = ev.DID
			g.mu.Unlock()
		}
	}
	if len(u.Events) > 0 || len(u.Puts) > 0 {
		return g.Writer.Submit(ctx, u)
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		time.Sleep(30 * time.Millisecond)
		if err := g.Writer.Submit(context.Background(), u); err != nil {
			g.mu.Lock()
			g.err = err
			g.mu.Unlock()
		}
	}()
	return nil
}

// TestNotStartedBeforeRows (R7): every repo's state is durable before its
// first row is submitted.
func TestNotStartedBeforeRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(150, 4))
		g := &rowGuard{Writer: e.w, e: e}
		e.runToEnd(e.boot(func(c *bootstrap.Config, o *backfill.Options) { c.Writer = g; o.Writer = g }))
		g.wg.Wait()
		if g.bad != "" || g.err != nil {
			t.Fatalf("rows of %q submitted before its state was durable (late submit: %v)", g.bad, g.err)
		}
	})
}

// TestCursorLoopEndsListing: a listRepos cursor that repeats ends the
// listing like a last page, counted.
func TestCursorLoopEndsListing(t *testing.T) {
	e := newEnv(t, worldCfg(120, 2))
	e.net.Faults().ListReposCursorLoop(1)
	e.runToEnd(e.boot(nil))
	if got := metric(t, e.reg, "backstream_listrepos_cursor_loops_total", nil); got != 1 {
		t.Fatalf("cursor loops = %v, want 1", got)
	}
	if n := len(e.src.calls()); n != 2 {
		t.Fatalf("%d listRepos calls, want 2 (the second repeats its cursor)", n)
	}
	if c, _ := e.checkpoint(); !c.Finished {
		t.Fatalf("checkpoint %+v, want finished", c)
	}
	if e.net.Faults().Fired(oracle.FaultListReposLoop) != 1 {
		t.Fatalf("loop fault did not fire")
	}
}

// TestStraggler (R5): one hung repo never blocks its siblings'
// completions; it holds back only the checkpoint — across a reopen too. In
// a bubble: once it settles, the run has done everything it will do while
// the repo hangs.
func TestStraggler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(120, 3))
		listed := e.listed()
		hung := ""
		for _, a := range listed[:40] {
			if a.Active {
				hung = a.DID
				break
			}
		}
		e.mem.holdOnly(hung)
		b := e.boot(nil)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		siblingsDone := func() bool {
			st := e.states()
			for _, a := range listed {
				if a.Active && a.DID != hung && st[a.DID].Status != archive.StatusComplete {
					return false
				}
			}
			return true
		}
		settle(30 * time.Second) // three progress periods
		if !siblingsDone() {
			t.Fatalf("siblings of a hung repo not all durably complete")
		}
		if _, ok := e.checkpoint(); ok {
			t.Fatalf("checkpoint written while a first-page repo hangs")
		}
		if lag := metric(t, e.reg, "backstream_listrepos_checkpoint_lag_repos", nil); lag != float64(len(listed)) {
			t.Fatalf("checkpoint lag %v, want every listed repo (%d)", lag, len(listed))
		}
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Fatalf("run: %v", err)
		}
		e.reopen()
		if !siblingsDone() {
			t.Fatalf("siblings not complete after reopen")
		}
		if _, ok := e.checkpoint(); ok {
			t.Fatalf("checkpoint present after reopen")
		}
		if st := e.states()[hung]; st.Status != archive.StatusNotStarted {
			t.Fatalf("hung repo %v after reopen", st.Status)
		}
	})
}

// TestEnumerationWindow: enumeration stops while the repos beyond the
// checkpoint fill the window, and workers keep going meanwhile. In a
// bubble: once it settles, the enumerator is blocked for good.
func TestEnumerationWindow(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, worldCfg(200, 2))
		hung := e.listed()[0].DID
		for _, a := range e.listed() {
			if a.Active {
				hung = a.DID
				break
			}
		}
		e.mem.holdOnly(hung)
		b := e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.Window = 100 })
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- b.Run(ctx) }()
		settle(30 * time.Second) // three progress periods
		if p := b.Progress(); p.Pages != 2 || p.Queued != 0 || p.InFlight != 1 || p.Enumerated != 80 {
			t.Fatalf("progress %+v; want two pages (80 repos) enumerated beyond a stuck checkpoint with a window of 100, all but the hung one done", p)
		}
		if n := len(e.src.calls()); n != 3 {
			t.Fatalf("%d listRepos calls; want 3 (two pages in the window, the third fetched and waiting for credit)", n)
		}
		cancel()
		<-done
	})
}

// ckWriter checks, whenever bootstrap submits a checkpoint, that every repo
// of the pages it covers is already durably terminal (R6), and can crash
// (stop the real writer) after a number of units, or just before or just
// after the k-th checkpoint.
type ckWriter struct {
	backfill.Writer
	t           *testing.T
	e           *env
	crashAt     int  // crash after this many units (0: never)
	crashCk     int  // crash at the crashCk-th checkpoint (0: never)
	crashBefore bool // ... before it reaches the writer, else right after

	mu      sync.Mutex
	units   int
	checked int
	crashed bool
	bad     string
}

func (c *ckWriter) Submit(ctx context.Context, u *archive.Unit) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.crashed {
		return archive.ErrClosed
	}
	c.units++
	isCk := false
	for _, kv := range u.Puts {
		if string(kv.Key) != string(archive.KeyCursorListRepos) {
			continue
		}
		isCk = true
		cp, err := archive.DecodeListCursor(kv.Value)
		if err != nil {
			c.t.Errorf("checkpoint value: %v", err)
			continue
		}
		if bad := c.e.uncovered(cp); bad != "" {
			c.bad = bad
		}
		c.checked++
	}
	crash := c.crashAt > 0 && c.units == c.crashAt || isCk && c.crashCk > 0 && c.checked == c.crashCk
	if crash && c.crashBefore {
		c.crashed = true
		_ = c.e.w.Close()
		return archive.ErrClosed
	}
	err := c.Writer.Submit(ctx, u)
	if crash {
		c.crashed = true
		_ = c.e.w.Close() // commits what is queued, this unit included
	}
	return err
}

// uncovered returns a repo listed at or before checkpoint cp that is not
// durably terminal ("" when there is none).
func (e *env) uncovered(cp archive.ListCursor) string {
	calls := e.src.calls()
	upto := len(calls)
	if !cp.Finished {
		upto = -1
		for i, c := range calls {
			if c.next == cp.Cursor {
				upto = i + 1
				break
			}
		}
		if upto < 0 {
			return "unknown cursor"
		}
	}
	for _, c := range calls[:upto] {
		for _, did := range c.dids {
			st, err := e.store.RepoState(did)
			if err != nil || !terminal(st) {
				return did
			}
		}
	}
	return ""
}

// TestCheckpointNeverPassesNonTerminal (R6): at every checkpoint submission
// the covered repos are durably terminal; and across crashes at many
// points, the durable checkpoint never covers a non-terminal repo, and a
// restart finishes without fetching a complete repo again.
func TestCheckpointNeverPassesNonTerminal(t *testing.T) {
	cfg := worldCfg(160, 4)
	slowDIDs := func(e *env) {
		// Stragglers spread over the pages, so the checkpoint moves in steps.
		// Later pages' stragglers are slower.
		for i, a := range e.listed() {
			if a.Active && i%25 == 5 {
				e.net.Faults().SlowBody(a.DID, 24000/(i/25+1), oracle.Always)
			}
		}
	}
	e := newEnv(t, cfg)
	slowDIDs(e)
	ck := &ckWriter{Writer: e.w, t: t, e: e}
	e.runToEnd(e.boot(func(c *bootstrap.Config, _ *backfill.Options) { c.Writer = ck }))
	t.Logf("%d checkpoints checked", ck.checked)
	if ck.checked < 2 || ck.bad != "" {
		t.Fatalf("%d checkpoints checked; one covered non-terminal repo %q", ck.checked, ck.bad)
	}
	type crashCase struct {
		unit, ck int
		before   bool
	}
	crashes := []crashCase{{unit: 3}, {unit: 40}, {ck: 1, before: true}, {ck: 1}, {ck: 2, before: true}, {ck: 3}}
	if testing.Short() {
		crashes = crashes[2:4]
	}
	for _, cc := range crashes {
		at := fmt.Sprintf("%+v", cc)
		e := newEnv(t, cfg)
		slowDIDs(e)
		ck := &ckWriter{Writer: e.w, t: t, e: e, crashAt: cc.unit, crashCk: cc.ck, crashBefore: cc.before}
		b := e.boot(func(c *bootstrap.Config, o *backfill.Options) { c.Writer = ck; o.Writer = ck })
		if err := b.Run(context.Background()); err == nil {
			t.Fatalf("crash at %s: run finished", at)
		}
		calls := e.src
		e.reopen()
		e.src = calls // the listing seen before the crash
		cp, ok := e.checkpoint()
		t.Logf("crash at %s: checkpoint %+v present=%v, %d repos known", at, cp.Finished, ok, len(e.states()))
		if ok {
			if bad := e.uncovered(cp); bad != "" {
				t.Fatalf("crash at %s: durable checkpoint covers non-terminal %s", at, bad)
			}
		}
		completeBefore := map[string]int{}
		for did, st := range e.states() {
			if st.Status == archive.StatusComplete {
				completeBefore[did] = e.net.RepoCounts(did).RelayRequests
			}
		}
		e.src = &recSource{RepoSource: e.client}
		e.runToEnd(e.boot(nil))
		for did, n := range completeBefore {
			if got := e.net.RepoCounts(did).RelayRequests; got != n {
				t.Fatalf("crash at %s: complete repo %s fetched again (%d → %d)", at, did, n, got)
			}
		}
		for did, st := range e.states() {
			if !terminal(st) {
				t.Fatalf("crash at %s: %s ends %v", at, did, st.Status)
			}
		}
		if c, _ := e.checkpoint(); !c.Finished {
			t.Fatalf("crash at %s: final checkpoint %+v", at, c)
		}
	}
}

// TestRestartSemantics (R7): after a crash, complete repos are not fetched
// again, every active not_started repo becomes pending before enumeration
// resumes (and is not fetched in bootstrap), and the rest is fetched once.
func TestRestartSemantics(t *testing.T) {
	e := newEnv(t, worldCfg(150, 4))
	listed := e.listed()
	var hung []string
	for _, a := range listed {
		if a.Active && len(hung) < 3 {
			hung = append(hung, a.DID)
			e.net.Faults().HangBody(a.DID, oracle.Always)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := e.boot(func(c *bootstrap.Config, o *backfill.Options) { c.Workers = 4; o.AttemptTimeout = time.Minute })
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	eventually(t, 20*time.Second, "30 completions", func() bool { return b.Progress().Complete >= 30 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("run 1: %v", err)
	}
	e.reopen()
	e.net.Faults().Clear()
	before := e.states()
	reqs := map[string]int{}
	notStarted := 0
	for _, a := range listed {
		reqs[a.DID] = e.net.RepoCounts(a.DID).RelayRequests
		if st, ok := before[a.DID]; ok && st.Active && st.Status == archive.StatusNotStarted {
			notStarted++
		}
	}
	if notStarted < len(hung) {
		t.Fatalf("%d active not_started repos after the crash, want at least the %d hung", notStarted, len(hung))
	}
	e.src.onList = func(n int) {
		if n != 0 {
			return
		}
		for did, st := range e.states() {
			if st.Active && st.Status == archive.StatusNotStarted {
				t.Errorf("enumeration resumed while %s is active not_started", did)
			}
		}
	}
	e.runToEnd(e.boot(nil))
	after := e.states()
	for _, a := range listed {
		got := e.net.RepoCounts(a.DID).RelayRequests - reqs[a.DID]
		st0, known := before[a.DID]
		st := after[a.DID]
		switch {
		case known && st0.Status == archive.StatusComplete:
			if got != 0 {
				t.Fatalf("complete %s fetched %d more times", a.DID, got)
			}
		case known && st0.Active && st0.Status == archive.StatusNotStarted:
			if got != 0 || st.Status != archive.StatusPending || st.Refetch != archive.RefetchPending {
				t.Fatalf("interrupted %s: %v (refetch %v), fetched %d more times; want pending, not fetched", a.DID, st.Status, st.Refetch, got)
			}
		case a.Active && !known:
			if got != 1 || st.Status != archive.StatusComplete {
				t.Fatalf("new %s: %v after %d fetches", a.DID, st.Status, got)
			}
		}
	}
	if got := metric(t, e.reg, "backstream_bootstrap_pending_on_restart_total", nil); got != float64(notStarted) {
		t.Fatalf("pending_on_restart = %v, want %d", got, notStarted)
	}
}

// delayWriter makes every unit take a while to reach the writer, so a
// counter moved before durability would be seen ahead of the store.
type delayWriter struct {
	backfill.Writer
	delay time.Duration
}

func (d delayWriter) Submit(ctx context.Context, u *archive.Unit) error {
	time.Sleep(d.delay)
	return d.Writer.Submit(ctx, u)
}

// TestMetricsFollowDurableState (R8): sampled during a run, the progress
// counters never exceed what the store holds; at the end they match it.
func TestMetricsFollowDurableState(t *testing.T) {
	e := newEnv(t, worldCfg(100, 10))
	dw := delayWriter{Writer: e.w, delay: 15 * time.Millisecond}
	b := e.boot(func(c *bootstrap.Config, o *backfill.Options) { c.Writer = dw; o.Writer = dw; c.Workers = 4 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	samples := 0
	check := func(final bool) {
		records := metric(t, e.reg, "backstream_backfill_records_total", nil)
		repos := metric(t, e.reg, "backstream_backfill_repos_total", map[string]string{"result": "complete"})
		// Read the store after the metrics: it can only be further ahead.
		rows := 0
		for _, n := range e.rowCounts() {
			rows += n
		}
		complete := 0
		for _, st := range e.states() {
			if st.Status == archive.StatusComplete {
				complete++
			}
		}
		if records > float64(rows) || repos > float64(complete) {
			t.Fatalf("metrics ahead of the store: records %v > %d or complete %v > %d", records, rows, repos, complete)
		}
		if final && (records != float64(rows) || repos != float64(complete)) {
			t.Fatalf("final metrics records %v complete %v, store %d %d", records, repos, rows, complete)
		}
		samples++
	}
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			running = false
		case <-time.After(3 * time.Millisecond):
			check(false)
		}
	}
	check(true)
	counts, err := e.store.Counts()
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range archive.RepoStatuses {
		if got := metric(t, e.reg, "backstream_repos", map[string]string{"status": s.String()}); got != float64(counts.Get(s)) {
			t.Fatalf("backstream_repos{%s} = %v, meta/counts %d", s, got, counts.Get(s))
		}
	}
	if samples < 20 {
		t.Fatalf("only %d samples", samples)
	}
}

// TestProgress: the snapshot and the periodic log line.
func TestProgress(t *testing.T) {
	e := newEnv(t, worldCfg(60, 4))
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&buf, &mu}, nil))
	b := e.boot(func(c *bootstrap.Config, o *backfill.Options) {
		c.Logger = log
		c.ProgressEvery = 5 * time.Millisecond
		o.Writer = delayWriter{Writer: e.w, delay: 5 * time.Millisecond}
	})
	e.runToEnd(b)
	p := b.Progress()
	counts, _ := e.store.Counts()
	if p.State != bootstrap.StateDone || p.Known != counts.Total() || p.Done != p.Known || !p.ListingFinished || p.Checkpoint != "finished" {
		t.Fatalf("final progress %+v (store knows %d)", p, counts.Total())
	}
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, k := range []string{"bootstrap progress", "done=", "known=", "percent=", "repos_per_s=", "records_per_s=", "failed=", "unavailable=", "in_flight=", "eta="} {
		if !strings.Contains(out, k) {
			t.Fatalf("progress log lacks %q:\n%s", k, out)
		}
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// TestEnterMerging (C3): phase=merging with both backfill timestamps in one
// unit; a second call is a no-op.
func TestEnterMerging(t *testing.T) {
	e := newEnv(t, worldCfg(20, 2))
	e.runToEnd(e.boot(nil))
	entered, err := e.store.Time(archive.KeyPhaseEnteredAt)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	if err := bootstrap.EnterMerging(context.Background(), e.store, e.w, now); err != nil {
		t.Fatal(err)
	}
	e.reopen()
	phase, err := e.store.Phase()
	if err != nil || phase != archive.PhaseMerging {
		t.Fatalf("phase %q %v", phase, err)
	}
	started, err1 := e.store.Time(archive.KeyBackfillStartedAt)
	completed, err2 := e.store.Time(archive.KeyBackfillCompleteAt)
	entered2, err3 := e.store.Time(archive.KeyPhaseEnteredAt)
	if err := errors.Join(err1, err2, err3); err != nil {
		t.Fatal(err)
	}
	if !started.Equal(entered) || !completed.Equal(now) || !entered2.Equal(now) {
		t.Fatalf("timestamps started %v (want %v) completed %v entered %v (want %v)", started, entered, completed, entered2, now)
	}
	if err := bootstrap.EnterMerging(context.Background(), e.store, e.w, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if c, _ := e.store.Time(archive.KeyBackfillCompleteAt); !c.Equal(now) {
		t.Fatalf("second EnterMerging rewrote the timestamps")
	}
}

// TestBootstrapEndsWithOnlyInactiveNotStarted: when bootstrap is done,
// backstream_repos{status="pending"} is 0 and {status="not_started"} is
// the inactive accounts listed and never fetched, not 0: the progress
// operating.md tells an operator to watch.
func TestBootstrapEndsWithOnlyInactiveNotStarted(t *testing.T) {
	e := newEnv(t, worldCfg(200, 5))
	if err := e.boot(nil).Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	inactive := 0
	for did, st := range e.states() {
		if st.Status == archive.StatusNotStarted {
			if st.Active {
				t.Fatalf("%s is active and not_started after bootstrap", did)
			}
			inactive++
		}
	}
	if inactive == 0 {
		t.Fatal("the world lists no inactive account: the test shows nothing")
	}
	if got := metric(t, e.reg, "backstream_repos", map[string]string{"status": "not_started"}); got != float64(inactive) {
		t.Fatalf("backstream_repos{status=\"not_started\"} = %v after bootstrap, want the %d inactive accounts never fetched", got, inactive)
	}
	if got := metric(t, e.reg, "backstream_repos", map[string]string{"status": "pending"}); got != 0 {
		t.Fatalf("backstream_repos{status=\"pending\"} = %v after bootstrap, want 0", got)
	}
}
