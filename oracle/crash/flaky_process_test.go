package crash_test

// TestFlakyRetryConverges is the retry runner's process-level end to end: the
// simulated network's "flaky" profile (about a tenth of the repos answer 503
// to their first five getRepo requests — more than bootstrap's four
// attempts — a quarter of the hosts limited to 100 getRepo/s with 429
// beyond, the firehose dropped every 1000 frames) under full traffic. The
// real binary bootstraps, leaves those repos failed, and after steady_state
// its retry runner brings every one of them to complete; fold(archive) =
// ground truth. It logs the time to convergence.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
)

// flakyBudget: bootstrap's attempts per repo (1 + 3 ordinary retries); the
// flaky profile fails the first flakyFailures.
const (
	bootstrapAttempts = 4
	flakyFailures     = 5
)

func TestFlakyRetryConverges(t *testing.T) {
	accounts, events := 400, 2000
	if testing.Short() {
		accounts, events = 200, 800
	}
	crash.Binary(t) // before the network starts: its traffic must not run out during the build
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: accounts, RecordsMean: 20, Hosts: 4, Seed: 7,
		Rate: 100, Events: events, Traffic: oracle.TrafficFull, Faults: oracle.ProfileFlaky})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()

	// The flaky repos, from the armed plan: "<did> getrepo_status 5".
	flaky := map[string]bool{}
	for _, line := range net.Faults().Pending() {
		f := strings.Fields(line)
		if len(f) == 3 && f[1] == string(oracle.FaultGetRepoStatus) && f[2] == "5" {
			flaky[f[0]] = true
		}
	}
	// Every flaky repo, also of accounts inactive now: full traffic may
	// reactivate them, and then they are fetched (S8) through the same 503s.
	var flakyDIDs []string
	activeAtStart := 0
	for _, a := range net.World().Accounts() {
		if flaky[a.DID] {
			flakyDIDs = append(flakyDIDs, a.DID)
			if a.Active {
				activeAtStart++
			}
		}
	}
	if activeAtStart == 0 {
		t.Fatal("the flaky profile armed no active repo")
	}

	h := crash.New(t, net, crash.Options{Args: []string{"--enumerate", "relay", "--backfill-workers", "32", "--capture-wait", "3s",
		"--retry-interval", "200ms", "--retry-max-delay", "1s", "--retry-scan-period", "300ms"}})
	start := time.Now()
	p := h.Start()
	// Until steady_state: the most repos failed at once, and the failed
	// count when steady state begins (the retry runner's starting work).
	var steadyAt time.Duration
	var maxFailed, failedAtSteady int64
	for steadyAt == 0 {
		if p.Exited() {
			t.Fatalf("serve exited: %v\n%s", p.Err(), p.Tail())
		}
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("no steady state:\n%s", p.Tail())
		}
		if st, ok := p.Status(); ok {
			maxFailed = max(maxFailed, st.Repos["failed"])
			if st.Phase == crash.PhaseSteady {
				steadyAt, failedAtSteady = time.Since(start), st.Repos["failed"]
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Converged: caught up with the relay (steady state, traffic over,
	// cursor/relay at the relay's last seq) and every flaky repo of an
	// account active now served in full by its PDS (the retry runner
	// fetched it).
	var converged time.Duration
	for converged == 0 {
		if p.Exited() {
			t.Fatalf("serve exited: %v\n%s", p.Err(), p.Tail())
		}
		waiting := 0
		for _, did := range flakyDIDs {
			if isActive(net, did) && net.RepoCounts(did).Complete == 0 {
				waiting++
			}
		}
		st, ok := p.Status()
		relay := net.Status()
		switch {
		case waiting == 0 && ok && st.Phase == crash.PhaseSteady && relay.Done && st.RelayCursor() == uint64(relay.Seq):
			converged = time.Since(start)
		case time.Since(start) > 3*time.Minute:
			t.Fatalf("no convergence after %v: %d flaky repos not served in full; status %+v, relay %+v\n%s", time.Since(start), waiting, st, relay, p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.WaitConverged(p, time.Minute) // the last replacements durable, a few retry passes run
	res := h.Finish(p)

	// Every flaky repo of an active account ended complete, after more
	// requests than bootstrap makes (the retry runner fetched it).
	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	retried := 0
	for _, did := range flakyDIDs {
		if !isActive(net, did) {
			continue // inactive or deleted now: not fetched while inactive
		}
		st, err := s.RepoState(did)
		if err != nil {
			t.Fatalf("%s: %v", did, err)
		}
		if st.Status != archive.StatusComplete {
			t.Fatalf("flaky %s ended %v (class %q, attempts %d)", did, st.Status, st.ErrClass, st.Attempts)
		}
		if n := net.RepoCounts(did).RelayRequests; n <= flakyFailures {
			t.Fatalf("flaky %s complete after only %d getRepo requests: its 503s did not all fire", did, n)
		}
		retried++
	}
	if fired := net.Faults().Fired(oracle.FaultGetRepoStatus); fired < int64(retried*flakyFailures) {
		t.Fatalf("%d scripted 503s fired for %d flaky repos", fired, retried)
	}
	// Bootstrap could not finish them: failed repos were waiting for the
	// retry runner when steady state began (or just before).
	if maxFailed == 0 {
		t.Fatalf("no repo was ever failed: the flaky repos did not fail bootstrap (%d attempts < %d failures)", bootstrapAttempts, flakyFailures)
	}
	t.Logf("flaky: %d repos scripted to fail %d times (%d active at start, %d active at the end); up to %d failed during bootstrap, %d failed at steady_state (after %v); converged after %v: every flaky repo of an active account complete (%d 503s fired), %d events, fold = ground truth for %d accounts",
		len(flakyDIDs), flakyFailures, activeAtStart, retried, maxFailed, failedAtSteady, steadyAt.Round(time.Millisecond),
		converged.Round(time.Millisecond), net.Faults().Fired(oracle.FaultGetRepoStatus), res.Events, res.Checked)
}

// isActive reports whether did's account is active in the world now.
func isActive(net *oracle.Network, did string) bool {
	for _, a := range net.World().Accounts() {
		if a.DID == did {
			return a.Active
		}
	}
	return false
}
