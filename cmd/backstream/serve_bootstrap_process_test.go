package main

// Process-level tests of `backstream serve` bootstrap: the real binary
// against the in-process simulated network, killed with SIGKILL mid-way and
// restarted. Skipped under -short.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// buildBinary builds this command once per test binary.
func buildBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "backstream-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "backstream")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cleanEnv is the test's environment without BACKSTREAM_* variables.
func cleanEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "BACKSTREAM_") {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

// proc is one running `backstream serve`.
type proc struct {
	cmd    *exec.Cmd
	listen string
	logf   string
	done   chan error
}

func startServe(t *testing.T, bin, relay, dir string, args ...string) *proc {
	t.Helper()
	return startServeEnv(t, bin, relay, dir, nil, args...)
}

// startServeEnv is startServe with extra environment (e.g. a crash point).
func startServeEnv(t *testing.T, bin, relay, dir string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{listen: freeAddr(t), done: make(chan error, 1)}
	p.logf = filepath.Join(dir, fmt.Sprintf("serve-%d.log", time.Now().UnixNano()))
	logFile, err := os.Create(p.logf)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]string{"serve", "--relay", relay, "--data-dir", filepath.Join(dir, "data"),
		"--listen", p.listen, "--log-format", "json"}, args...)
	p.cmd = exec.Command(bin, all...)
	p.cmd.Env = cleanEnv(env...)
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.done <- p.cmd.Wait()
		logFile.Close()
	}()
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// status fetches /status; ok=false while the process is not answering.
func (p *proc) status() (statusReport, bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.listen + "/status")
	if err != nil {
		return statusReport{}, false
	}
	defer resp.Body.Close()
	var r statusReport
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil {
		return statusReport{}, false
	}
	return r, true
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.logf)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// readStore opens the data dir read-only (no process may hold it).
func readStore(t *testing.T, dir string) *archive.Store {
	t.Helper()
	s, err := archive.Open(filepath.Join(dir, "data"), archive.Options{ReadOnly: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	return s
}

// outcome is what the test predicts for one account.
type outcome struct {
	status archive.RepoStatus
	class  string // failure / unavailability class
	active bool
}

// armFaults arms an explicit hostile-shaped plan (each shape on its own
// accounts) and returns the predicted terminal state of every listed account.
func armFaults(n *oracle.Network, perShape int, hangDeadline time.Duration) map[string]outcome {
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

// TestServeBootstrapSurvivesSIGKILL: serve is killed with SIGKILL at three
// moments of bootstrap (each checked to be mid-bootstrap), restarted each
// time, and finally ends with phase=merging and (a) every account in the
// state its fault predicts (or pending, if a kill interrupted it), (b) no
// repo complete before a kill downloaded again, (c) archived rows per DID
// equal to the repo's records for every complete repo.
func TestServeBootstrapSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process-level: builds the binary and runs a 2,000-account bootstrap four times")
	}
	bin := buildBinary(t)
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 2000, RecordsMean: 20, Hosts: 4, Seed: 42, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	const deadline = 2 * time.Second
	want := armFaults(n, 6, deadline)
	dir := t.TempDir()
	// The network sends no firehose traffic: do not wait for capture.
	args := []string{"--backfill-workers", "6", "--getrepo-timeout", deadline.String(), "--backfill-memory", "64MiB", "--capture-wait", "100ms"}

	var activeTotal int64
	for _, o := range want {
		if o.active {
			activeTotal++
		}
	}
	completeBefore := map[string]int{} // DID → getRepo requests when it was seen complete
	thresholds := []int64{activeTotal / 10, activeTotal * 2 / 5, activeTotal * 3 / 4}
	for k, th := range thresholds {
		p := startServe(t, bin, n.RelayURL(), dir, args...)
		var last statusReport
		landed := false
		for !landed {
			select {
			case err := <-p.done:
				t.Fatalf("kill %d: serve exited (%v) before reaching %d complete repos:\n%s", k+1, err, th, p.tail())
			case <-time.After(5 * time.Millisecond):
			}
			r, ok := p.status()
			if !ok {
				continue
			}
			last = r
			if r.Phase == "bootstrap" && r.Bootstrap != nil && r.Bootstrap.State == "running" && r.Repos["complete"] >= th {
				landed = true
			}
		}
		if k == 0 {
			// status refuses a store held by a running process, and says so.
			code, _, stderr := runCLI(t, cleanEnv(), "status", "--data-dir", filepath.Join(dir, "data"))
			if code != 1 || !strings.Contains(stderr, "held open by another process") {
				t.Fatalf("status on a held store: code %d, %s", code, stderr)
			}
		}
		if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-p.done
		if last.Repos["complete"]+last.Repos["failed"] >= activeTotal {
			t.Fatalf("kill %d landed after every repo was terminal", k+1)
		}
		s := readStore(t, dir)
		phase, _ := s.Phase()
		counts, _ := s.Counts()
		for did := range want {
			st, err := s.RepoState(did)
			if err == nil && st.Status == archive.StatusComplete {
				if _, seen := completeBefore[did]; !seen {
					completeBefore[did] = n.RepoCounts(did).RelayRequests
				}
			}
		}
		s.Close()
		if phase != archive.PhaseBootstrap {
			t.Fatalf("kill %d: phase %s after the kill", k+1, phase)
		}
		t.Logf("kill %d at %d complete (/status), store: %d complete, %d pending, %d failed, %d not_started",
			k+1, last.Repos["complete"], counts.Get(archive.StatusComplete), counts.Get(archive.StatusPending),
			counts.Get(archive.StatusFailed), counts.Get(archive.StatusNotStarted))
	}

	// The last run goes to the end of bootstrap; it is stopped right after
	// phase=merging is durable (crash point merging-committed), so the
	// bootstrap's end state can be inspected before merging changes it.
	p := startServeEnv(t, bin, n.RelayURL(), dir, []string{"BACKSTREAM_CRASHPOINT=merging-committed"}, args...)
	select {
	case err := <-p.done:
		if !killed(err) {
			t.Fatalf("final run did not stop at merging-committed: %v\n%s", err, p.tail())
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("final run did not finish:\n%s", p.tail())
	}

	s := readStore(t, dir)
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
		// (b) complete before a kill: never downloaded again.
		if before, ok := completeBefore[did]; ok {
			if got := n.RepoCounts(did).RelayRequests; got != before {
				t.Fatalf("%s: complete before a kill, downloaded again (%d → %d getRepo)", did, before, got)
			}
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
	ents, _ := os.ReadDir(filepath.Join(dir, "data", "scratch"))
	if len(ents) != 0 {
		t.Fatalf("scratch holds %d files after the final run", len(ents))
	}
	for _, k := range []oracle.FaultKind{oracle.FaultHangBody, oracle.FaultCommitForOtherDID, oracle.FaultInvalidRecordPaths, oracle.FaultRateLimit, oracle.FaultLongCursor} {
		if n.Faults().Fired(k) == 0 {
			t.Fatalf("fault %s never fired", k)
		}
	}
	t.Logf("final: %d accounts predicted, %d pending after the kills, %d repos seen complete before a kill", len(want), pending, len(completeBefore))
}

// killed reports whether a process ended by SIGKILL (a crash point firing).
func killed(err error) bool {
	ee, ok := err.(*exec.ExitError)
	if !ok {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
