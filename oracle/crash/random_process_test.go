package crash_test

// TestRandomKillChain: the real binary killed with SIGKILL at random moments
// drawn from a seeded RNG (a delay after start, the archive tip passing a
// random seq, a random time into steady state), restarted each time on the
// same data dir under continuous full traffic, with a websocket subscriber
// connected across the chain; then a clean run converges and the chain's
// end state is checked (Harness.Finish, plus R7 during the chain).
// TestRandomKillChainHosts is the same chain in hosts mode (the fleet
// bootstrap), over a roster of every status but banned and a host down for
// a while.

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
	"github.com/backstream/backstream/oracle/world"
)

var (
	seedFlag  = flag.Int64("crash.seed", 0, "TestRandomKillChain, TestRandomKillChainHosts: run only this seed (0 = the tier's seeds)")
	killsFlag = flag.Int("crash.kills", 0, "TestRandomKillChain, TestRandomKillChainHosts: kills per chain (0 = the tier's default)")
)

func TestMain(m *testing.M) { os.Exit(crash.Main(m)) }

// chainShape is the world and chain of one tier. A fleet chain runs serve
// with --enumerate hosts over a relay whose own listRepos misses
// indexMissing of the accounts, with roster statuses and a host outage
// drawn from the seed (drawFleet).
type chainShape struct {
	accounts, records, hosts, kills int
	rate                            float64
	seeds                           []int64
	fleet                           bool
	indexMissing                    float64
}

var (
	shortShape = chainShape{accounts: 800, records: 20, hosts: 3, kills: 3, rate: 120, seeds: []int64{1}}
	longShape  = chainShape{accounts: 1500, records: 25, hosts: 4, kills: 5, rate: 150, seeds: []int64{1, 2, 3, 4}}
	// Half the accounts are on host 0 (the world's rule), so its listing
	// is two pages: a kill can land between them.
	hostsShape = chainShape{accounts: 2500, records: 15, hosts: 6, kills: 5, rate: 150, seeds: []int64{1, 2},
		fleet: true, indexMissing: 0.05}
)

// serveArgs are short retry and capture settings so a chain converges in
// seconds.
var serveArgs = []string{"--backfill-workers", "8", "--capture-wait", "3s",
	"--retry-interval", "200ms", "--retry-max-delay", "1s", "--retry-scan-period", "300ms"}

func TestRandomKillChain(t *testing.T) {
	shape := longShape
	if testing.Short() {
		shape = shortShape
	}
	runChains(t, shape)
}

// TestRandomKillChainHosts is TestRandomKillChain in hosts mode: every
// roster host lists its own repos and serves them, some of them with a
// roster status other than active (idle, offline, throttled, or a word
// listHosts does not name), one of them down for a while, and the relay's
// own listRepos missing some accounts, which only their hosts list. The
// end check is the same: the archive and a replay fold to the network's
// records for every account, so an account of a host bootstrap or
// discovery did not list is missing there. Not under -short.
func TestRandomKillChainHosts(t *testing.T) {
	citest.Long(t, "the hosts-mode kill chain")
	runChains(t, hostsShape)
}

// runChains runs one chain per seed of shape, or of -crash.seed, with
// -crash.kills kills when set.
func runChains(t *testing.T, shape chainShape) {
	name, extra := t.Name(), ""
	if testing.Short() {
		extra = " -short"
	}
	if *killsFlag > 0 {
		shape.kills = *killsFlag
		extra += fmt.Sprintf(" -crash.kills=%d", *killsFlag)
	}
	if *seedFlag != 0 {
		shape.seeds = []int64{*seedFlag}
	}
	for _, seed := range shape.seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("seed %d failed; reproduce with: go test ./oracle/crash -run '^%s$' -crash.seed=%d%s -v", seed, name, seed, extra)
				}
			})
			randomChain(t, seed, shape)
		})
	}
}

// step is one drawn kill. An archive-tip target is a fraction of a span
// above the tip the previous kill left, resolved when its run starts: the
// span is three seconds of traffic, plus, while the store is still in
// bootstrap, the world's records the archive does not hold yet.
type step struct {
	kind  crash.KillKind
	delay time.Duration
	frac  float64
}

