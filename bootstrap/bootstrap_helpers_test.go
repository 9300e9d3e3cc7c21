package bootstrap_test

// Shared fixtures of the bootstrap tests: an in-process oracle network, a
// real store and writer in a temp dir that can be stopped and reopened, a
// real upstream client wrapped to record what enumeration asked for, and
// real backfill jobs. newBubbleEnv builds the same inside a synctest bubble
// (bubble_test.go): the store on an in-memory filesystem and the world
// served from memory instead of over loopback.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/prometheus/client_golang/prometheus"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// listCall is one listRepos request and what it returned.
type listCall struct {
	cursor string
	limit  int
	dids   []string
	next   string
}

// recSource records listRepos pages and the order of getRepo calls.
type recSource struct {
	upstream.RepoSource
	mu      sync.Mutex
	lists   []listCall
	gets    []string
	onList  func(n int) // called before the n-th (0-based) listRepos of this source
	getHook func(did string)
	// dupFirst appends the first DID of the first page to every later
	// page: a relay listing one account twice.
	dupFirst bool
	first    string
}

func (r *recSource) ListRepos(ctx context.Context, cursor string, limit int) (upstream.Page, error) {
	r.mu.Lock()
	n := len(r.lists)
	hook := r.onList
	r.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	pg, err := r.RepoSource.ListRepos(ctx, cursor, limit)
	if r.dupFirst && err == nil && len(pg.Repos) > 0 {
		r.mu.Lock()
		if r.first == "" {
			r.first = pg.Repos[0].DID
		} else {
			pg.Repos = append(pg.Repos, upstream.RepoEntry{DID: r.first, Active: true})
		}
		r.mu.Unlock()
	}
	c := listCall{cursor: cursor, limit: limit, next: pg.Cursor}
	for _, e := range pg.Repos {
		c.dids = append(c.dids, e.DID)
	}
	r.mu.Lock()
	r.lists = append(r.lists, c)
	r.mu.Unlock()
	return pg, err
}

func (r *recSource) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	r.mu.Lock()
	r.gets = append(r.gets, did)
	hook := r.getHook
	r.mu.Unlock()
	if hook != nil {
		hook(did)
	}
	return r.RepoSource.GetRepo(ctx, did)
}

func (r *recSource) calls() []listCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]listCall(nil), r.lists...)
}

func (r *recSource) getOrder() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.gets...)
}

type env struct {
	t      *testing.T
	net    *oracle.Network // nil in a bubble
	world  *world.World
	mem    *memSource // the world served from memory (bubble only)
	fs     vfs.FS     // nil: the OS
	dir    string
	store  *archive.Store
	w      *archive.Writer
	client *upstream.Client
	src    *recSource
	reg    *prometheus.Registry
	bm     *backfill.Metrics
	m      *bootstrap.Metrics
	am     *archive.Metrics
}

func worldCfg(accounts, records int) oracle.Config {
	return oracle.Config{Accounts: accounts, RecordsMean: records, Hosts: 3, Seed: 5, Traffic: oracle.TrafficNone}
}

func newEnv(t *testing.T, cfg oracle.Config) *env {
	t.Helper()
	n, err := oracle.Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("oracle: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	e := &env{t: t, net: n, world: n.World(), dir: t.TempDir()}
	e.open()
	t.Cleanup(e.close)
	return e
}

func (e *env) open() {
	e.t.Helper()
	s, err := archive.Open(e.dir, archive.Options{FS: e.fs, Logger: quiet, CacheSize: 8 << 20,
		OnFatal: func(fe *archive.FatalError) { panic(fe) }})
	if err != nil {
		e.t.Fatalf("open store: %v", err)
	}
	e.reg = prometheus.NewRegistry()
	e.am = archive.NewMetrics(e.reg)
	e.bm = backfill.NewMetrics(e.reg)
	e.m = bootstrap.NewMetrics(e.reg)
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet, Metrics: e.am})
	if err != nil {
		e.t.Fatalf("writer: %v", err)
	}
	e.store, e.w = s, w
	if e.mem != nil {
		e.src = &recSource{RepoSource: e.mem}
		return
	}
	c, err := upstream.New(e.net.RelayURL(), upstream.Options{ScratchDir: s.ScratchDir(), LoopbackHosts: e.net.LoopbackHosts()})
	if err != nil {
		e.t.Fatalf("client: %v", err)
	}
	e.client = c
	e.src = &recSource{RepoSource: c}
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

