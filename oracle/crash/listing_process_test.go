package crash_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
)

// TestServeHostileListingNoCrashLoop: the real binary against a relay whose
// every listRepos page after the first carries a 10 MiB cursor. It used to
// exit 1 at every start ("malformed response … cursor of 10485760 bytes"),
// archiving nothing. Now it reaches steady state, saying so once in its log
// for bootstrap and once for discovery, stops cleanly on SIGTERM, and a
// second start on the same data dir reaches steady state again.
func TestServeHostileListingNoCrashLoop(t *testing.T) {
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 1100, RecordsMean: 2, Hosts: 2, Seed: 3, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.Faults().HostileListRepos(oracle.FaultListReposHugeCursor, oracle.Always); err != nil {
		t.Fatal(err)
	}
	// serve pages 1,000 at a time: the second page is the hostile one.
	h := crash.New(t, n, crash.Options{Args: []string{"--enumerate", "relay", "--capture-wait", "100ms", "--backfill-workers", "32"}})
	for run := 1; run <= 2; run++ {
		start := time.Now()
		p := h.Start()
		st := h.WaitPhase(p, crash.PhaseSteady, time.Minute)
		if err := p.Stop(30 * time.Second); err != nil {
			t.Fatalf("run %d: %v\n%s", run, err, p.Tail())
		}
		t.Logf("run %d: steady state and a clean stop in %v", run, time.Since(start).Round(time.Millisecond))
		if run == 1 {
			b, err := os.ReadFile(p.Log)
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range []string{"bootstrap: the listing ends early", "discovery: a listRepos page cannot be used"} {
				if c := strings.Count(string(b), line); c != 1 {
					t.Errorf("run 1 logged %q %d times, want once", line, c)
				}
			}
			if st.Repos["complete"] == 0 {
				t.Fatalf("run 1 archived nothing: %+v", st.Repos)
			}
		}
	}
	if f := n.Faults().Fired(oracle.FaultListReposHugeCursor); f < 2 {
		t.Fatalf("the hostile page was served %d times", f)
	}
}
