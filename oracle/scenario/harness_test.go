package scenario

// harness_test.go owns the scenario harness: seeds and the reproduction
// command, one "process run" of backstream wired as `backstream serve`
// wires it (node), a seeded live-traffic driver, a listRepos recorder in
// front of the relay, and the ground-truth check.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	bnode "github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
)

var (
	flagSeed  = flag.Int64("scenario.seed", 1, "first seed of every scenario (world, fault plan and traffic)")
	flagSeeds = flag.Int("scenario.seeds", 1, "number of consecutive seeds each scenario runs, from -scenario.seed (-short runs one)")
	flagLog   = flag.Bool("scenario.log", false, "log backstream's own output (debug level) to the test log")
)

// forSeeds runs fn once per seed as subtest "seed=N". A failing seed logs
// the exact command that reproduces it.
func forSeeds(t *testing.T, fn func(t *testing.T, seed int64)) {
	n := max(*flagSeeds, 1)
	if testing.Short() {
		n = 1
	}
	for i := range n {
		seed := *flagSeed + int64(i)
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("reproduce: %s", reproCommand(t.Name(), seed))
				}
			})
			fn(t, seed)
		})
	}
}

// reproCommand is the go test command that runs exactly this scenario and
// seed again (with -short when this run had it: sizes depend on it).
func reproCommand(name string, seed int64) string {
	top, _, _ := strings.Cut(name, "/")
	short := ""
	if testing.Short() {
		short = " -short"
	}
	return fmt.Sprintf("go test ./oracle/scenario -run '^%s$' -scenario.seed=%d -scenario.seeds=1 -count=1%s -v", top, seed, short)
}

