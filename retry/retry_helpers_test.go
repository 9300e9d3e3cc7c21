package retry_test

// Shared fixtures of the retry tests: an in-process oracle network, a real
// Pebble store (under an errorfs wrapper whose fault a test can arm) and
// writer, a real upstream client wrapped to observe getRepo concurrency per
// host, real backfill jobs, and the live firehose consumer when a test needs
// live commits.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/upstream"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// source wraps the real client: it tracks getRepo calls in flight per PDS
// host (from the world's placement of the DID) and their maximum, and runs
// an optional hook after a download succeeded (the seam between fetch and
// submit).
type source struct {
	upstream.RepoSource
	hostOf func(did string) string

	mu        sync.Mutex
	inflight  map[string]int
	maxFlight map[string]int
	calls     map[string]int
	afterGet  func(did string, n int) // n: 1-based call count of did
}

func (s *source) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	h := s.hostOf(did)
	s.mu.Lock()
	s.inflight[h]++
	s.maxFlight[h] = max(s.maxFlight[h], s.inflight[h])
	s.calls[did]++
	n := s.calls[did]
	hook := s.afterGet
	s.mu.Unlock()
	dl, err := s.RepoSource.GetRepo(ctx, did)
	s.mu.Lock()
	s.inflight[h]--
	s.mu.Unlock()
	if err == nil && hook != nil {
		hook(did, n)
	}
	return dl, err
}

// reset forgets the calls and concurrency seen so far.
func (s *source) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.calls)
	clear(s.maxFlight)
}

func (s *source) max(host string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maxFlight[host]
}

func (s *source) callsOf(did string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[did]
}

type env struct {
	t      *testing.T
	net    *oracle.Network
	dir    string
	fault  atomic.Bool // armed: every sstable read fails
	store  *archive.Store
	w      *archive.Writer
	client *upstream.Client
	src    *source
	jobs   *backfill.Runner
	reg    *prometheus.Registry
	m      *retry.Metrics
	hosts  []string // PDS host[:port] by world host index
}

func newEnv(t *testing.T, cfg oracle.Config) *env {
	t.Helper()
	n, err := oracle.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	e := &env{t: t, net: n, dir: t.TempDir()}
	for _, u := range n.HostURLs() {
		e.hosts = append(e.hosts, strings.TrimPrefix(strings.TrimPrefix(u, "http://"), "https://"))
	}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	fs := errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op, path string) error {
		if e.fault.Load() && op == errorfs.OpFileReadAt && strings.HasSuffix(path, ".sst") {
			return errors.New("injected EIO")
		}
		return nil
	}))
	s, err := archive.Open(e.dir, archive.Options{FS: fs, Logger: quiet, CacheSize: 1 << 20, MemTableSize: 4 << 20,
		OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	e.reg = prometheus.NewRegistry()
	e.m = retry.NewMetrics(e.reg)
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet, LiveLogBytes: 1 << 20, Metrics: archive.NewMetrics(e.reg)})
	if err != nil {
		e.t.Fatalf("writer: %v", err)
	}
	c, err := upstream.New(e.net.RelayURL(), upstream.Options{ScratchDir: s.ScratchDir(), LoopbackHosts: e.net.LoopbackHosts()})
	if err != nil {
		e.t.Fatalf("client: %v", err)
	}
	e.store, e.w, e.client = s, w, c
	e.src = &source{RepoSource: c, hostOf: e.hostOf, inflight: map[string]int{}, maxFlight: map[string]int{}, calls: map[string]int{}}
	e.jobs = e.newJobs(nil)
}

// newJobs builds the job runner the way the retry runner wants it: the
// retry schedule for failures, no in-job 429 budget (the runner parks).
func (e *env) newJobs(mod func(*backfill.Options)) *backfill.Runner {
	e.t.Helper()
	o := retry.Backoff{Interval: time.Minute, MaxDelay: time.Hour}.JobOptions(backfill.Options{Source: e.src, Writer: e.w, Current: e.store, Logger: quiet,
		Retries: -1, AttemptTimeout: time.Minute,
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() }})
	if mod != nil {
		mod(&o)
	}
	r, err := backfill.NewRunner(o)
	if err != nil {
		e.t.Fatalf("jobs: %v", err)
	}
	return r
}

func (e *env) close() {
	if e.w != nil {
		_ = e.w.Close()
		e.w = nil
	}
	if e.client != nil {
		e.client.Close()
		e.client = nil
	}
	if e.store != nil {
		_ = e.store.Close()
		e.store = nil
	}
}

func (e *env) reopen() {
	e.close()
	e.open()
}

func (e *env) hostOf(did string) string {
	a, ok := e.net.World().Account(did)
	if !ok {
		return ""
	}
	return e.hosts[a.Host]
}

// runner builds a retry runner over the env.
func (e *env) runner(mod func(*retry.Config)) *retry.Runner {
	e.t.Helper()
	return newRunner(e.t, retry.Config{Store: e.store, Writer: e.w, Jobs: e.jobs, Metrics: e.m}, mod)
}

