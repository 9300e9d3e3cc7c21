package backfill_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/logtest"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// TestJobArchivesSnapshot: a job archives exactly the repo's records at its
// head rev, records the head rev as BackfillRev (R2) and the PDS that
// answered after the relay's redirect (E4), and counts durable state.
func TestJobArchivesSnapshot(t *testing.T) {
	e := newEnv(t, smallWorld(12, 30))
	r := e.runner(nil)
	accts := e.activeAccounts(1)[:3]
	total := 0
	for _, a := range accts {
		res := e.run(r, a.DID)
		if res.Status != archive.StatusComplete || res.Rev != a.Rev || res.Records != a.Records {
			t.Fatalf("%s: result %+v, want complete at %s with %d records", a.DID, res, a.Rev, a.Records)
		}
		total += a.Records
	}
	rows := e.rows()
	relay, _ := url.Parse(e.net.RelayURL())
	for _, a := range accts {
		if got, want := rowPaths(rows[a.DID]), e.recordPaths(a.DID); !slices.Equal(got, want) {
			t.Fatalf("%s: archived %d paths, world has %d", a.DID, len(got), len(want))
		}
		for _, ev := range rows[a.DID] {
			if ev.Rev != a.Rev || ev.Source != archive.SourceBackfill {
				t.Fatalf("%s: row at rev %s source %s, want %s backfill", a.DID, ev.Rev, ev.Source, a.Rev)
			}
		}
		st := e.state(a.DID)
		if st.Status != archive.StatusComplete || st.BackfillRev != a.Rev || st.Records != uint64(a.Records) || !st.Active {
			t.Fatalf("%s: state %+v", a.DID, st)
		}
		pds, _ := url.Parse(e.net.HostURLs()[a.Host])
		if st.Host != pds.Host || st.Host == relay.Host {
			t.Fatalf("%s: host %q, want the PDS %q (relay %q)", a.DID, st.Host, pds.Host, relay.Host)
		}
	}
	if got := counter(t, e.reg, "backstream_backfill_records_total", nil); got != float64(total) {
		t.Fatalf("records_total = %v, want %d", got, total)
	}
	if got := counter(t, e.reg, "backstream_backfill_repos_total", map[string]string{"result": "complete"}); got != 3 {
		t.Fatalf("repos_total{complete} = %v", got)
	}
	e.scratchEmpty()
}

// TestJobTerminalClassifications (E11): RepoNotFound → complete with no
// rows; deactivated / takendown / suspended → unavailable, inactive.
func TestJobTerminalClassifications(t *testing.T) {
	e := newEnv(t, smallWorld(10, 10))
	r := e.runner(nil)
	byStatus := map[string]string{}
	for _, a := range e.accounts() { // worlds of ≥ 8 accounts hold one of each
		byStatus[a.Status] = a.DID
	}
	cases := []struct {
		did     string
		status  archive.RepoStatus
		class   string
		notFoun bool
	}{
		{byStatus[world.StatusDeactivated], archive.StatusUnavailable, backfill.ClassDeactivated, false},
		{byStatus[world.StatusTakendown], archive.StatusUnavailable, backfill.ClassTakendown, false},
		{byStatus[world.StatusSuspended], archive.StatusUnavailable, backfill.ClassSuspended, false},
		{byStatus[world.StatusDeleted], archive.StatusComplete, "", true},
		{"did:plc:unknownunknownunknown234", archive.StatusComplete, "", true},
	}
	for _, c := range cases {
		res := e.run(r, c.did)
		st := e.state(c.did)
		if res.Status != c.status || res.NotFound != c.notFoun || st.Status != c.status {
			t.Fatalf("%s: result %v notFound=%v, stored %v; want %v", c.did, res.Status, res.NotFound, st.Status, c.status)
		}
		if c.status == archive.StatusUnavailable && (st.Active || st.AccountStatus != c.class || st.ErrClass != c.class) {
			t.Fatalf("%s: unavailable state %+v, want inactive %s", c.did, st, c.class)
		}
		if res.Attempts != 1 {
			t.Fatalf("%s: %d attempts, want 1 (terminal answers are not retried)", c.did, res.Attempts)
		}
	}
	if rows := e.rows(); len(rows) != 0 {
		t.Fatalf("terminal answers archived rows: %v", len(rows))
	}
	if got := counter(t, e.reg, "backstream_backfill_repos_total", map[string]string{"result": "unavailable"}); got != 3 {
		t.Fatalf("repos_total{unavailable} = %v", got)
	}
	if got := counter(t, e.reg, "backstream_backfill_repos_total", map[string]string{"result": "not_found"}); got != 2 {
		t.Fatalf("repos_total{not_found} = %v", got)
	}
	e.scratchEmpty()
}

