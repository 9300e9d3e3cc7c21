package crash_test

// TestServeBootstrapSurvivesSIGKILL: the real binary bootstraps a 2,000-
// account network with hostile-shaped faults, is killed with SIGKILL at three
// moments of bootstrap (each checked to be mid-bootstrap), restarted each
// time, and finally stopped by the merging-committed crash point, so the
// bootstrap's end state can be inspected before merging changes it.

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/internal/procenv"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

// outcome is what the test predicts for one account.
type outcome struct {
	status archive.RepoStatus
	class  string // failure / unavailability class
	active bool
}

// armFaults arms an explicit hostile-shaped plan (each shape on its own
// accounts) and returns the predicted terminal state of every listed account.
func armFaults(n *oracle.Network, perShape int) map[string]outcome {
	f := n.Faults()
	want := map[string]outcome{}
	var active []world.Account
	for _, a := range n.World().Accounts() {
		switch {
		case a.Status == world.StatusDeleted:
			// not listed: no state at all
		case !a.Active:
			want[a.DID] = outcome{status: archive.StatusNotStarted}
		default:
			want[a.DID] = outcome{status: archive.StatusComplete, active: true}
			active = append(active, a)
		}
	}
	type shape struct {
		arm    func(did string)
		status archive.RepoStatus
		class  string
	}
	shapes := []shape{
		{func(d string) { f.FailGetRepo(d, http.StatusServiceUnavailable, 2) }, archive.StatusComplete, ""},
		{func(d string) { f.FailGetRepo(d, http.StatusInternalServerError, 1) }, archive.StatusComplete, ""},
		{func(d string) { f.TruncateCAR(d, 1) }, archive.StatusComplete, ""},
		{func(d string) { f.TruncateCARAtBlock(d, 1) }, archive.StatusComplete, ""},
		{func(d string) { f.DropBlock(d, 1) }, archive.StatusComplete, ""},
		{func(d string) { f.CorruptBlock(d, 1) }, archive.StatusComplete, ""},
		{func(d string) { f.ResetMidBody(d, 1) }, archive.StatusComplete, ""},
		{func(d string) { f.HangBody(d, 1) }, archive.StatusFailed, backfill.ClassTimeout},
		{func(d string) { f.RedirectPrivate(d, 1) }, archive.StatusFailed, backfill.ClassForbidden},
		{func(d string) { f.CommitForOtherDID(d, oracle.Always) }, archive.StatusFailed, backfill.ClassWrongDID},
		{func(d string) { f.InvalidRev(d, oracle.Always) }, archive.StatusFailed, backfill.ClassBadCommit},
		{func(d string) { f.InvalidRecordPaths(d, oracle.Always) }, archive.StatusComplete, ""},
	}
	i := 7 // leave the first accounts unfaulted
	for _, s := range shapes {
		for k := 0; k < perShape; k++ {
			a := active[i]
			i += 3
			s.arm(a.DID)
			want[a.DID] = outcome{status: s.status, class: s.class, active: true}
		}
	}
	f.RateLimitHost(0, 20, time.Second)
	f.LongCursor(4096)
	return want
}

