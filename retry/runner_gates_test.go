package retry_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
)

// heldAtHosts seeds per failed repos on each host, holds every job and
// runs the runner in a bubble. It returns the jobs in flight at each host
// twice: once the run has settled (20 scan periods passed, every slot that
// could fill has filled), and settled again after one job at the first host
// was released, when exactly one more job must have started in its place.
func heldAtHosts(t *testing.T, hosts, per int, mod func(*retry.Config)) (settled [2][]int) {
	synctest.Test(t, func(t *testing.T) {
		e := newBubbleEnv(t, hosts, per)
		stop := runBG(e.runner(mod))
		defer func() {
			if err := stop(); err != nil {
				t.Errorf("run: %v", err)
			}
		}()
		started := 0
		for i := range settled {
			if i > 0 {
				e.jobs.release["host0"] <- struct{}{}
			}
			settle(time.Second)
			byHost, total := e.jobs.running()
			for h := range hosts {
				settled[i] = append(settled[i], byHost[fmt.Sprintf("host%d", h)])
			}
			if got := metric(t, e.reg, "backstream_retry_inflight", nil); int(got) != total {
				t.Errorf("backstream_retry_inflight = %v, want the %d held", got, total)
			}
			before := started
			started = e.jobs.startedTotal()
			if i > 0 && started != before+1 {
				t.Errorf("one job released: %d jobs started in all (was %d), want one more", started, before)
			}
		}
	})
	return settled
}

func sum(ns []int) (s int) {
	for _, n := range ns {
		s += n
	}
	return s
}

// TestGlobalGate (S2): 6 hosts × 10 due repos, every job held: exactly 16
// jobs are in flight, never more than 4 at one host; one finishing lets
// exactly one more in.
func TestGlobalGate(t *testing.T) {
	for _, perHost := range heldAtHosts(t, 6, 10, func(c *retry.Config) { c.Workers = 16; c.HostWorkers = 4 }) {
		if sum(perHost) != 16 || slices.Max(perHost) > 4 {
			t.Fatalf("jobs in flight per host %v, want exactly 16 in all and at most 4 at one host", perHost)
		}
	}
}

// TestHostGate (S2): 2 hosts × 10 due repos with 16 workers: exactly 4 per
// host are in flight, the host recorded on the repo being the key.
func TestHostGate(t *testing.T) {
	for _, perHost := range heldAtHosts(t, 2, 10, func(c *retry.Config) { c.Workers = 16; c.HostWorkers = 4 }) {
		if !slices.Equal(perHost, []int{4, 4}) {
			t.Fatalf("jobs in flight per host %v, want exactly 4 at each", perHost)
		}
	}
}