// TestJobHostileCARsEmitNothing (E6, E7): every hostile CAR shape fails the
// repo with its class and leaves zero rows and no scratch file.
func TestJobHostileCARsEmitNothing(t *testing.T) {
	e := newEnv(t, smallWorld(16, 20))
	r := e.runner(nil)
	accts := e.activeAccounts(4)
	f := e.net.Faults()
	cases := []struct {
		name     string
		arm      func(did string)
		class    string
		attempts int
	}{
		{"truncated", func(d string) { f.TruncateCAR(d, oracle.Always) }, backfill.ClassIncompleteCAR, 4},
		{"truncated_at_block", func(d string) { f.TruncateCARAtBlock(d, oracle.Always) }, backfill.ClassIncompleteCAR, 4},
		{"missing_block", func(d string) { f.DropBlock(d, oracle.Always) }, backfill.ClassIncompleteCAR, 4},
		{"bad_cid", func(d string) { f.CorruptBlock(d, oracle.Always) }, backfill.ClassInvalidCAR, 4},
		{"invalid_rev", func(d string) { f.InvalidRev(d, oracle.Always) }, backfill.ClassBadCommit, 1},
		{"other_did", func(d string) { f.CommitForOtherDID(d, oracle.Always) }, backfill.ClassWrongDID, 1},
	}
	if len(accts) < len(cases) {
		t.Fatalf("world has %d active accounts with records, need %d", len(accts), len(cases))
	}
	for i, c := range cases {
		did := accts[i].DID
		c.arm(did)
		res := e.run(r, did)
		st := e.state(did)
		if res.Status != archive.StatusFailed || st.Status != archive.StatusFailed || st.ErrClass != c.class || res.Attempts != c.attempts {
			t.Fatalf("%s: result %v class %q attempts %d (stored %v %q); want failed %q after %d attempts",
				c.name, res.Status, res.Class, res.Attempts, st.Status, st.ErrClass, c.class, c.attempts)
		}
		if st.Attempts != 1 || st.NextAttemptUS <= e.clock.Now().UnixMicro() || st.LastError == "" {
			t.Fatalf("%s: failed state %+v lacks failures/next attempt/message", c.name, st)
		}
	}
	if rows := e.rows(); len(rows) != 0 {
		t.Fatalf("hostile CARs archived rows for %d accounts", len(rows))
	}
	for _, k := range []oracle.FaultKind{oracle.FaultTruncateCAR, oracle.FaultTruncateCARAtBlock, oracle.FaultDropBlock,
		oracle.FaultCorruptBlock, oracle.FaultInvalidRev, oracle.FaultCommitForOtherDID} {
		if f.Fired(k) == 0 {
			t.Fatalf("fault %s never fired", k)
		}
	}
	e.scratchEmpty()
}

// attemptClock wraps a source and notes the fake time of every getRepo.
type attemptClock struct {
	upstream.RepoSource
	clock *fakeClock
	mu    sync.Mutex
	at    []time.Time
}

func (a *attemptClock) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	a.mu.Lock()
	a.at = append(a.at, a.clock.Now())
	a.mu.Unlock()
	return a.RepoSource.GetRepo(ctx, did)
}