// drawChain draws the kill schedule of a seed: kinds and parameters from
// the seed alone. The last kill always lands in steady state, so the
// subscriber holds events at a kill.
func drawChain(seed int64, s chainShape) []step {
	rng := rand.New(rand.NewPCG(uint64(seed), 0xc4a5))
	steps := make([]step, s.kills)
	for i := range steps {
		kind := []crash.KillKind{crash.KillAfter, crash.KillAtTip, crash.KillInSteady}[rng.IntN(3)]
		if i == len(steps)-1 {
			kind = crash.KillInSteady
		}
		switch kind {
		case crash.KillAfter:
			steps[i] = step{kind: kind, delay: 50*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond)))}
		case crash.KillAtTip:
			steps[i] = step{kind: kind, frac: rng.Float64()}
		case crash.KillInSteady:
			steps[i] = step{kind: kind, delay: time.Duration(rng.Int64N(int64(2 * time.Second)))}
		}
	}
	return steps
}

// fleetFaults are a fleet chain's roster and outage, drawn from its seed:
// each host's listHosts status (banned never: its accounts would not be
// archived, and the end check expects every account), one host's status
// changed to another word before a later run (the roster discovery reads
// again differs from bootstrap's), one host answering 503 for a while
// from a moment into one of the killed runs, and each host answering every
// request late by its own delay, so bootstrap lasts long enough (a few
// seconds) for kills to land in it.
type fleetFaults struct {
	status          []string // per host; "" is active
	changeRun       int      // before this run (0-based; the clean run last) …
	changeHost      int      // … this host's status becomes changeTo
	changeTo        string
	downRun         int             // the killed run during which …
	downHost        int             // … this host goes down …
	downAt, downFor time.Duration   // … this long after the run's start, for this long
	slow            []time.Duration // per host: every request answered this late, all chain long

	outage *time.Timer // the outage's start, once its run has begun
	began  atomic.Bool // the outage has begun
}

// rosterWords are the statuses a fleet chain gives its hosts: active, the
// lexicon's listable ones, and a word listHosts does not name.
var rosterWords = []string{"", "idle", "offline", "throttled", "paused"}

func drawFleet(seed int64, s chainShape) *fleetFaults {
	rng := rand.New(rand.NewPCG(uint64(seed), 0xf1ee7))
	f := &fleetFaults{status: make([]string, s.hosts)}
	for i := range f.status {
		f.status[i] = rosterWords[rng.IntN(len(rosterWords))]
	}
	f.changeRun, f.changeHost = rng.IntN(s.kills+1), rng.IntN(s.hosts)
	f.changeTo = rosterWords[rng.IntN(len(rosterWords))]
	f.downRun, f.downHost = rng.IntN(s.kills), rng.IntN(s.hosts)
	f.downAt = time.Duration(rng.Int64N(int64(1500 * time.Millisecond))) // a bootstrap run is a few seconds
	f.downFor = 2*time.Second + time.Duration(rng.Int64N(int64(10*time.Second)))
	f.slow = make([]time.Duration, s.hosts)
	for i := range f.slow {
		f.slow[i] = 5*time.Millisecond + time.Duration(rng.Int64N(int64(25*time.Millisecond)))
	}
	return f
}

func (f *fleetFaults) String() string {
	words := make([]string, len(f.status))
	slow := make([]time.Duration, len(f.slow))
	for i, st := range f.status {
		words[i], slow[i] = cmp.Or(st, "active"), f.slow[i].Round(time.Millisecond)
	}
	return fmt.Sprintf("statuses %v; host %d %s before run %d; host %d down %v from %v into run %d; hosts slow by %v",
		words, f.changeHost, cmp.Or(f.changeTo, "active"), f.changeRun+1, f.downHost, f.downFor.Round(time.Millisecond), f.downAt.Round(time.Millisecond), f.downRun+1,
		slow)
}

// beforeRun applies f's faults due at the start of run (0-based; the
// clean run last): the status change, and the outage's timer.
func (f *fleetFaults) beforeRun(net *oracle.Network, run int) {
	if f == nil {
		return
	}
	if run == f.changeRun {
		net.Faults().SetHostStatus(f.changeHost, f.changeTo)
	}
	if run == f.downRun {
		f.outage = time.AfterFunc(f.downAt, func() {
			f.began.Store(true)
			net.Faults().DownHost(f.downHost, f.downFor)
		})
	}
}

