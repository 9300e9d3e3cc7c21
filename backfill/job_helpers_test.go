package backfill_test

// Shared fixtures of the job tests: an in-process oracle network, a real
// store and writer in a temp dir, a real upstream client, and a fake clock
// whose Sleep records the waits it is asked for and returns at once.

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
	"github.com/prometheus/client_golang/prometheus"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeClock is the jobs' clock: Sleep advances it and records the wait.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.sleeps = append(c.sleeps, d)
	c.mu.Unlock()
	return nil
}

func (c *fakeClock) Sleeps() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.sleeps...)
}

// env is one test's network, store, writer and client.
type env struct {
	t      testing.TB
	net    *oracle.Network
	dir    string
	store  *archive.Store
	w      *archive.Writer
	client *upstream.Client
	reg    *prometheus.Registry
	m      *backfill.Metrics
	clock  *fakeClock
}

func smallWorld(accounts, records int) oracle.Config {
	return oracle.Config{Accounts: accounts, RecordsMean: records, Hosts: 2, Seed: 11, Traffic: oracle.TrafficNone}
}

// bigWorld holds at least one repo of more than 2100 records.
func bigWorld() oracle.Config {
	return oracle.Config{Accounts: 8, RecordsMean: 1500, Hosts: 2, Seed: 11, Traffic: oracle.TrafficNone}
}

func newEnv(t testing.TB, cfg oracle.Config) *env {
	t.Helper()
	n, err := oracle.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	e := &env{t: t, net: n, dir: t.TempDir(), clock: newFakeClock()}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	s, err := archive.Open(e.dir, archive.Options{Logger: quiet, CacheSize: 8 << 20,
		OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		e.t.Fatalf("writer: %v", err)
	}
	c, err := upstream.New(e.net.RelayURL(), upstream.Options{ScratchDir: s.ScratchDir(),
		IdleBodyTimeout: time.Minute, LoopbackHosts: e.net.LoopbackHosts()})
	if err != nil {
		e.t.Fatalf("client: %v", err)
	}
	e.store, e.w, e.client = s, w, c
	e.reg = prometheus.NewRegistry()
	e.m = backfill.NewMetrics(e.reg)
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

// runner builds a runner on the env with the fake clock; mod adjusts it.
func (e *env) runner(mod func(o *backfill.Options)) *backfill.Runner {
	e.t.Helper()
	o := backfill.Options{
		Source: e.client, Writer: e.w, Current: e.store, Metrics: e.m, Logger: quiet,
		Now: e.clock.Now, Sleep: e.clock.Sleep, Rand: func() float64 { return 0.5 },
	}
	if mod != nil {
		mod(&o)
	}
	r, err := backfill.NewRunner(o)
	if err != nil {
		e.t.Fatalf("runner: %v", err)
	}
	return r
}

func (e *env) run(r *backfill.Runner, did string) backfill.Result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.Run(ctx, backfill.Request{DID: did})
	if err != nil {
		e.t.Fatalf("run %s: %v", did, err)
	}
	return res
}

// accounts returns the world's accounts by index.
func (e *env) accounts() []world.Account { return e.net.World().Accounts() }

// activeAccounts returns active accounts with at least minRecords records.
func (e *env) activeAccounts(minRecords int) []world.Account {
	var out []world.Account
	for _, a := range e.accounts() {
		if a.Active && a.Records >= minRecords {
			out = append(out, a)
		}
	}
	return out
}

// rows returns the archived rows by DID.
func (e *env) rows() map[string][]archive.Event {
	e.t.Helper()
	it, err := e.store.Events(1)
	if err != nil {
		e.t.Fatalf("events: %v", err)
	}
	defer it.Close()
	out := map[string][]archive.Event{}
	for it.Next() {
		ev := it.Event().Clone()
		out[ev.DID] = append(out[ev.DID], ev)
	}
	if err := it.Err(); err != nil {
		e.t.Fatalf("events: %v", err)
	}
	return out
}

func (e *env) state(did string) archive.RepoState {
	e.t.Helper()
	st, err := e.store.RepoState(did)
	if err != nil {
		e.t.Fatalf("repo state %s: %v", did, err)
	}
	return st
}

// scratchEmpty fails the test when the scratch dir holds anything.
func (e *env) scratchEmpty() {
	e.t.Helper()
	ents, err := os.ReadDir(e.store.ScratchDir())
	if err != nil {
		e.t.Fatalf("scratch: %v", err)
	}
	if len(ents) != 0 {
		e.t.Fatalf("scratch dir holds %d files, want none", len(ents))
	}
}

// recordPaths returns the world's record paths of did, sorted.
func (e *env) recordPaths(did string) []string {
	var out []string
	for p := range e.net.World().Records(did) {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

func rowPaths(evs []archive.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		if ev.Kind == archive.KindCreate {
			out = append(out, ev.Collection+"/"+ev.RKey)
		}
	}
	sort.Strings(out)
	return out
}

func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return promtest.Value(t, reg, name, labels)
}