func (a *attemptClock) gaps() []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Duration
	for i := 1; i < len(a.at); i++ {
		out = append(out, a.at[i].Sub(a.at[i-1]))
	}
	return out
}

// TestJobTransientRetries (E9): scripted 503s get 3 retries with
// exponential jittered waits; the fourth failure fails the repo.
func TestJobTransientRetries(t *testing.T) {
	e := newEnv(t, smallWorld(10, 10))
	accts := e.activeAccounts(1)
	f := e.net.Faults()
	for _, tc := range []struct {
		fails  int
		status archive.RepoStatus
	}{{3, archive.StatusComplete}, {4, archive.StatusFailed}} {
		did := accts[tc.fails].DID
		f.FailGetRepo(did, http.StatusServiceUnavailable, tc.fails)
		src := &attemptClock{RepoSource: e.client, clock: e.clock}
		r := e.runner(func(o *backfill.Options) {
			o.Source = src
			o.Rand = func() float64 { return 0.5 } // mid-range: the nominal waits
		})
		res := e.run(r, did)
		if res.Status != tc.status {
			t.Fatalf("%d×503: %v (%s), want %v", tc.fails, res.Status, res.Class, tc.status)
		}
		want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}
		if got := src.gaps(); !slices.Equal(got, want) {
			t.Fatalf("%d×503: attempt gaps %v, want %v", tc.fails, got, want)
		}
		if tc.status == archive.StatusFailed && (res.Class != backfill.ClassTransient || res.Attempts != 4) {
			t.Fatalf("failed with %q after %d attempts, want transient after 4", res.Class, res.Attempts)
		}
	}
}

// TestBackoffSchedule (E9): the runner's default ordinary backoff is
// exponential from 1 s, capped at 30 s, each wait jittered within ±25 % by
// its Rand and never above the cap: 8×503 with 8 retries, at both ends of
// the jitter range.
func TestBackoffSchedule(t *testing.T) {
	e := newEnv(t, smallWorld(10, 10))
	accts := e.activeAccounts(1)
	nominal := []time.Duration{1, 2, 4, 8, 16, 30, 30, 30}
	for i, u := range []float64{0, 1} {
		did := accts[i].DID
		e.net.Faults().FailGetRepo(did, http.StatusServiceUnavailable, len(nominal))
		src := &attemptClock{RepoSource: e.client, clock: e.clock}
		r := e.runner(func(o *backfill.Options) {
			o.Source, o.Retries = src, len(nominal)
			o.Rand = func() float64 { return u }
		})
		if res := e.run(r, did); res.Status != archive.StatusComplete {
			t.Fatalf("u=%v: %v (%s)", u, res.Status, res.Class)
		}
		var want []time.Duration
		for _, d := range nominal {
			want = append(want, min(time.Duration(float64(d*time.Second)*(0.75+0.5*u)), backfill.DefaultBackoffMax))
		}
		if got := src.gaps(); !slices.Equal(got, want) {
			t.Fatalf("u=%v: attempt gaps %v, want %v", u, got, want)
		}
	}
}

// TestDefaultNextAttempt: without Options.NextAttempt a failed repo's next
// attempt is 5 min after its first failure, jittered by the same rule with
// the job's Rand.
func TestDefaultNextAttempt(t *testing.T) {
	e := newEnv(t, smallWorld(10, 10))
	accts := e.activeAccounts(1)
	for i, c := range []struct {
		u    float64
		want time.Duration
	}{{0, 225 * time.Second}, {1, 375 * time.Second}} {
		did := accts[i].DID
		e.net.Faults().FailGetRepo(did, http.StatusServiceUnavailable, backfill.DefaultRetries+1)
		r := e.runner(func(o *backfill.Options) { o.Rand = func() float64 { return c.u } })
		if res := e.run(r, did); res.Status != archive.StatusFailed {
			t.Fatalf("u=%v: %v, want failed", c.u, res.Status)
		}
		st := e.state(did)
		if got := time.Duration(st.NextAttemptUS-e.clock.Now().UnixMicro()) * time.Microsecond; st.Attempts != 1 || got != c.want {
			t.Fatalf("u=%v: next attempt in %v after %d failures, want %v after 1", c.u, got, st.Attempts, c.want)
		}
	}
}