// TestServeBootstrapSurvivesSIGKILL ends with phase=merging and (a) every
// account in the state its fault predicts (or pending, if a kill interrupted
// it), (b) no repo complete before a kill downloaded again (R7, checked by
// the harness after each kill, while each run reports bootstrap, and over
// the whole final run), (c) archived rows per DID equal to the repo's
// records for every complete repo.
func TestServeBootstrapSurvivesSIGKILL(t *testing.T) {
	citest.Long(t, "process-level: builds the binary and runs a 2,000-account bootstrap four times")
	bin := crash.Binary(t)
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 2000, RecordsMean: 20, Hosts: 4, Seed: 42, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const deadline = 2 * time.Second
	want := armFaults(n, 6)
	// A floor under each run's pace: 6 workers at 25 ms a download finish
	// at most 240 repos a second, so the last kill's window (past three
	// quarters complete, before the bootstrap ends) lasts over a second
	// and a poll sees it through /status, which is rebuilt at most once a
	// second. Unslowed, a quiet machine once bootstrapped the last 1,000
	// repos in 0.7 s and the kill never landed.
	for host := range 4 {
		n.Faults().SlowDownloads(host, 25*time.Millisecond)
	}
	// The network sends no firehose traffic: do not wait for capture.
	h := crash.New(t, n, crash.Options{Args: []string{"--enumerate", "relay", "--backfill-workers", "6", "--getrepo-timeout", deadline.String(),
		"--backfill-memory", "64MiB", "--capture-wait", "100ms"}})

	var activeTotal int64
	for _, o := range want {
		if o.active {
			activeTotal++
		}
	}
	thresholds := []int64{activeTotal / 10, activeTotal * 2 / 5, activeTotal * 3 / 4}
	for k, th := range thresholds {
		checkedHeld := false
		l := h.KillRun(crash.Kill{Kind: crash.KillWhen, Label: "bootstrap running", When: func(r crash.Status) bool {
			if r.Phase != crash.PhaseBootstrap || r.Bootstrap == nil || r.Bootstrap.State != "running" || r.Repos["complete"] < th {
				return false
			}
			if k == 0 && !checkedHeld {
				// status refuses a store held by a running process, and says so.
				checkedHeld = true
				var stderr strings.Builder
				cmd := exec.Command(bin, "status", "--data-dir", h.DataDir)
				cmd.Env, cmd.Stderr = procenv.Clean(), &stderr
				err := cmd.Run()
				if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(stderr.String(), "held open by another process") {
					t.Fatalf("status on a held store: %v, %s", err, stderr.String())
				}
			}
			return true
		}})
		if l.Status.Repos["complete"]+l.Status.Repos["failed"] >= activeTotal {
			t.Fatalf("kill %d landed after every repo was terminal", k+1)
		}
		if l.Store.Phase != crash.PhaseBootstrap {
			t.Fatalf("kill %d: phase %s after the kill", k+1, l.Store.Phase)
		}
	}

	// The last run goes to the end of bootstrap; it is stopped right after
	// phase=merging is durable, so bootstrap's end state can be inspected.
	// All of that run was bootstrap: no repo complete before a kill may
	// have been downloaded in it.
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
	for _, k := range [][]byte{archive.KeyBackfillStartedAt, archive.KeyBackfillCompleteAt} {
		if _, err := s.Time(k); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
	}
	rows := map[string]int{}
	it, err := s.Events(1)
	if err != nil {
		t.Fatal(err)
	}
	for it.Next() {
		if it.Event().Kind == archive.KindCreate {
			rows[it.Event().DID]++
		}
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	pending := 0
	for did, o := range want {
		st, err := s.RepoState(did)
		if err != nil {
			t.Fatalf("%s: %v (predicted %v)", did, err, o.status)
		}
		// (a) the predicted state, or pending when a kill interrupted it.
		switch {
		case st.Status == archive.StatusPending && o.active:
			pending++
		case st.Status != o.status || st.Active != o.active || (o.class != "" && st.ErrClass != o.class):
			t.Fatalf("%s: %v active=%v class %q; predicted %v active=%v class %q", did, st.Status, st.Active, st.ErrClass, o.status, o.active, o.class)
		}
		// (c) rows of a complete repo = its records.
		if st.Status == archive.StatusComplete {
			if recs := len(n.World().Records(did)); rows[did] != recs || st.Records != uint64(recs) {
				t.Fatalf("%s: complete with %d rows (state says %d), the repo has %d records", did, rows[did], st.Records, recs)
			}
		}
		if st.Status == archive.StatusFailed && rows[did] != 0 {
			t.Fatalf("%s: failed with %d rows", did, rows[did])
		}
	}
	// Pending: in flight or recorded just ahead of dispatch at a kill (two
	// batches of 16 plus 6 jobs), per kill.
	if pending == 0 || pending > 3*(2*16+6) {
		t.Fatalf("%d repos pending after three kills of 6 workers (want some, at most those in flight or about to be)", pending)
	}
	ents, _ := os.ReadDir(filepath.Join(h.DataDir, "scratch"))
	if len(ents) != 0 {
		t.Fatalf("scratch holds %d files after the final run", len(ents))
	}
	for _, k := range []oracle.FaultKind{oracle.FaultHangBody, oracle.FaultCommitForOtherDID, oracle.FaultInvalidRecordPaths, oracle.FaultRateLimit, oracle.FaultLongCursor} {
		if n.Faults().Fired(k) == 0 {
			t.Fatalf("fault %s never fired", k)
		}
	}
	t.Logf("final: %d accounts predicted, %d pending after the kills", len(want), pending)
}
