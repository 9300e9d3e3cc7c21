package crash_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// TestFleetBootstrapSurvivesSIGKILL: the real binary bootstraps in hosts
// mode (every PDS lists and serves its own repos; the relay's index misses
// 5% of them) and is killed with SIGKILL three times mid-bootstrap. After
// each kill and over the final run, no repo complete before a kill is
// downloaded again (the PDS hosts count every getRepo, direct or
// redirected); the final run reaches merging with every host's listing
// checkpoint finished, every active account complete or pending, and the
// fold of the archive equal to the ground truth for every complete one.
func TestFleetBootstrapSurvivesSIGKILL(t *testing.T) {
	accounts, hosts := 1200, 4
	if testing.Short() {
		accounts = 300
	}
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: accounts, RecordsMean: 10, Hosts: hosts, Seed: 43,
		Traffic: oracle.TrafficNone, RelayIndexMissing: 0.05})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	for h := range hosts {
		n.Faults().SlowHost(h, 40*time.Millisecond) // long enough a bootstrap to land three kills in
	}
	h := crash.New(t, n, crash.Options{Args: []string{"--enumerate", "hosts", "--backfill-workers", "8", "--backfill-host-workers", "2",
		"--backfill-memory", "64MiB", "--capture-wait", "100ms"}})
	active := 0
	for _, a := range n.World().Accounts() {
		if a.Active {
			active++
		}
	}
	// Each kill lands right after the run's n-th repo completion (a crash
	// point inside the process, so however fast the run goes the kill is
	// mid-bootstrap: a poll of /status may see a short run only once it
	// is done). Each run leaves enough for the next: a kill turns the repos
	// dispatched but not complete into pending, for merge.
	for k := range 3 {
		n := active / 8
		l := h.KillRun(crash.AtPoint(fmt.Sprintf("%s:%d", crashpoint.RepoComplete, n)))
		if l.Store.Phase != crash.PhaseBootstrap {
			t.Fatalf("kill %d (after %d completions) did not land mid-bootstrap: phase %s", k+1, n, l.Store.Phase)
		}
	}
	h.KillRun(crash.AtPoint(crashpoint.MergingCommitted))
	h.CheckNoRedownload("over the final bootstrap run")

	s, err := crash.OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if phase, _ := s.Phase(); phase != archive.PhaseMerging {
		t.Fatalf("final phase %s", phase)
	}
	for _, u := range n.HostURLs() {
		host := strings.TrimPrefix(u, "http://")
		c, err := s.HostListCursor(host)
		if err != nil || !c.Finished {
			t.Fatalf("host %s: checkpoint %+v, %v; want finished", host, c, err)
		}
	}
	complete := map[string]bool{}
	pending, omitted := 0, 0
	for _, a := range n.World().Accounts() {
		if !a.Active {
			continue
		}
		if n.RelayIndexOmits(a.DID) {
			omitted++
		}
		st, err := s.RepoState(a.DID)
		switch {
		case err != nil:
			t.Fatalf("%s (relay index omits it: %v): %v", a.DID, n.RelayIndexOmits(a.DID), err)
		case st.Status == archive.StatusComplete:
			complete[a.DID] = true
		case st.Status == archive.StatusPending:
			pending++
		default:
			t.Fatalf("%s: %v", a.DID, st.Status)
		}
		if rc := n.RepoCounts(a.DID); rc.RelayRequests != 0 {
			t.Fatalf("%s: downloaded through the relay in hosts mode", a.DID)
		}
	}
	f, _, err := check.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, bad := check.Compare(f, n.World(), func(a world.Account) bool { return complete[a.DID] }); len(bad) > 0 {
		t.Fatalf("fold ≠ ground truth for %d accounts, first %v", len(bad), bad[0])
	}
	// Pending: in flight or recorded just ahead of dispatch at a kill (two
	// batches of 16 plus 8 jobs), per kill.
	if pending > 3*(2*16+8) {
		t.Fatalf("%d repos pending after three kills", pending)
	}
	t.Logf("%d active accounts (%d not in the relay's index): %d complete, %d pending (merge replaces them)", active, omitted, len(complete), pending)
}
