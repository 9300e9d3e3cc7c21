package crash

// chain.go owns a kill chain on one data dir: successive serve runs, each
// ended by a kill (a crash point or a random moment), then a clean run to
// convergence and the end-state checks.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
)

// KillKind says what ends a run.
type KillKind int

// Kill kinds.
const (
	// KillPoint arms BACKSTREAM_CRASHPOINT=Point; the run must end by the
	// crash point's SIGKILL.
	KillPoint KillKind = iota + 1
	// KillAfter sends SIGKILL Delay after the process started.
	KillAfter
	// KillAtTip sends SIGKILL once /status reports an archive tip ≥ Tip.
	KillAtTip
	// KillInSteady sends SIGKILL Delay after /status first reports
	// steady_state (and, with a Subscriber, once it holds an event).
	KillInSteady
	// KillWhen sends SIGKILL once When returns true for a /status report.
	KillWhen
)

// Kill is what ends one run of a chain.
type Kill struct {
	Kind  KillKind
	Point string            // KillPoint: "name[:n]"
	Delay time.Duration     // KillAfter, KillInSteady
	Tip   uint64            // KillAtTip
	When  func(Status) bool // KillWhen
	Label string            // KillWhen: a name for logs
	Env   []string          // extra environment of the run (e.g. a flag's BACKSTREAM_* variable)
}

// AtPoint is a crash-point kill.
func AtPoint(spec string) Kill { return Kill{Kind: KillPoint, Point: spec} }

func (k Kill) String() string {
	switch k.Kind {
	case KillPoint:
		return k.Point
	case KillAfter:
		return fmt.Sprintf("after %v", k.Delay)
	case KillAtTip:
		return fmt.Sprintf("at tip %d", k.Tip)
	case KillInSteady:
		return fmt.Sprintf("%v into steady_state", k.Delay)
	case KillWhen:
		return k.Label
	}
	return "kill?"
}

// Landed records where a kill landed.
type Landed struct {
	Kill    Kill
	After   time.Duration // from process start to its death
	Status  Status        // the last /status report before the kill (zero if none)
	Store   Summary       // the store after the kill
	SubHeld int           // events the Subscriber held at the kill
}

// Options configure a Harness.
type Options struct {
	Args      []string      // serve flags of every run
	Subscribe bool          // keep a Subscriber connected across the chain
	Settle    time.Duration // how long convergence must hold before it counts; default 3s
	KillWait  time.Duration // longest wait for a kill to land; default 2m
}

// Harness runs kill chains of `backstream serve` against one simulated
// network on one data dir. Its methods must be called from the test
// goroutine.
type Harness struct {
	T       testing.TB
	Net     *oracle.Network
	Bin     string
	Dir     string // logs; the data dir is Dir/data
	DataDir string
	Listen  string // every run listens here, so a subscriber redials one address
	Sub     *Subscriber
	Traffic *Traffic // set when the test drives traffic itself (StartTraffic)
	Kills   []Landed

	opts Options
	// pastBootstrap: a run has been seen in merging or steady_state.
	pastBootstrap bool
	// completeAt: DID → the relay's getRepo count for it when it was first
	// seen durably complete after a kill.
	completeAt map[string]int
}

// New returns a harness on a fresh data dir. With opts.Subscribe, a
// Subscriber follows the chain from cursor 0; it is closed by cleanup.
// Call Binary before starting a network with a bounded traffic budget: the
// first build takes seconds, during which the traffic would run out.
func New(t testing.TB, net *oracle.Network, opts Options) *Harness {
	t.Helper()
	if opts.Settle == 0 {
		opts.Settle = 3 * time.Second
	}
	if opts.KillWait == 0 {
		opts.KillWait = 2 * time.Minute
	}
	dir := t.TempDir()
	h := &Harness{T: t, Net: net, Bin: Binary(t), Dir: dir, DataDir: filepath.Join(dir, "data"),
		Listen: FreeAddr(t), opts: opts, completeAt: map[string]int{}}
	if opts.Subscribe {
		h.Sub = Subscribe(h.Listen)
		t.Cleanup(h.Sub.Close)
	}
	t.Cleanup(h.keepLogs) // runs before t.TempDir's removal
	return h
}