// outageOver waits, once the clean run has started, until the outage has
// begun (one drawn late in a short run begins in the clean run) and the
// host answers again. Only then may the clean run be judged converged: a
// repo only the down host serves (one reactivated during the outage) is
// fetched once it answers, the getRepo retries of a job already under way
// waiting up to 30 s between tries, so a run converging while the host is
// still down would be judged on a repo it cannot yet have.
func (f *fleetFaults) outageOver(t *testing.T, net *oracle.Network) {
	t.Helper()
	if f == nil || f.outage == nil {
		return
	}
	health := net.HostURLs()[f.downHost] + "/xrpc/_health"
	within := f.downAt + f.downFor + 30*time.Second
	deadline := time.Now().Add(within)
	for !f.began.Load() || !answers(health) {
		if time.Now().After(deadline) {
			t.Fatalf("host %d did not answer %s within %v of the clean run's start (%v)", f.downHost, health, within, f)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop stops the outage's timer, for a chain that ends early.
func (f *fleetFaults) stop() {
	if f.outage != nil {
		f.outage.Stop()
	}
}

// answers reports whether a GET of url answers 200.
func answers(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func randomChain(t *testing.T, seed int64, s chainShape) {
	crash.Binary(t) // before the network starts
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: s.accounts, RecordsMean: s.records, Hosts: s.hosts,
		Seed: seed, Traffic: oracle.TrafficNone, RelayIndexMissing: s.indexMissing})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	args := serveArgs
	var fleet *fleetFaults
	if s.fleet {
		args = append(slices.Clone(serveArgs), "--enumerate", "hosts")
		fleet = drawFleet(seed, s)
		for i, st := range fleet.status {
			net.Faults().SetHostStatus(i, st)
		}
		for i, d := range fleet.slow {
			net.Faults().SlowHost(i, d)
		}
		defer fleet.stop()
		t.Logf("seed %d: hosts mode over %d hosts: %v", seed, s.hosts, fleet)
	}
	h := crash.New(t, net, crash.Options{Args: args, Subscribe: true})
	h.Traffic = crash.StartTraffic(net, world.TrafficFull, seed, s.rate)
	defer h.StopTraffic()
	steps := drawChain(seed, s)
	t.Logf("seed %d: %d accounts, %d kills: %+v", seed, s.accounts, len(steps), steps)

	start := time.Now()
	var prev crash.Summary
	for run, st := range steps {
		fleet.beforeRun(net, run)
		// Three seconds of traffic, and in bootstrap the records not yet
		// archived as the last kill left them: a kill late in bootstrap
		// must not aim a world's records past a tip traffic alone has to
		// reach (seed 121 with 12 kills aimed 36,475 events of traffic
		// ahead, about four minutes of it).
		span := 3 * s.rate
		if prev.Phase != crash.PhaseMerging && prev.Phase != crash.PhaseSteady {
			span += max(float64(s.accounts*s.records)-float64(prev.Tip), 0)
		}
		k := crash.Kill{Kind: st.kind, Delay: st.delay, Tip: prev.Tip + 1 + uint64(st.frac*span)}
		if l := h.KillRun(k); l.Store.Phase != "" {
			prev = l.Store
		}
	}
	h.StopTraffic()
	fleet.beforeRun(net, len(steps))
	p := h.Start()
	fleet.outageOver(t, net)
	p = h.WaitConverged(p, 3*time.Minute)
	res := h.Finish(p)

	heldAtKill := 0
	for _, l := range h.Kills {
		heldAtKill = max(heldAtKill, l.SubHeld)
	}
	if heldAtKill == 0 || res.SubConns < 2 {
		t.Fatalf("the subscriber held nothing at any kill (max %d) or never reconnected (%d connections): D1 was not exercised", heldAtKill, res.SubConns)
	}
	t.Logf("seed %d: %d kills in %v; converged: %d events, fold = ground truth for %d accounts; subscriber held %d events over %d connections (%d at the last kill), all intact in a fresh read of %d",
		seed, len(h.Kills), time.Since(start).Round(time.Millisecond), res.Events, res.Checked, res.SubHeld, res.SubConns, heldAtKill, res.FreshRead)
}