// TestJobRateLimitBudget (E10): 429s use their own budget of 20 and the
// server's wait (bounded by a ceiling); they never consume the ordinary
// budget, so 5×429 then 3×503 still completes.
func TestJobRateLimitBudget(t *testing.T) {
	e := newEnv(t, smallWorld(10, 10))
	accts := e.activeAccounts(1)
	f := e.net.Faults()

	did := accts[0].DID
	f.FailGetRepo(did, http.StatusTooManyRequests, 5)
	f.FailGetRepo(did, http.StatusServiceUnavailable, 3)
	r := e.runner(nil) // Rand 0.5: the nominal ordinary waits
	res := e.run(r, did)
	if res.Status != archive.StatusComplete || res.Attempts != 9 {
		t.Fatalf("5×429+3×503: %v after %d attempts (%s), want complete after 9", res.Status, res.Attempts, res.Class)
	}
	sl := e.clock.Sleeps()
	for i := 0; i < 5; i++ {
		if sl[i] < 500*time.Millisecond || sl[i] > 2*time.Second {
			t.Fatalf("429 wait %d = %v, want the server's Retry-After (~1 s)", i, sl[i])
		}
	}
	if got, want := sl[5:], []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}; !slices.Equal(got, want) {
		t.Fatalf("ordinary waits after the 429s = %v, want %v (a fresh budget)", got, want)
	}

	did = accts[1].DID
	f.FailGetRepo(did, http.StatusTooManyRequests, 21)
	res = e.run(r, did)
	if res.Status != archive.StatusFailed || res.Class != backfill.ClassRateLimited || res.Attempts != 21 {
		t.Fatalf("21×429: %v %q after %d attempts, want failed rate_limited after 21", res.Status, res.Class, res.Attempts)
	}

	// A server-directed wait beyond the ceiling is bounded by it.
	did = accts[2].DID
	acct, _ := e.net.World().Account(did)
	f.RateLimitHost(acct.Host, 2, time.Hour)
	e.clock.mu.Lock()
	e.clock.sleeps = nil
	e.clock.mu.Unlock()
	r = e.runner(func(o *backfill.Options) { o.RateLimitCeiling = 10 * time.Second })
	res = e.run(r, did)
	if got := e.clock.Sleeps(); res.Status != archive.StatusComplete || !slices.Equal(got, []time.Duration{10 * time.Second, 10 * time.Second}) {
		t.Fatalf("1 h reset: %v, waits %v; want complete after two 10 s (ceiling) waits", res.Status, got)
	}
}

// slowWriter delays every Submit, to show store writes are outside the
// attempt deadline.
type slowWriter struct {
	backfill.Writer
	delay time.Duration
}

func (s slowWriter) Submit(ctx context.Context, u *archive.Unit) error {
	time.Sleep(s.delay)
	return s.Writer.Submit(ctx, u)
}