// keepLogs copies the runs' logs out of the temp dir when the test failed,
// and says where.
func (h *Harness) keepLogs() {
	if !h.T.Failed() {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(h.Dir, "serve-*.log"))
	if len(logs) == 0 {
		return
	}
	keep, err := os.MkdirTemp("", "backstream-crash-logs-")
	if err != nil {
		return
	}
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(keep, filepath.Base(l)), b, 0o644)
		}
	}
	h.T.Logf("serve logs of the failed chain kept in %s", keep)
}

// Start starts one serve run with extra environment.
func (h *Harness) Start(env ...string) *Proc {
	h.T.Helper()
	return h.StartBin(h.Bin, h.opts.Args, env...)
}

// StartBin starts one serve run of bin (e.g. an older build, BuildCommit)
// with the serve flags args instead of the harness's.
func (h *Harness) StartBin(bin string, args []string, env ...string) *Proc {
	h.T.Helper()
	return Start(h.T, Run{Bin: bin, Relay: h.Net.RelayURL(), LoopbackHosts: h.Net.LoopbackHosts(), DataDir: h.DataDir, LogDir: h.Dir,
		Listen: h.Listen, Env: env, Args: args})
}

// Chain runs one run per kill, each ending by its kill.
func (h *Harness) Chain(kills ...Kill) {
	h.T.Helper()
	for _, k := range kills {
		h.KillRun(k)
	}
}

// KillRun starts a run and ends it by k, asserting that the kill fired:
// a crash-point run must die by SIGKILL; a random kill must find the
// process alive and not converged. It then checks and records the store
// (see afterKill).
func (h *Harness) KillRun(k Kill) Landed {
	h.T.Helper()
	t := h.T
	env := append([]string(nil), k.Env...)
	if k.Kind == KillPoint {
		if _, err := crashpoint.Parse(k.Point); err != nil {
			t.Fatal(err)
		}
		env = append(env, crashpoint.EnvVar+"="+k.Point)
	}
	p := h.Start(env...)
	var last Status
	var steadyAt time.Time
	deadline := time.Now().Add(h.opts.KillWait)
	for {
		if p.Exited() {
			if k.Kind == KillPoint && Killed(p.Err()) {
				break // the crash point fired
			}
			t.Fatalf("run to be ended by %s exited by itself (%v):\n%s", k, p.Err(), p.Tail())
		}
		if time.Now().After(deadline) {
			t.Fatalf("kill %s never landed within %v (last status %+v):\n%s", k, h.opts.KillWait, last, p.Tail())
		}
		st, ok := h.poll(p)
		if ok {
			last = st
		}
		fire := false
		switch k.Kind {
		case KillAfter:
			fire = time.Since(p.Start) >= k.Delay
		case KillAtTip:
			fire = ok && st.Archive.TipSeq >= k.Tip
		case KillInSteady:
			if ok && st.Phase == PhaseSteady && steadyAt.IsZero() && (h.Sub == nil || h.Sub.Len() > 0) {
				steadyAt = time.Now()
			}
			fire = !steadyAt.IsZero() && time.Since(steadyAt) >= k.Delay
		case KillWhen:
			fire = ok && k.When(st)
		}
		if fire {
			if h.converged(last) {
				t.Fatalf("kill %s would land after convergence (status %+v): the scenario would prove nothing", k, last)
			}
			held := 0
			if h.Sub != nil {
				held = h.Sub.Len()
			}
			if err := p.Kill(); err != nil {
				t.Fatalf("kill %s: %v\n%s", k, err, p.Tail())
			}
			return h.afterKill(k, p, last, held)
		}
		time.Sleep(20 * time.Millisecond)
	}
	held := 0 // a crash point fired: what the subscriber held at the kill
	if h.Sub != nil {
		held = h.Sub.Len()
	}
	return h.afterKill(k, p, last, held)
}