// TestRateLimitParksOnlyThatHost (S4): host A answers 429, host B is slow
// but healthy. A is parked at its first 429s (no more requests than the 4
// already in flight), its repos are not counted as failures beyond the one
// attempt each that met the 429, and B keeps its 4 slots and finishes. The
// park is durable: a restarted runner still leaves A alone until the reset;
// after it, A's repos complete. The runner and its jobs run on a clock the
// test moves, so "before the reset" and "after it" are set, not waited for.
func TestRateLimitParksOnlyThatHost(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 60, RecordsMean: 3, Hosts: 2, Seed: 23, Traffic: oracle.TrafficNone})
	clk := &setClock{now: time.Now()}
	e.jobs = e.newJobs(func(o *backfill.Options) { o.Now = clk.Now })
	onClock := func(c *retry.Config) { c.Now = clk.Now }
	by := e.activeByHost()
	a, b := by[0][:12], by[1][:12]
	e.seedFailed(append(append([]world.Account{}, a...), b...))
	const reset = 3 * time.Second
	e.net.Faults().RateLimitHost(0, oracle.Always, reset)
	for _, acct := range b {
		e.net.Faults().SlowBody(acct.DID, 4000, oracle.Always)
	}
	start := clk.Now()
	ps, err := e.runner(onClock).RunOnce(context.Background())
	if err != nil {
		t.Fatalf("run once: %v", err)
	}
	limited := e.net.Faults().Fired(oracle.FaultRateLimit)
	atA := e.net.HostGetRepoRequests(0)
	t.Logf("pass %+v; A: %d requests, %d 429s; B max concurrency %d", ps, atA, limited, e.src.max(e.hosts[1]))
	if limited < 1 || limited > 4 || atA != limited {
		t.Fatalf("A got %d requests and %d 429s; want only the ≤4 in flight when the first 429 parked it", atA, limited)
	}
	if got := e.src.max(e.hosts[1]); got != 4 {
		t.Fatalf("B's max concurrency %d, want its full 4 slots while A is parked", got)
	}
	for _, acct := range b {
		if st := e.state(acct.DID); st.Status != archive.StatusComplete {
			t.Fatalf("B repo %s is %v, want complete", acct.DID, st.Status)
		}
	}
	if ps.Results[retry.ResultRateLimited] != int(limited) || ps.Results[retry.ResultComplete] != len(b) {
		t.Fatalf("results %v", ps.Results)
	}
	if got := metric(t, e.reg, "backstream_retry_parked_hosts", nil); got != 1 {
		t.Fatalf("parked_hosts = %v, want 1", got)
	}
	if got := metric(t, e.reg, "backstream_retry_attempts_total", map[string]string{"result": "rate_limited"}); got != float64(limited) {
		t.Fatalf("attempts_total{rate_limited} = %v", got)
	}
	if got := metric(t, e.reg, "backstream_retry_attempts_total", map[string]string{"result": "complete"}); got != float64(len(b)) {
		t.Fatalf("attempts_total{complete} = %v", got)
	}
	limitedDIDs := map[string]bool{}
	for _, acct := range a {
		st := e.state(acct.DID)
		if st.Status != archive.StatusFailed || st.Attempts != 1 {
			t.Fatalf("A repo %s: %v attempts %d; want still failed with its one earlier attempt (a park is not a failure)", acct.DID, st.Status, st.Attempts)
		}
		if st.ErrClass == "rate_limited" {
			limitedDIDs[acct.DID] = true
			// The server names the reset in whole seconds.
			if next := time.UnixMicro(st.NextAttemptUS); next.Before(start.Add(reset-time.Second)) || next.After(start.Add(reset+time.Second)) {
				t.Fatalf("429'd repo's next attempt %v, want the host's reset (~%v after %v)", next, reset, start)
			}
		} else if st.ErrClass != "seeded" {
			t.Fatalf("A repo %s has class %q", acct.DID, st.ErrClass)
		}
	}
	if len(limitedDIDs) != int(limited) {
		t.Fatalf("%d repos carry the 429, %d 429s fired", len(limitedDIDs), limited)
	}
	hs, err := e.store.HostState(e.hosts[0])
	if err != nil || hs.ParkedUntilUS < start.Add(reset-time.Second).UnixMicro() {
		t.Fatalf("host/%s = %+v (%v), want a durable park until the reset", e.hosts[0], hs, err)
	}
	parkedUntil := time.UnixMicro(hs.ParkedUntilUS)
	if _, err := e.store.HostState(e.hosts[1]); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("B has a host state: %v", err)
	}

	// Restart a moment before the reset: the park survives through
	// host/<A>; A's due repos are left alone (and not failed).
	e.reopen()
	e.jobs = e.newJobs(func(o *backfill.Options) { o.Now = clk.Now })
	clk.set(parkedUntil.Add(-time.Millisecond))
	r := e.runner(onClock)
	ps, err = r.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("run once after restart: %v", err)
	}
	if n := e.net.HostGetRepoRequests(0); n != atA {
		t.Fatalf("restarted runner sent %d requests to the parked host", n-atA)
	}
	if ps.Parked != len(a)-len(limitedDIDs) {
		t.Fatalf("restart pass %+v: want the %d due A repos deferred as parked", ps, len(a)-len(limitedDIDs))
	}
	if got := metric(t, e.reg, "backstream_retry_deferred_total", map[string]string{"reason": "parked"}); int(got) != ps.Parked {
		t.Fatalf("deferred{parked} = %v", got)
	}
	for _, acct := range a {
		if st := e.state(acct.DID); st.Attempts != 1 {
			t.Fatalf("deferred repo %s now has %d attempts", acct.DID, st.Attempts)
		}
	}

	// A running runner that loaded the park passes over A's repos until the
	// reset; at the reset its park ends and everything of A completes.
	e.net.Faults().RateLimitHost(0, 0, 0)
	passes := r.Status().Passes
	stop := runBG(r)
	eventually(t, 10*time.Second, "a pass while parked", func() bool { return r.Status().Passes > passes })
	clk.set(parkedUntil)
	r.Wake()
	eventually(t, 20*time.Second, "A's repos complete after the reset", func() bool {
		for _, acct := range a {
			if e.state(acct.DID).Status != archive.StatusComplete {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, acct := range a {
		if st := e.state(acct.DID); st.Attempts != 0 || st.ErrClass != "" || st.NextAttemptUS != 0 {
			t.Fatalf("A repo %s after the reset: %+v", acct.DID, st)
		}
	}
}

// setClock is a clock that moves only when the test sets it.
type setClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *setClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *setClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}