// TestJobDeadline (E8): a hung body fails its repo at the attempt deadline,
// without retry, while siblings complete and become durable meanwhile; the
// deadline does not cover store writes.
func TestJobDeadline(t *testing.T) {
	e := newEnv(t, smallWorld(12, 10))
	accts := e.activeAccounts(1)
	hung := accts[0].DID
	e.net.Faults().HangBody(hung, oracle.Always)
	r := e.runner(func(o *backfill.Options) { o.AttemptTimeout = 1500 * time.Millisecond })
	var wg sync.WaitGroup
	var hungRes backfill.Result
	var siblingsDone atomic.Int64
	var hungAt atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		res, err := r.Run(context.Background(), backfill.Request{DID: hung})
		if err != nil {
			t.Errorf("hung: %v", err)
		}
		hungRes = res
		hungAt.Store(siblingsDone.Load())
	}()
	for _, a := range accts[1:5] {
		if res := e.run(r, a.DID); res.Status != archive.StatusComplete {
			t.Fatalf("sibling %s: %v", a.DID, res.Status)
		}
		if st := e.state(a.DID); st.Status != archive.StatusComplete {
			t.Fatalf("sibling %s not durably complete while a repo hangs", a.DID)
		}
		siblingsDone.Add(1)
	}
	wg.Wait()
	if hungAt.Load() != 4 {
		t.Fatalf("the hung repo finished after %d of 4 siblings, want after all of them", hungAt.Load())
	}
	if hungRes.Status != archive.StatusFailed || hungRes.Class != backfill.ClassTimeout || hungRes.Attempts != 1 {
		t.Fatalf("hung repo: %v %q after %d attempts, want failed timeout after 1", hungRes.Status, hungRes.Class, hungRes.Attempts)
	}
	if rows := e.rows(); len(rows[hung]) != 0 {
		t.Fatalf("hung repo archived %d rows", len(rows[hung]))
	}
	e.scratchEmpty()

	// Writes slower than the deadline still complete: they are outside it.
	slow := e.runner(func(o *backfill.Options) {
		o.AttemptTimeout = 300 * time.Millisecond
		o.Writer = slowWriter{Writer: e.w, delay: 600 * time.Millisecond}
	})
	if res := e.run(slow, accts[6].DID); res.Status != archive.StatusComplete {
		t.Fatalf("slow writer: %v %q, want complete (store writes are outside the deadline)", res.Status, res.Class)
	}
}

// TestJobRecordDrops (R1): records with an invalid NSID, rkey or path are
// dropped alone and counted by reason once durable; siblings are archived.
func TestJobRecordDrops(t *testing.T) {
	e := newEnv(t, smallWorld(10, 15))
	a := e.activeAccounts(3)[0]
	e.net.Faults().InvalidRecordPaths(a.DID, oracle.Always)
	res := e.run(e.runner(nil), a.DID)
	if res.Status != archive.StatusComplete {
		t.Fatalf("status %v %q", res.Status, res.Class)
	}
	if got, want := rowPaths(e.rows()[a.DID]), e.recordPaths(a.DID); !slices.Equal(got, want) {
		t.Fatalf("archived %d rows, want the %d valid siblings", len(got), len(want))
	}
	for _, p := range rowPaths(e.rows()[a.DID]) {
		for _, bad := range oracle.InvalidRecordPathKeys() {
			if p == bad {
				t.Fatalf("invalid path %q archived", p)
			}
		}
	}
	want := map[string]float64{"invalid_collection": 1, "invalid_rkey": 2, "invalid_path": 1, "too_large": 0, "bad_cbor": 0}
	for reason, n := range want {
		if got := counter(t, e.reg, "backstream_backfill_dropped_records_total", map[string]string{"reason": reason}); got != n {
			t.Fatalf("dropped{%s} = %v, want %v", reason, got, n)
		}
	}
}

// chunkWriter records unit sizes and the rows submitted but not yet
// durable. With a delay it hands units to the real writer late (in order),
// so a job that did not bound its chunks in flight would pile them up.
type chunkWriter struct {
	*archive.Writer
	delay     time.Duration
	stopAfter int // close the real writer right after this many units (0: never)

	mu        sync.Mutex
	sizes     []int
	submitted int
	maxOut    int
	queue     chan *archive.Unit
	once      sync.Once
}