// afterKill reads the store the killed run left. While the store is still in
// bootstrap, every repo recorded complete after an earlier kill must not
// have been downloaded again (R7; exact: the process is dead). Repos complete
// now are recorded with their current getRepo counts.
func (h *Harness) afterKill(k Kill, p *Proc, last Status, held int) Landed {
	h.T.Helper()
	t := h.T
	after := time.Since(p.Start)
	s, err := OpenStore(h.DataDir)
	if err != nil {
		if last.Phase == PhaseBootstrap || last.Phase == PhaseMerging || last.Phase == PhaseSteady {
			t.Fatalf("after kill %s: %v\n%s", k, err, p.Tail())
		}
		// Killed before the store was open (or created): nothing to read;
		// the next run must start from whatever is there.
		l := Landed{Kill: k, After: after, Status: last, SubHeld: held}
		h.Kills = append(h.Kills, l)
		t.Logf("kill %d (%s) landed %v after start, before the store was open (%v)", len(h.Kills), k, after.Round(time.Millisecond), err)
		return l
	}
	defer s.Close()
	sum, err := Summarize(s)
	if err != nil && !errors.Is(err, archive.ErrNotFound) {
		t.Fatalf("after kill %s: %v", k, err)
	}
	// The replay index names exactly the durable rows (every row has its
	// entries, every entry its row).
	if err := s.CheckReplayIndex(); err != nil {
		t.Fatalf("after kill %s: %v", k, err)
	}
	if sum.Phase == PhaseBootstrap && !h.pastBootstrap {
		h.CheckNoRedownload(fmt.Sprintf("after kill %d (%s)", len(h.Kills)+1, k))
	} else if sum.Phase != "" && sum.Phase != PhaseBootstrap {
		h.pastBootstrap = true
	}
	if !h.pastBootstrap {
		err := s.ScanRepos(func(did string, st archive.RepoState) error {
			if st.Status == archive.StatusComplete {
				if _, seen := h.completeAt[did]; !seen {
					h.completeAt[did] = h.Net.RepoCounts(did).Requests
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("after kill %s: scan repos: %v", k, err)
		}
	}
	l := Landed{Kill: k, After: after, Status: last, Store: sum, SubHeld: held}
	h.Kills = append(h.Kills, l)
	t.Logf("kill %d (%s) landed %v after start; /status before: phase %q tip %d; store: %s; subscriber held %d",
		len(h.Kills), k, l.After.Round(time.Millisecond), last.Phase, last.Archive.TipSeq, sum, held)
	return l
}

// CheckNoRedownload fails the test if a repo recorded complete after a kill
// was requested again since. The harness calls it after every kill that
// leaves the store in bootstrap; a test calls it when it knows a whole run
// was bootstrap (e.g. one killed at merging-committed).
func (h *Harness) CheckNoRedownload(when string) {
	h.T.Helper()
	for did, n := range h.completeAt {
		if got := h.Net.RepoCounts(did).Requests; got != n {
			h.T.Fatalf("R7 %s: %s was complete before a kill and was downloaded again during bootstrap (%d → %d getRepo)", when, did, n, got)
		}
	}
}

// poll reads /status once. While the run reports bootstrap, the getRepo
// counts read just before the report are all from bootstrap, so they are
// checked against the repos complete before the last kill.
func (h *Harness) poll(p *Proc) (Status, bool) {
	h.T.Helper()
	var counts map[string]int
	if !h.pastBootstrap && len(h.completeAt) > 0 {
		counts = make(map[string]int, len(h.completeAt))
		for did := range h.completeAt {
			counts[did] = h.Net.RepoCounts(did).Requests
		}
	}
	st, ok := p.Status()
	if !ok {
		return st, false
	}
	switch st.Phase {
	case PhaseBootstrap:
		for did, n := range counts {
			if n != h.completeAt[did] {
				h.T.Fatalf("R7: %s was complete before a kill and was downloaded again during bootstrap (%d → %d getRepo)", did, h.completeAt[did], n)
			}
		}
	case PhaseMerging, PhaseSteady:
		h.pastBootstrap = true
	}
	return st, true
}

// trafficDone reports whether the network's traffic has ended.
func (h *Harness) trafficDone() bool {
	if h.Traffic != nil {
		return false // the test stops it (and sets Traffic nil) when done
	}
	return h.Net.Status().Done
}

// converged: steady state, traffic ended, cursor/relay at the relay's last
// seq.
func (h *Harness) converged(st Status) bool {
	return st.Phase == PhaseSteady && h.trafficDone() && st.RelayCursor() == uint64(h.Net.Status().Seq)
}

// StopTraffic stops the harness's traffic driver (if any) and fails the
// test if it ended early.
func (h *Harness) StopTraffic() {
	h.T.Helper()
	if h.Traffic == nil {
		return
	}
	if err := h.Traffic.Stop(); err != nil {
		h.T.Fatal(err)
	}
	h.Traffic = nil
}

// WaitPhase polls a running p until /status reports phase, and returns that
// report.
func (h *Harness) WaitPhase(p *Proc, phase string, within time.Duration) Status {
	h.T.Helper()
	return h.WaitStatus(p, "phase "+phase, func(st Status) bool { return st.Phase == phase }, within)
}

// WaitStatus polls a running p until a /status report satisfies cond
// (what names it in a failure), and returns that report.
func (h *Harness) WaitStatus(p *Proc, what string, cond func(Status) bool, within time.Duration) Status {
	h.T.Helper()
	deadline := time.Now().Add(within)
	var last Status
	for {
		if p.Exited() {
			h.T.Fatalf("serve exited before %s: %v\n%s", what, p.Err(), p.Tail())
		}
		st, ok := h.poll(p)
		if ok && cond(st) {
			return st
		}
		if ok {
			last = st
		}
		if time.Now().After(deadline) {
			h.T.Fatalf("no %s within %v (last status %+v):\n%s", what, within, last, p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RetryIdle reports whether serve's /metrics (Proc.Metrics) say its
// retry runner has nothing left to do: no repo due (failed with its next
// attempt due, pending, or marked for a replacement by a #sync, a
// reactivation or discovery), none queued or being replaced, and no host
// parked (a parked host's repos wait for the park's end, not counted due
// meanwhile). A series absent (a runner not started) counts as zero.
func RetryIdle(m map[string]float64) bool {
	return m["backstream_retry_due"] == 0 && m["backstream_retry_queued"] == 0 &&
		m["backstream_retry_inflight"] == 0 && m["backstream_retry_parked_hosts"] == 0
}

// retryIdle is RetryIdle of p's /metrics; false while they do not answer.
func retryIdle(p *Proc) bool {
	m, err := p.Metrics()
	return err == nil && RetryIdle(m)
}

// Converge starts a clean run and waits until it has converged for
// opts.Settle: steady state, traffic ended, cursor/relay equal to the
// relay's last seq, and the retry runner idle (RetryIdle: every #sync,
// reactivation and discovery mark replaced, no host parked). A replacement
// that waits for its host (a getRepo retried inside its job, backing off
// while the host answered 503) is still due or in flight: converging
// without it would judge the archive before the replacement of an account
// it will hold. A failed repo whose next attempt is not due yet is not
// counted due; the settle time, longer than the chains' retry delays,
// sees it come due. It returns the running process.
func (h *Harness) Converge(within time.Duration) *Proc {
	h.T.Helper()
	return h.WaitConverged(h.Start(), within)
}

// WaitConverged waits for a running p to converge (see Converge).
func (h *Harness) WaitConverged(p *Proc, within time.Duration) *Proc {
	h.T.Helper()
	t := h.T
	deadline := time.Now().Add(within)
	var since time.Time
	var last Status
	for {
		if p.Exited() {
			t.Fatalf("serve exited before convergence: %v\n%s", p.Err(), p.Tail())
		}
		st, ok := h.poll(p)
		if ok {
			last = st
		}
		if ok && h.converged(st) && retryIdle(p) {
			if since.IsZero() {
				since = time.Now()
			}
			if time.Since(since) >= h.opts.Settle {
				return p
			}
		} else {
			since = time.Time{}
		}
		if time.Now().After(deadline) {
			m, err := p.Metrics()
			t.Fatalf("no convergence within %v: status %+v, relay %+v, retry due %v queued %v in flight %v parked hosts %v (%v)\n%s",
				within, last, h.Net.Status(), m["backstream_retry_due"], m["backstream_retry_queued"], m["backstream_retry_inflight"],
				m["backstream_retry_parked_hosts"], err, p.Tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Result is what Finish measured.
type Result struct {
	Events    int // archived events
	Checked   int // accounts compared with the network
	SubHeld   int // events the chain's subscriber held
	SubConns  int // its connections (one per run it saw serving)
	FreshRead int // events of the fresh read from cursor 0
}

// Finish checks a converged run p and stops it: with a Subscriber, every
// message it held is present and byte-identical in a fresh read from
// cursor 0, with no gap inside the range it followed (D1), and the fresh
// read folds to the network's records (D7); then SIGTERM must stop the run
// cleanly, and the archive must have strictly increasing seqs, per-DID revs
// that never go backwards (D3), and fold to the network's current records
// for every active account (and nothing for deleted ones).
func (h *Harness) Finish(p *Proc) Result {
	h.T.Helper()
	t := h.T
	var res Result
	if h.Sub != nil {
		st, ok := p.Status()
		if !ok {
			t.Fatalf("no /status from the converged run:\n%s", p.Tail())
		}
		tip := st.Archive.TipSeq
		if err := h.Sub.WaitFor(tip, 2*time.Minute); err != nil {
			t.Fatalf("chain subscriber: %v", err)
		}
		fresh := Follow(p.Listen)
		err := fresh.WaitFor(tip, 2*time.Minute)
		fresh.Close()
		if err != nil {
			t.Fatalf("fresh subscriber: %v", err)
		}
		h.Sub.Close()
		if err := h.Sub.Err(); err != nil {
			t.Fatalf("chain subscriber: %v", err)
		}
		st, ok = p.Status() // the watermark as of the fresh read or later
		if !ok {
			t.Fatalf("no /status from the converged run:\n%s", p.Tail())
		}
		held, after := h.Sub.Messages(), fresh.Messages()
		if err := CompareHeldCompacted(held, after, st.Watermark()); err != nil {
			t.Fatal(err)
		}
		checked, bad := check.Compare(fresh.Fold(), h.Net.World(), nil)
		if len(bad) > 0 {
			t.Fatalf("D7: the stream from cursor 0 differs for %d of %d accounts:\n%s", len(bad), checked, check.Describe(bad, 10))
		}
		res.SubHeld, res.SubConns, res.FreshRead = len(held), h.Sub.Conns(), len(after)
	}
	if err := p.Stop(time.Minute); err != nil {
		t.Fatalf("the converged run did not stop cleanly on SIGTERM: %v\n%s", err, p.Tail())
	}
	s, err := OpenStore(h.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fold, stats, err := check.Archive(s)
	if err != nil {
		t.Fatalf("archive walk: %v", err) // seqs strictly increase; D3
	}
	checked, bad := check.Compare(fold, h.Net.World(), nil)
	if len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ after kills %v:\n%s", len(bad), checked, h.killNames(), check.Describe(bad, 10))
	}
	res.Events, res.Checked = stats.Events, checked
	return res
}

func (h *Harness) killNames() []string {
	out := make([]string, len(h.Kills))
	for i, k := range h.Kills {
		out[i] = k.Kill.String()
	}
	return out
}
