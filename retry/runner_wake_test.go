package retry_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/retry"
)

// countedCompleter is a completer that counts the jobs it ran per DID.
type countedCompleter struct {
	completer
	mu      sync.Mutex
	started map[string]int
}

func (c *countedCompleter) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	c.mu.Lock()
	c.started[req.DID]++
	c.mu.Unlock()
	return c.completer.Run(ctx, req)
}

func (c *countedCompleter) jobs(did string) (of, total int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for d, n := range c.started {
		total += n
		if d == did {
			of = n
		}
	}
	return of, total
}

// passLog records the due/ keys each pass read (its "retry pass" debug
// line's scanned), in order.
type passLog struct {
	mu      sync.Mutex
	scanned []int64
}

func (l *passLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *passLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *passLog) WithGroup(string) slog.Handler            { return l }
func (l *passLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "retry pass" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "scanned" {
			l.mu.Lock()
			l.scanned = append(l.scanned, a.Value.Int64())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// passes returns the keys read by each pass so far.
func (l *passLog) passes() []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int64(nil), l.scanned...)
}

// TestWakeReadsOnlyNewDueRepos: host0 is parked with 300 repos due, so a
// pass leaves them behind. A Wake (every #sync or #account effect sends
// one, several a second) reads only what was written or came due since
// the last pass, not the parked host's 300 again; a repo marked due now
// is still fetched at once; and when the park ends, the next pass (on the
// park's timer) brings the parked repos in.
func TestWakeReadsOnlyNewDueRepos(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, 2, 300)
		jobs := &countedCompleter{completer: completer{e.w}, started: map[string]int{}}
		parkedUntil := time.Now().Add(time.Minute)
		if rc, err := e.w.Apply(context.Background(), &archive.Unit{Hosts: []archive.HostUpdate{{Host: "host0",
			Func: func(cur archive.HostState) archive.HostState {
				cur.ParkedUntilUS = parkedUntil.UnixMicro()
				return cur
			}}}}); err != nil || rc.Refused != nil {
			t.Fatalf("park: %v %v", err, rc.Refused)
		}
		log := &passLog{}
		r := e.runner(func(c *retry.Config) {
			c.ScanPeriod, c.Jobs = time.Hour, jobs
			c.Logger = slog.New(log)
		})
		stop := runBG(r)
		defer stop()
		synctest.Wait()
		if _, n := jobs.jobs(""); n != 300 {
			t.Fatalf("first pass: %d jobs, want host1's 300", n)
		}
		first := len(log.passes())

		r.Wake() // nothing new: the parked host's repos are not read again
		synctest.Wait()
		got := log.passes()
		if len(got) != first+1 || got[first] != 0 {
			t.Fatalf("keys read by each pass %v: want one more pass after the Wake, reading 0 keys (host0's 300 are parked)", got)
		}

		// A #sync marks a repo due now; another mark was stamped a second
		// before the last pass read, and made durable only now (a unit
		// that waited in the writer's queue). Both are fetched at once.
		marked := e.repo(1, 1000)
		late := e.repo(1, 1001)
		mark(t, e.w, marked, time.Now())
		mark(t, e.w, late, time.Now().Add(-time.Second))
		r.Wake()
		synctest.Wait()
		for _, did := range []string{marked, late} {
			if n, _ := jobs.jobs(did); n != 1 {
				t.Fatalf("a repo marked due (%s) then a Wake: %d jobs, want 1 at once", did, n)
			}
		}
		if got := log.passes(); got[len(got)-1] != 2 {
			t.Fatalf("keys read by each pass %v: want the Wake's pass to read the two marked repos", got)
		}

		time.Sleep(time.Until(parkedUntil) + time.Second) // the park's timer
		synctest.Wait()
		if _, n := jobs.jobs(""); n != 602 {
			t.Fatalf("after the park: %d jobs, want 602 (host0's 300 too)", n)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}

// mark marks did's repo (on host1) for a replacement due at at, as a
// #sync does.
func mark(t *testing.T, w *archive.Writer, did string, at time.Time) {
	t.Helper()
	rc, err := w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: did,
		Func: func(cur archive.RepoState, _ bool) (archive.RepoState, bool) {
			cur.Status, cur.Active, cur.Host = archive.StatusComplete, true, "host1"
			cur.Refetch, cur.NextAttemptUS = archive.RefetchSync, at.UnixMicro()
			return cur, true
		}}}})
	if err != nil || rc.Refused != nil {
		t.Fatalf("mark %s: %v %v", did, err, rc.Refused)
	}
}

// pendingIndexJobs answers ErrIndexPending (the record index is still
// being backfilled: a replacement is deferred) until ready is set, then
// runs as completer does; it counts the jobs asked.
type pendingIndexJobs struct {
	countedCompleter
	ready bool
}

func (p *pendingIndexJobs) Run(ctx context.Context, req backfill.Request) (backfill.Result, error) {
	p.mu.Lock()
	ready := p.ready
	p.mu.Unlock()
	if !ready {
		p.mu.Lock()
		p.started[req.DID]++
		p.mu.Unlock()
		return backfill.Result{}, archive.ErrIndexPending
	}
	return p.countedCompleter.Run(ctx, req)
}

// TestWakeAfterIndexPendingReadsDeferred: a replacement deferred because
// the record index is still being backfilled stays due at a time the last
// pass has already read past, so a Wake's pass (only what came due since)
// would leave it until the scan period: the marks an upgrade makes at
// Open waited there while the index backfill ran (and a stream from
// cursor 0 kept records their older replacements had dropped). The pass
// after such a deferral is a full one.
func TestWakeAfterIndexPendingReadsDeferred(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, 1, 1)
		did := e.repo(0, 0)
		jobs := &pendingIndexJobs{countedCompleter: countedCompleter{completer: completer{e.w}, started: map[string]int{}}}
		r := e.runner(func(c *retry.Config) { c.ScanPeriod, c.Jobs = time.Hour, jobs })
		stop := runBG(r)
		defer stop()
		synctest.Wait()
		if n, _ := jobs.jobs(did); n != 1 {
			t.Fatalf("first pass: %d jobs for %s, want 1 (deferred)", n, did)
		}
		jobs.mu.Lock()
		jobs.ready = true
		jobs.mu.Unlock()
		r.Wake()
		synctest.Wait()
		if n, _ := jobs.jobs(did); n != 2 {
			t.Fatalf("a replacement deferred for the record index, then a Wake: %d jobs, want 2 (asked again at once, not after the scan period)", n)
		}
		if err := stop(); err != nil {
			t.Fatal(err)
		}
	})
}