// logger is backstream's logger in tests: discarded unless -scenario.log.
func logger(t *testing.T) *slog.Logger {
	if !*flagLog {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startNetwork starts a simulated network without its own traffic: the
// scenarios drive traffic themselves (driver), so that which accounts it
// touches is part of the seeded plan.
func startNetwork(t *testing.T, seed int64, accounts, records, hosts int) *oracle.Network {
	t.Helper()
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: accounts, RecordsMean: records, Hosts: hosts,
		Seed: seed, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// nodeOpts are one process run's knobs (the flags of serve that the
// scenarios turn).
type nodeOpts struct {
	// Hook is the store's commit hook (storage write faults); nil = none.
	Hook func(op string, keys [][]byte) error
	// ListURL, when set, is where listRepos and getRepo go (a recorder in
	// front of the relay); the firehose is always dialed at the relay.
	ListURL        string
	Workers        int
	PageLimit      int
	Enumerate      string // bootstrap.Config.Enumerate ("": hosts when the relay answers listHosts)
	AttemptTimeout time.Duration
	CaptureWait    time.Duration
	RetryInterval  time.Duration
	RetryMaxDelay  time.Duration
	// ScanPeriod is the retry runner's pause between passes when nothing
	// wakes it (default 100 ms).
	ScanPeriod time.Duration
}

func (o *nodeOpts) defaults() {
	if o.Workers == 0 {
		o.Workers = 8
	}
	if o.AttemptTimeout == 0 {
		o.AttemptTimeout = 30 * time.Second
	}
	if o.CaptureWait == 0 {
		o.CaptureWait = time.Second
	}
	if o.RetryInterval == 0 {
		o.RetryInterval = 100 * time.Millisecond
	}
	if o.RetryMaxDelay == 0 {
		o.RetryMaxDelay = 400 * time.Millisecond
	}
	if o.ScanPeriod == 0 {
		o.ScanPeriod = 100 * time.Millisecond
	}
}

// node is one run of backstream over the store in fs at /data, built by
// package node exactly as `backstream serve` builds it (the store with the
// relay check, the writer, the upstream client, backfill jobs, the retry
// runner woken by live side effects, the lifecycle), plus the subscribe
// server (/subscribe, /status, /healthz, /readyz) on a real 127.0.0.1
// listener. stop is the process ending: the run's context ends and
// everything is closed; the store keeps only what was synced.
type node struct {
	t   *testing.T
	net *oracle.Network
	n   *bnode.Node

	store   *archive.Store
	w       *archive.Writer
	retrier *retry.Runner
	http    *http.Server
	addr    string
	phaseCh chan archive.Phase

	cancel context.CancelFunc
	exit   chan error // Run's end
	once   sync.Once
	err    error
}

func startNode(t *testing.T, n *oracle.Network, fs vfs.FS, o nodeOpts) *node {
	t.Helper()
	o.defaults()
	nd := &node{t: t, net: n, phaseCh: make(chan archive.Phase, 16), exit: make(chan error, 1)}
	loopback := n.LoopbackHosts()
	if o.ListURL != "" {
		// The recorder stands in for the relay on a port of its own; the
		// PDS hosts it redirects to listen on the real relay's port.
		u, _ := url.Parse(n.RelayURL())
		loopback = append(loopback, u.Host)
	}
	var err error
	nd.n, err = bnode.New(bnode.Config{
		DataDir: "/data", ScratchDir: t.TempDir(),
		Store: archive.Options{FS: fs, CommitHook: o.Hook, CacheSize: 8 << 20,
			OnFatal: func(fe *archive.FatalError) { panic(fe) }},
		Relay: n.RelayURL(), SourceURL: o.ListURL, LoopbackHosts: loopback,
		Bootstrap:       bootstrap.Config{Workers: o.Workers, PageLimit: o.PageLimit, Enumerate: o.Enumerate},
		MemoryBodyBytes: 16 << 10, AttemptTimeout: o.AttemptTimeout,
		JobBackoffBase: 10 * time.Millisecond, JobBackoffMax: 50 * time.Millisecond,
		CaptureWait:   o.CaptureWait,
		RetryInterval: o.RetryInterval, RetryMaxDelay: o.RetryMaxDelay, RetryScanPeriod: o.ScanPeriod,
		Logger: logger(t), OnPhase: nd.setPhase,
	})
	if err != nil {
		t.Fatalf("start node: %v", err)
	}
	nd.store, nd.w, nd.retrier = nd.n.Store(), nd.n.Writer(), nd.n.Retrier()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nd.addr = ln.Addr().String()
	nd.http = &http.Server{Handler: nd.n.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = nd.http.Serve(ln) }()
	ctx, cancel := context.WithCancel(context.Background())
	nd.cancel = cancel
	go func() { nd.exit <- nd.n.Run(ctx) }()
	return nd
}

func (nd *node) setPhase(p archive.Phase) {
	select {
	case nd.phaseCh <- p:
	default:
	}
}

// Phase is the phase the lifecycle last reported.
func (nd *node) Phase() archive.Phase { return nd.n.Health().Phase() }

// exited returns the run's end if it has ended on its own.
func (nd *node) exited() (error, bool) {
	select {
	case err := <-nd.exit:
		nd.once.Do(func() { nd.err = err })
		nd.exit <- err
		return err, true
	default:
		return nil, false
	}
}

// lifecycleErr is what the lifecycle returned (nil before it returned).
func (nd *node) lifecycleErr() error { return nd.n.LifecycleErr() }

// waitExit waits up to d for the run to end on its own.
func (nd *node) waitExit(d time.Duration) (error, bool) {
	select {
	case err := <-nd.exit:
		nd.exit <- err
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// stop ends the run (the process ending: SIGTERM or a kill after the
// fact — every commit is synced, so what survives is the same) and closes
// everything in serve's order. It returns the run's error.
func (nd *node) stop() error {
	nd.t.Helper()
	nd.cancel()
	var err error
	select {
	case err = <-nd.exit:
		nd.exit <- err
	case <-time.After(30 * time.Second):
		nd.t.Fatal("the lifecycle did not stop within 30 s of its context ending")
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = nd.http.Shutdown(shutdown)
	func() {
		defer func() { recover() }() // Pebble may panic closing after a failed write
		nd.n.Close()
	}()
	return err
}

// kill is SIGKILL at this instant: from now on no write reaches the
// disk (fs ignores syncs), the run is stopped and closed, and fs is reset
// to what was synced before the kill. fs must be the vfs.NewStrictMem the
// node runs on.
func (nd *node) kill(fs *vfs.MemFS) {
	nd.t.Helper()
	fs.SetIgnoreSyncs(true)
	_ = nd.stop()
	fs.ResetToSyncedState()
	fs.SetIgnoreSyncs(false)
}

// get fetches path from the node's HTTP listener over real TCP.
func (nd *node) get(path string) (int, string, error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + nd.addr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitFor polls cond every 20 ms until it holds, failing the test after d
// or if the run ends on its own.
func (nd *node) waitFor(d time.Duration, what string, cond func() bool) {
	nd.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if err, ok := nd.exited(); ok {
			nd.t.Fatalf("waiting for %s: the run ended: %v", what, err)
		}
		if time.Now().After(deadline) {
			nd.t.Fatalf("no %s within %v (phase %s)", what, d, nd.Phase())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// converged waits until the node is in steady state, has applied every
// firehose event the network emitted, the traffic driver (if any) is done,
// and two retry passes that started after that found nothing due.
func (nd *node) converged(d time.Duration, drv *driver) {
	nd.t.Helper()
	var after uint64
	nd.waitFor(d, "convergence", func() bool {
		if nd.Phase() != archive.PhaseSteadyState || (drv != nil && !drv.finished()) {
			return false
		}
		c, err := nd.store.RelayCursor()
		if err != nil || c != uint64(nd.net.Status().Seq) {
			return false
		}
		rs := nd.retrier.Status()
		if after == 0 {
			after = rs.Passes + 1
		}
		return rs.Passes >= after+2 && rs.Due == 0 && rs.InFlight == 0
	})
}

// states reads every repo state of the node's store.
func (nd *node) states() map[string]archive.RepoState {
	nd.t.Helper()
	out := map[string]archive.RepoState{}
	if err := nd.store.ScanRepos(func(did string, st archive.RepoState) error {
		out[did] = st
		return nil
	}); err != nil {
		nd.t.Fatalf("scan repos: %v", err)
	}
	return out
}

// verify opens the store in fs (no run may hold it) and checks the
// oracle's invariants: seqs strictly increase, per-DID revs never go
// backwards, and the fold of the archive equals the network's current
// records for every active or deleted account. It returns the number of
// accounts checked.
func verify(t *testing.T, n *oracle.Network, fs vfs.FS) int {
	t.Helper()
	s := reopenStore(t, fs)
	defer s.Close()
	f, stats, err := check.Archive(s)
	if err != nil {
		t.Fatalf("archive walk: %v", err)
	}
	checked, bad := check.Compare(f, n.World(), nil)
	if len(bad) > 0 {
		t.Fatalf("%d of %d accounts differ from the network:\n%s", len(bad), checked, check.Describe(bad, 8))
	}
	t.Logf("fold = ground truth for %d accounts (%d events, tip %d)", checked, stats.Events, stats.Tip)
	return checked
}

// reopenStore opens the store in fs, which no run may hold; the caller
// closes it.
func reopenStore(t *testing.T, fs vfs.FS) *archive.Store {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: fs, Logger: logger(t), OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		t.Fatalf("reopen the store: %v", err)
	}
	return s
}

// pdsRequests is the getRepo requests that reached a PDS host, per DID.
func pdsRequests(n *oracle.Network) map[string]int {
	out := map[string]int{}
	for did, c := range n.AllRepoCounts() {
		out[did] = c.Requests
	}
	return out
}

// driver emits seeded live traffic: record creates, updates and deletes
// on accounts active when it starts (never a status change, so which
// accounts are inactive stays the plan's decision). Only accounts in
// targets are touched when targets is set.
type driver struct {
	n       *oracle.Network
	rng     *rand.Rand
	events  int
	every   time.Duration
	targets []string

	done    chan struct{}
	stop    chan struct{}
	emitted atomic.Int64
	err     atomic.Value
}

func newDriver(n *oracle.Network, seed int64, events int, every time.Duration, targets []string) *driver {
	return &driver{n: n, rng: rand.New(rand.NewPCG(uint64(seed), 0x5ce7a210)), events: events, every: every,
		targets: targets, done: make(chan struct{}), stop: make(chan struct{})}
}

// start runs the driver until it has emitted its events or close.
func (d *driver) start(t *testing.T) *driver {
	if len(d.targets) == 0 {
		for _, a := range d.n.World().Accounts() {
			if a.Active {
				d.targets = append(d.targets, a.DID)
			}
		}
	}
	t.Cleanup(d.close)
	go d.run()
	return d
}

func (d *driver) run() {
	defer close(d.done)
	tick := time.NewTicker(d.every)
	defer tick.Stop()
	for i := 0; i < d.events; i++ {
		select {
		case <-d.stop:
			return
		case <-tick.C:
		}
		did := d.targets[d.rng.IntN(len(d.targets))]
		op := d.rng.IntN(10)
		_, err := d.n.Emit(func(w *world.World) (world.Event, error) {
			recs := w.Records(did)
			var paths []string
			for p := range recs {
				paths = append(paths, p)
			}
			if len(paths) == 0 || op < 5 {
				return w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{
					"$type": "app.bsky.feed.post", "text": fmt.Sprintf("scenario %d", i), "createdAt": "2026-11-30T00:00:00Z"})
			}
			sortStrings(paths)
			p := paths[d.rng.IntN(len(paths))]
			if op < 8 {
				return w.UpdateRecord(did, p, map[string]any{"$type": strings.SplitN(p, "/", 2)[0], "text": fmt.Sprintf("edit %d", i), "createdAt": "2026-11-30T00:00:00Z"})
			}
			return w.DeleteRecord(did, p)
		})
		if err != nil {
			if errors.Is(err, oracle.ErrClosed) {
				return
			}
			d.err.CompareAndSwap(nil, err)
			continue
		}
		d.emitted.Add(1)
	}
}

func (d *driver) finished() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

func (d *driver) close() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
	}
	<-d.done
}

func sortStrings(s []string) {
	// insertion sort: a few dozen paths; keeps the draw independent of map order
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// listRecorder is a reverse proxy in front of the relay that records the
// cursor of every listRepos request (E1, M6: which cursor a run resumed
// from).
type listRecorder struct {
	URL string
	mu  sync.Mutex
	got []string
}

func newListRecorder(t *testing.T, relay string) *listRecorder {
	t.Helper()
	u, err := url.Parse(relay)
	if err != nil {
		t.Fatal(err)
	}
	lr := &listRecorder{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.ErrorLog = log.New(io.Discard, "", 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/com.atproto.sync.listRepos") {
			lr.mu.Lock()
			lr.got = append(lr.got, r.URL.Query().Get("cursor"))
			lr.mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	lr.URL = "http://" + ln.Addr().String()
	return lr
}

// cursors returns the cursors requested so far.
func (lr *listRecorder) cursors() []string {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return append([]string(nil), lr.got...)
}

// pick draws k distinct elements of s with rng (s is not modified).
func pick[T any](rng *rand.Rand, s []T, k int) []T {
	idx := rng.Perm(len(s))
	out := make([]T, 0, k)
	for _, i := range idx[:min(k, len(s))] {
		out = append(out, s[i])
	}
	return out
}