func (c *chunkWriter) Submit(ctx context.Context, u *archive.Unit) error {
	c.mu.Lock()
	c.sizes = append(c.sizes, len(u.Events))
	c.submitted += len(u.Events)
	c.maxOut = max(c.maxOut, c.submitted-int(c.Writer.Live().Tip()))
	n := len(c.sizes)
	c.mu.Unlock()
	if c.stopAfter > 0 && n > c.stopAfter {
		return archive.ErrClosed
	}
	if c.delay > 0 {
		c.once.Do(func() {
			c.queue = make(chan *archive.Unit, 1024)
			go func() {
				for u := range c.queue {
					time.Sleep(c.delay)
					_ = c.Writer.Submit(context.Background(), u)
				}
			}()
		})
		c.queue <- u
		return nil
	}
	if err := c.Writer.Submit(ctx, u); err != nil {
		return err
	}
	if c.stopAfter > 0 && n == c.stopAfter {
		_ = c.Writer.Close() // a crash right after this chunk was queued
	}
	return nil
}

// TestJobChunks (R3): emission is at most 1024 rows per unit and at most
// ChunksInFlight units outstanding, so a big repo is never queued whole.
func TestJobChunks(t *testing.T) {
	e := newEnv(t, bigWorld())
	big := e.activeAccounts(1)[0]
	for _, a := range e.activeAccounts(1) {
		if a.Records > big.Records {
			big = a
		}
	}
	if big.Records < 2100 {
		t.Fatalf("largest repo has %d records, want > 2100", big.Records)
	}
	cw := &chunkWriter{Writer: e.w, delay: 50 * time.Millisecond}
	res := e.run(e.runner(func(o *backfill.Options) { o.Writer = cw; o.ChunksInFlight = 2 }), big.DID)
	if res.Status != archive.StatusComplete || res.Records != big.Records {
		t.Fatalf("big repo: %v, %d records", res.Status, res.Records)
	}
	want := (big.Records + 1023) / 1024
	if len(cw.sizes) != want {
		t.Fatalf("%d units for %d records, want %d", len(cw.sizes), big.Records, want)
	}
	for i, n := range cw.sizes {
		if n > 1024 || (i < len(cw.sizes)-1 && n != 1024) {
			t.Fatalf("unit sizes %v", cw.sizes)
		}
	}
	if cw.maxOut > 2*1024 {
		t.Fatalf("%d rows outstanding at once, want ≤ 2 chunks", cw.maxOut)
	}
	if got := len(e.rows()[big.DID]); got != big.Records {
		t.Fatalf("%d rows archived, want %d", got, big.Records)
	}
}

// TestJobCrashBetweenChunks (R4): a writer stopped after the second chunk
// leaves rows but no completion; after reopening, the repo is not complete.
func TestJobCrashBetweenChunks(t *testing.T) {
	e := newEnv(t, bigWorld())
	big := e.activeAccounts(2100)[0]
	// The repo is known (not_started) before its first row, as bootstrap does.
	if _, err := e.w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: big.DID,
		Fields: archive.FieldStatus | archive.FieldActive, State: archive.RepoState{Status: archive.StatusNotStarted, Active: true}}}}); err != nil {
		t.Fatal(err)
	}
	cw := &chunkWriter{Writer: e.w, stopAfter: 2}
	_, err := e.runner(func(o *backfill.Options) { o.Writer = cw }).Run(context.Background(), backfill.Request{DID: big.DID})
	if err == nil || !errors.Is(err, archive.ErrClosed) {
		t.Fatalf("run with a writer stopped mid-repo: err %v, want the writer's stop", err)
	}
	e.reopen()
	if got := len(e.rows()[big.DID]); got != 2048 {
		t.Fatalf("%d rows durable, want the two chunks queued before the stop (2048)", got)
	}
	if st := e.state(big.DID); st.Status != archive.StatusNotStarted || st.BackfillRev != "" {
		t.Fatalf("state after a crash between chunks: %+v, want not_started without a rev", st)
	}
	// A complete run afterwards carries its completion in the last chunk.
	cw = &chunkWriter{Writer: e.w}
	if res := e.run(e.runner(func(o *backfill.Options) { o.Writer = cw }), big.DID); res.Status != archive.StatusComplete {
		t.Fatalf("rerun: %v", res.Status)
	}
	if st := e.state(big.DID); st.Status != archive.StatusComplete {
		t.Fatalf("rerun: stored %v", st.Status)
	}
}

