package retry_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
)

// heldAtHosts seeds per failed repos on each host, holds every getRepo
// body, runs the runner, and returns the requests held at each host once
// the number stopped moving.
func heldAtHosts(t *testing.T, hosts, per int, mod func(*retry.Config)) (perHost []int64, total int64, e *env) {
	e = newEnv(t, oracle.Config{Accounts: hosts * per * 5, RecordsMean: 3, Hosts: hosts, Seed: 21, Traffic: oracle.TrafficNone})
	var seeded []world.Account
	for h, accts := range e.activeByHost() {
		if len(accts) < per {
			t.Fatalf("host %d has %d active accounts, need %d", h, len(accts), per)
		}
		seeded = append(seeded, accts[:per]...)
	}
	for _, a := range seeded {
		e.net.Faults().HangBody(a.DID, oracle.Always)
	}
	e.seedFailed(seeded)
	r := e.runner(mod)
	stop := runBG(r)
	defer func() {
		if err := stop(); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	count := func() int64 {
		var s int64
		for i := range e.hosts {
			s += e.net.HostGetRepoRequests(i)
		}
		return s
	}
	eventually(t, 10*time.Second, "held requests", func() bool { return count() > 0 })
	// Let the pool settle: nothing finishes, so any free slot would fill.
	for prev := int64(-1); prev != count(); {
		prev = count()
		time.Sleep(300 * time.Millisecond)
	}
	for i := range e.hosts {
		perHost = append(perHost, e.net.HostGetRepoRequests(i))
	}
	if got := metric(t, e.reg, "backstream_retry_inflight", nil); int64(got) != count() {
		t.Errorf("backstream_retry_inflight = %v, want %d held", got, count())
	}
	return perHost, count(), e
}

// TestGlobalGate (S2): 6 hosts × 10 due repos, every body held: exactly 16
// getRepo requests are in flight, never more than 4 at one host.
func TestGlobalGate(t *testing.T) {
	perHost, total, _ := heldAtHosts(t, 6, 10, func(c *retry.Config) { c.Workers = 16; c.HostWorkers = 4 })
	if total != 16 {
		t.Fatalf("%d requests held at the hosts (%v), want exactly 16", total, perHost)
	}
	for i, n := range perHost {
		if n > 4 {
			t.Fatalf("host %d holds %d requests (%v), want at most 4", i, n, perHost)
		}
	}
}

// TestHostGate (S2): 2 hosts × 10 due repos with 16 workers: exactly 4 per
// host are in flight, the final host recorded on the repo being the key.
func TestHostGate(t *testing.T) {
	perHost, total, _ := heldAtHosts(t, 2, 10, func(c *retry.Config) { c.Workers = 16; c.HostWorkers = 4 })
	if total != 8 || perHost[0] != 4 || perHost[1] != 4 {
		t.Fatalf("held per host %v (total %d), want exactly 4 at each", perHost, total)
	}
}

// TestRateLimitParksOnlyThatHost (S4): host A answers 429, host B is slow
// but healthy. A is parked at its first 429s (no more requests than the 4
// already in flight), its repos are not counted as failures beyond the one
// attempt each that met the 429, and B keeps its 4 slots and finishes. The
// park is durable: a restarted runner still leaves A alone until the reset;
// after it, A's repos complete.
func TestRateLimitParksOnlyThatHost(t *testing.T) {
	e := newEnv(t, oracle.Config{Accounts: 60, RecordsMean: 3, Hosts: 2, Seed: 23, Traffic: oracle.TrafficNone})
	by := e.activeByHost()
	a, b := by[0][:12], by[1][:12]
	e.seedFailed(append(append([]world.Account{}, a...), b...))
	const reset = 3 * time.Second
	e.net.Faults().RateLimitHost(0, oracle.Always, reset)
	for _, acct := range b {
		e.net.Faults().SlowBody(acct.DID, 4000, oracle.Always)
	}
	start := time.Now()
	ps, err := e.runner(nil).RunOnce(context.Background())
	if err != nil {
		t.Fatalf("run once: %v", err)
	}
	took := time.Since(start)
	limited := e.net.Faults().Fired(oracle.FaultRateLimit)
	atA := e.net.HostGetRepoRequests(0)
	t.Logf("pass %+v in %v; A: %d requests, %d 429s; B max concurrency %d", ps, took, atA, limited, e.src.max(e.hosts[1]))
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
	parkedUntil := time.Time{}
	limitedDIDs := map[string]bool{}
	for _, acct := range a {
		st := e.state(acct.DID)
		if st.Status != archive.StatusFailed || st.Attempts != 1 {
			t.Fatalf("A repo %s: %v attempts %d; want still failed with its one earlier attempt (a park is not a failure)", acct.DID, st.Status, st.Attempts)
		}
		if st.ErrClass == "rate_limited" {
			limitedDIDs[acct.DID] = true
			next := time.UnixMicro(st.NextAttemptUS)
			if next.Before(start.Add(reset-time.Second)) || next.After(time.Now().Add(reset+time.Second)) {
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
	parkedUntil = time.UnixMicro(hs.ParkedUntilUS)
	if _, err := e.store.HostState(e.hosts[1]); !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("B has a host state: %v", err)
	}

	// Restart: the park survives through host/<A>; A's due repos are left
	// alone (and not failed) until the reset.
	e.reopen()
	r := e.runner(nil)
	ps, err = r.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("run once after restart: %v", err)
	}
	if time.Now().Before(parkedUntil) {
		if n := e.net.HostGetRepoRequests(0); n != atA {
			t.Fatalf("restarted runner sent %d requests to the parked host", n-atA)
		}
		if ps.Parked != len(a)-len(limitedDIDs) {
			t.Fatalf("restart pass %+v: want the %d due A repos deferred as parked", ps, len(a)-len(limitedDIDs))
		}
		if got := metric(t, e.reg, "backstream_retry_deferred_total", map[string]string{"reason": "parked"}); int(got) != ps.Parked {
			t.Fatalf("deferred{parked} = %v", got)
		}
	} else {
		t.Fatalf("the restart took longer than the park (%v); raise reset", reset)
	}
	for _, acct := range a {
		if st := e.state(acct.DID); st.Attempts != 1 {
			t.Fatalf("deferred repo %s now has %d attempts", acct.DID, st.Attempts)
		}
	}

	// After the reset, everything of A completes.
	e.net.Faults().RateLimitHost(0, 0, 0)
	time.Sleep(time.Until(parkedUntil) + 10*time.Millisecond)
	ps, err = r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, acct := range a {
		if st := e.state(acct.DID); st.Status != archive.StatusComplete || st.Attempts != 0 || st.ErrClass != "" || st.NextAttemptUS != 0 {
			t.Fatalf("A repo %s after the reset: %+v", acct.DID, st)
		}
	}
}