// reopen simulates a restart: the writer commits what it has queued, the
// store closes, and everything opens again from disk.
func (e *env) reopen() {
	e.close()
	e.open()
}

// boot builds a bootstrap over the env with real jobs; mod adjusts config.
func (e *env) boot(mod func(c *bootstrap.Config, o *backfill.Options)) *bootstrap.Bootstrap {
	e.t.Helper()
	o := backfill.Options{Source: e.src, Writer: e.w, Current: e.store, Metrics: e.bm, Logger: quiet,
		Sleep: func(ctx context.Context, d time.Duration) error { return ctx.Err() }}
	c := bootstrap.Config{Store: e.store, Writer: e.w, Source: e.src, Metrics: e.m, Logger: quiet,
		Workers: 8, PageLimit: 40, Seed: 1}
	if mod != nil {
		mod(&c, &o)
	}
	r, err := backfill.NewRunner(o)
	if err != nil {
		e.t.Fatalf("runner: %v", err)
	}
	c.Jobs = r
	b, err := bootstrap.New(c)
	if err != nil {
		e.t.Fatalf("bootstrap: %v", err)
	}
	return b
}

func (e *env) runToEnd(b *bootstrap.Bootstrap) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.Run(ctx); err != nil {
		e.t.Fatalf("bootstrap run: %v", err)
	}
}

// listed returns the accounts listRepos shows (every status but deleted).
func (e *env) listed() []world.Account {
	var out []world.Account
	for _, a := range e.world.Accounts() {
		if a.Status != world.StatusDeleted {
			out = append(out, a)
		}
	}
	return out
}

// activeListed is how many listed accounts are active (each fetched once).
func (e *env) activeListed() int {
	n := 0
	for _, a := range e.listed() {
		if a.Active {
			n++
		}
	}
	return n
}

// states reads every repo state from the store.
func (e *env) states() map[string]archive.RepoState {
	e.t.Helper()
	out := map[string]archive.RepoState{}
	for _, a := range e.world.Accounts() {
		st, err := e.store.RepoState(a.DID)
		if errors.Is(err, archive.ErrNotFound) {
			continue
		}
		if err != nil {
			e.t.Fatalf("state %s: %v", a.DID, err)
		}
		out[a.DID] = st
	}
	return out
}

// rowCounts counts archived create rows by DID.
func (e *env) rowCounts() map[string]int {
	e.t.Helper()
	it, err := e.store.Events(1)
	if err != nil {
		e.t.Fatalf("events: %v", err)
	}
	defer it.Close()
	out := map[string]int{}
	for it.Next() {
		if it.Event().Kind == archive.KindCreate {
			out[it.Event().DID]++
		}
	}
	if err := it.Err(); err != nil {
		e.t.Fatalf("events: %v", err)
	}
	return out
}

func (e *env) checkpoint() (archive.ListCursor, bool) {
	e.t.Helper()
	c, err := e.store.ListCursor(false)
	if errors.Is(err, archive.ErrNotFound) {
		return c, false
	}
	if err != nil {
		e.t.Fatalf("checkpoint: %v", err)
	}
	return c, true
}

func terminal(st archive.RepoState) bool {
	return !st.Active || st.Status == archive.StatusComplete || st.Status == archive.StatusFailed ||
		st.Status == archive.StatusUnavailable || st.Status == archive.StatusPending
}

func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return promtest.Value(t, reg, name, labels)
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	promtest.Eventually(t, d, what, cond)
}