// newRunner builds a retry runner from c with the tests' schedule (1 min
// doubling to 1 h, a pass every 50 ms); mod adjusts it.
func newRunner(t *testing.T, c retry.Config, mod func(*retry.Config)) *retry.Runner {
	t.Helper()
	c.Logger, c.Interval, c.MaxDelay, c.ScanPeriod = quiet, time.Minute, time.Hour, 50*time.Millisecond
	if mod != nil {
		mod(&c)
	}
	r, err := retry.New(c)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	return r
}

// activeByHost returns the active accounts with records, grouped by host index.
func (e *env) activeByHost() map[int][]world.Account {
	out := map[int][]world.Account{}
	for _, a := range e.net.World().Accounts() {
		if a.Active && a.Records > 0 {
			out[a.Host] = append(out[a.Host], a)
		}
	}
	return out
}

// seedFailed writes dids as failed, active, due now, on their world host,
// with one earlier attempt.
func (e *env) seedFailed(accts []world.Account) {
	e.t.Helper()
	var ups []archive.RepoUpdate
	for _, a := range accts {
		ups = append(ups, failedDue(a.DID, e.hosts[a.Host]))
	}
	e.apply(&archive.Unit{Repos: ups})
}

// failedDue is the state seedFailed writes for one repo.
func failedDue(did, host string) archive.RepoUpdate {
	return archive.RepoUpdate{DID: did,
		Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldAttempts | archive.FieldError | archive.FieldNextAttempt,
		State: archive.RepoState{Status: archive.StatusFailed, Active: true, Host: host, Attempts: 1,
			ErrClass: "seeded", LastError: "seeded", NextAttemptUS: 1}}
}

func (e *env) apply(u *archive.Unit) archive.Receipt {
	e.t.Helper()
	rc, err := e.w.Apply(context.Background(), u)
	if err != nil || rc.Refused != nil {
		e.t.Fatalf("apply: %v %v", err, rc.Refused)
	}
	return rc
}

// archiveAll backfills every active account (non-replacement jobs, as
// bootstrap does) and records inactive ones as inactive not_started.
func (e *env) archiveAll() {
	e.t.Helper()
	ctx := context.Background()
	for _, a := range e.net.World().Accounts() {
		if a.Status == world.StatusDeleted {
			continue
		}
		if !a.Active {
			e.apply(&archive.Unit{Repos: []archive.RepoUpdate{{DID: a.DID,
				Fields: archive.FieldStatus | archive.FieldActive | archive.FieldAccountStatus,
				State:  archive.RepoState{Status: archive.StatusNotStarted, AccountStatus: a.Status}}}})
			continue
		}
		res, err := e.jobs.Run(ctx, backfill.Request{DID: a.DID})
		if err != nil || res.Status != archive.StatusComplete {
			e.t.Fatalf("backfill %s: %v %v %v", a.DID, res.Status, res.Err, err)
		}
	}
	e.src.reset()
}

func (e *env) state(did string) archive.RepoState {
	e.t.Helper()
	st, err := e.store.RepoState(did)
	if err != nil {
		e.t.Fatalf("state %s: %v", did, err)
	}
	return st
}

// live runs the live firehose consumer from the network's current head
// until the test ends.
func (e *env) live() *firehose.Consumer {
	e.t.Helper()
	head := e.net.Status().Seq
	c, err := firehose.New(firehose.Config{Relay: e.net.RelayURL(), Writer: e.w, Mode: firehose.ModeLive, Cursor: &head, Logger: quiet})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		<-done
	})
	return c
}

// post emits a new post of did saying text, live.
func (e *env) post(did, text string) (oracle.Emitted, error) {
	return e.net.Emit(func(w *world.World) (world.Event, error) {
		return w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{"$type": "app.bsky.feed.post", "text": text, "createdAt": "2024-01-01T00:00:00Z"})
	})
}

// emit applies a world mutation through the network (firehose included).
func (e *env) emit(f func(w *world.World) (world.Event, error)) oracle.Emitted {
	e.t.Helper()
	em, err := e.net.Emit(f)
	if err != nil {
		e.t.Fatalf("emit: %v", err)
	}
	return em
}

// fold replays the archive per DID (oracle/check's fold: create/update
// set, delete removes, a deleted account clears) and checks that seqs
// strictly increase and per-DID revs never go backwards (D3).
func fold(t *testing.T, s *archive.Store) map[string]map[string]string {
	t.Helper()
	f, _, err := check.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// sameRecords compares a folded record set with the world's.
func (e *env) sameRecords(did string, got map[string]string) bool {
	want := e.net.World().Records(did)
	if len(want) != len(got) {
		return false
	}
	for p, c := range want {
		if got[p] != c.String() {
			return false
		}
	}
	return true
}

func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return promtest.Value(t, reg, name, labels)
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	promtest.Eventually(t, d, what, cond)
}

// runBG runs r.Run in the background; stop cancels it and returns its error.
func runBG(r *retry.Runner) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- r.Run(ctx) }()
	var once sync.Once
	var err error
	return func() error {
		once.Do(func() {
			cancel()
			err = <-ch
		})
		return err
	}
}