// TestJobMemoryBudget (E5): a CAR larger than the whole budget is admitted
// alone, verified from its scratch file within the budget, and completes;
// scratch is empty afterwards.
func TestJobMemoryBudget(t *testing.T) {
	e := newEnv(t, smallWorld(10, 200))
	accts := e.activeAccounts(50)
	const budget = 48 << 10 // below any of these CARs in memory, enough from their files
	mem := backfill.NewMemory(budget, nil)
	r := e.runner(func(o *backfill.Options) { o.Memory = mem })
	var wg sync.WaitGroup
	for _, a := range accts[:4] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.Run(context.Background(), backfill.Request{DID: a.DID})
			if err != nil || res.Status != archive.StatusComplete {
				t.Errorf("%s: %v %v", a.DID, res.Status, err)
			}
		}()
	}
	wg.Wait()
	if mem.Peak() != budget || mem.Held() != 0 {
		t.Fatalf("peak %d held %d, want each oversized CAR alone at the whole budget (%d) and nothing held after", mem.Peak(), mem.Held(), budget)
	}
	e.scratchEmpty()
}

// TestMemoryFIFO (E5): an oversized request waits for the budget to drain,
// takes all of it, and requests behind it wait their turn (no starvation).
// On the fake clock of a bubble, synctest.Wait returns once every other
// goroutine is blocked, so "queued", "not admitted" and "admitted" below
// are facts, not the state after a guessed delay.
func TestMemoryFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := backfill.NewMemory(100, nil)
		ctx := context.Background()
		small, _ := m.Acquire(ctx, 60)
		got := make(chan string, 2)
		bigDone := make(chan struct{})
		go func() {
			rel, _ := m.Acquire(ctx, 1000) // oversized: takes all 100
			got <- "big"
			<-bigDone
			rel()
		}()
		synctest.Wait() // the big request is queued
		go func() {
			rel, _ := m.Acquire(ctx, 30) // would fit beside the 60, but queues behind the big one
			got <- "later"
			rel()
		}()
		synctest.Wait() // both wait
		if len(got) != 0 {
			t.Fatalf("%q admitted while 60 of 100 bytes are held and a big request waits", <-got)
		}
		small()
		synctest.Wait()
		if v := <-got; v != "big" || len(got) != 0 || m.Held() != 100 {
			t.Fatalf("after the 60 bytes left: %q admitted (%d more), %d held; want the big one alone at 100", v, len(got), m.Held())
		}
		close(bigDone)
		synctest.Wait()
		if v := <-got; v != "later" || m.Held() != 0 {
			t.Fatalf("after the big one left: %q admitted, %d held", v, m.Held())
		}
		if m.Peak() != 100 {
			t.Fatalf("peak %d", m.Peak())
		}
	})
}

// TestJobReplace: a replacement opens with a sync row, its rows
// are SourceRetry, and it is refused whole over newer archived data.
func TestJobReplace(t *testing.T) {
	e := newEnv(t, smallWorld(10, 20))
	accts := e.activeAccounts(2)
	r := e.runner(nil)
	ctx := context.Background()
	res, err := r.Run(ctx, backfill.Request{DID: accts[0].DID, Replace: true})
	if err != nil || res.Status != archive.StatusComplete {
		t.Fatalf("replace: %v %v", res.Status, err)
	}
	rows := e.rows()[accts[0].DID]
	if len(rows) != accts[0].Records+1 || rows[0].Kind != archive.KindSync || rows[0].Rev != accts[0].Rev {
		t.Fatalf("replacement rows: %d, first %v", len(rows), rows[0].Kind)
	}
	for _, ev := range rows {
		if ev.Source != archive.SourceRetry {
			t.Fatalf("replacement row source %v", ev.Source)
		}
	}
	// Newer data already archived: the replacement is refused whole.
	did := accts[1].DID
	if _, err := e.w.Apply(ctx, &archive.Unit{Events: []archive.Event{{Kind: archive.KindSync, DID: did,
		Rev: "zzzzzzzzzzzzz", Source: archive.SourceLive}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(ctx, backfill.Request{DID: did, Replace: true}); !errors.Is(err, backfill.ErrStale) {
		t.Fatalf("replacement over newer data: %v, want ErrStale", err)
	}
	// The live #sync moved the ratchet without a row of its own.
	if n := len(e.rows()[did]); n != 0 {
		t.Fatalf("refused replacement left %d rows, want none", n)
	}
}

// TestJobReplaceNotFound: a replacement of an account whose repo is gone
// (RepoNotFound for an account not shown active) archives its sync row and
// a delete for every record the archive holds, so a consumer that never
// sees sync rows (a Jetstream v1 client) folds the account to nothing.
func TestJobReplaceNotFound(t *testing.T) {
	e := newEnv(t, smallWorld(10, 20))
	a := e.activeAccounts(3)[0]
	r := e.runner(nil)
	e.run(r, a.DID)
	if _, err := e.net.World().SetStatus(a.DID, world.StatusDeleted); err != nil {
		t.Fatal(err)
	}
	res, err := r.Run(context.Background(), backfill.Request{DID: a.DID, Replace: true})
	if err != nil || res.Status != archive.StatusComplete || !res.NotFound {
		t.Fatalf("replacement of a gone repo: %v notFound=%v %v", res.Status, res.NotFound, err)
	}
	rows := e.rows()[a.DID][a.Records:]
	kinds := map[archive.Kind]int{}
	for _, ev := range rows {
		kinds[ev.Kind]++
	}
	if kinds[archive.KindSync] != 1 || kinds[archive.KindDelete] != a.Records || len(rows) != a.Records+1 || rows[0].Kind != archive.KindSync {
		t.Fatalf("replacement of a gone repo of %d records archived %v", a.Records, kinds)
	}
	f, _, err := check.Archive(e.store)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(f[a.DID]); n != 0 {
		t.Fatalf("the account folds to %d records, want none", n)
	}
}

// TestJobFailedLogBounded: a host serving a bad commit for each of its
// accounts fails their jobs every time they are tried (the retry runner tries again and
// again, over tens of millions of accounts). Each failure is counted in
// backstream_backfill_failed_total; the log gets one line per class per
// minute, standing for the failures since the last, never one per repo.
func TestJobFailedLogBounded(t *testing.T) {
	e := newEnv(t, smallWorld(16, 4))
	var lines logtest.Counter
	r := e.runner(func(o *backfill.Options) { o.Logger = lines.Logger() })
	var dids []string // a bad host fails each of its accounts
	for _, a := range e.activeAccounts(1) {
		e.net.Faults().InvalidRev(a.DID, oracle.Always)
		dids = append(dids, a.DID)
	}
	if len(dids) < 8 {
		t.Fatalf("%d active accounts in the world, want at least 8", len(dids))
	}
	const n = 1000
	for i := range n {
		if res := e.run(r, dids[i%len(dids)]); res.Status != archive.StatusFailed || res.Class != backfill.ClassBadCommit {
			t.Fatalf("result %v class %q; want failed %q", res.Status, res.Class, backfill.ClassBadCommit)
		}
	}
	if got := promtest.Value(t, e.reg, "backstream_backfill_failed_total", map[string]string{"class": backfill.ClassBadCommit}); got != n {
		t.Fatalf("backstream_backfill_failed_total{class=bad_commit} = %v, want %d", got, n)
	}
	if got := lines.Lines(); got != 1 {
		t.Fatalf("%d failed jobs within a minute wrote %d log lines at INFO or above, want 1", n, got)
	}
	_ = e.clock.Sleep(context.Background(), time.Minute)
	e.run(r, dids[0])
	if got := lines.Lines(); got != 2 {
		t.Fatalf("a failure a minute after the last line: %d log lines in all, want 2", got)
	}
}
