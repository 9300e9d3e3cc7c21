package firehose

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// offlineIdentity is a strict resolver whose directory is unreachable: the
// #identity frames of the run tests only invalidate (their background
// refreshes fail, counted), and the consumer runs its verification
// pipeline with n verifiers.
func offlineIdentity(t *testing.T) *ident.Resolver {
	t.Helper()
	id := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Mode: ident.ModeStrict, Retries: -1})
	t.Cleanup(id.Close)
	return id
}

// TestPipelineKeepsAccountOrder: each of many accounts, its key cached,
// commits with its old key, announces a rotation (#identity), then commits
// with its new key, all queued on the relay before the consumer starts, so
// the three frames of an account are in the verification window together.
// Checked in order, the first commit verifies with the cached old key and
// the #identity drops it before the last commit is checked; a pipeline
// that checked an account's frames out of order would verify the first
// commit against the new document and drop it. Every commit is archived,
// and no verification fails.
func TestPipelineKeepsAccountOrder(t *testing.T) {
	const accounts = 48
	n := startNetwork(t, oracle.Config{Seed: 41, Accounts: accounts})
	dids := activeDIDs(n.World())
	reg := prometheus.NewRegistry()
	// Web: the #identity frames' handles are checked against the simulated
	// network; without it each is a DNS lookup and an HTTPS request to
	// <handle> on the real network, which on a machine without one can
	// hold the account's frames (and so every later unit) past the wait.
	id := ident.New(ident.Config{PLC: n.RelayURL(), Web: n.RelayURL(), Mode: ident.ModeStrict, Metrics: ident.NewMetrics(reg)})
	t.Cleanup(id.Close)
	for _, did := range dids {
		if _, _, err := id.Lookup(context.Background(), did); err != nil {
			t.Fatal(err)
		}
	}
	var want []oracle.Emitted
	for _, did := range dids {
		e, err := n.Emit(like(did))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
		if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(did) }); err != nil {
			t.Fatal(err)
		}
		if e, err = n.Emit(like(did)); err != nil {
			t.Fatal(err)
		}
		want = append(want, e)
	}
	checkArchived(t, ingestAll(t, n, id, 8), want)
	if v := promtest.Value(t, reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "signature"}); v != 0 {
		t.Errorf("%v signature failures, want 0", v)
	}
	if v := promtest.Value(t, reg, "backstream_verify_total", map[string]string{"path": "live", "outcome": "ok"}); v != float64(2*len(dids)) {
		t.Errorf("%v commits verified, want %d", v, 2*len(dids))
	}
}

// brokenIdentStore fails every read of the durable identity copy.
type brokenIdentStore struct{}

func (brokenIdentStore) Ident(string) (archive.Ident, error) {
	return archive.Ident{}, errors.New("injected store read error")
}

// TestRunIdentityStoreFails: a commit whose account's key cannot be read
// from the store (our own persistence failing) ends Run with that error,
// nothing past it accepted, while the relay keeps the connection open.
func TestRunIdentityStoreFails(t *testing.T) {
	for _, verifiers := range []int{1, 3} {
		t.Run(fmt.Sprintf("verifiers=%d", verifiers), func(t *testing.T) {
			w := buildWorld(t, 2)
			a := activeDIDs(w)[0]
			frames := []msg{{seq: 1, data: encode(t, must(t)(like(a)(w)), 1)}, {seq: 2, data: encode(t, must(t)(like(a)(w)), 2)}}
			relay := newScriptRelay(t, func(_ int, cursor *int64) session { return session{msgs: after(frames, cursor), hold: true} })
			id := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Mode: ident.ModeStrict, Store: brokenIdentStore{}})
			t.Cleanup(id.Close)
			c, _ := newConsumer(t, Config{Relay: relay.url(), Writer: newWriter(t, openStore(t), true), Mode: ModeCapture,
				Identity: id, Verifiers: verifiers})
			r := startRun(t, c)
			err := r.wait(10 * time.Second)
			if err == nil || err == errTimeout || !strings.Contains(err.Error(), "injected store read error") {
				t.Fatalf("Run returned %v, want the store's error", err)
			}
			if c.LastAccepted() != 0 {
				t.Fatalf("accepted %d past a frame that could not be verified", c.LastAccepted())
			}
		})
	}
}

// gatedPLC proxies DID-document requests to the simulated network, each
// held until `want` are in flight together (or a second has passed), and
// keeps the peak in flight.
type gatedPLC struct {
	next http.Handler
	want int

	mu       sync.Mutex
	inflight int
	peak     int
	reached  chan struct{}
}

func (g *gatedPLC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	g.inflight++
	if g.peak < g.want && g.inflight >= g.want {
		close(g.reached) // once: the peak only grows
	}
	g.peak = max(g.peak, g.inflight)
	g.mu.Unlock()
	select {
	case <-g.reached:
	case <-time.After(time.Second): // only when the requests come one by one
	}
	g.next.ServeHTTP(w, r)
	g.mu.Lock()
	g.inflight--
	g.mu.Unlock()
}

// TestPipelineResolvesAhead: accounts never seen have their documents
// resolved as soon as their frames are read, together, not one by one by
// the verifier that reaches them: with two verifiers, the first
// commits of several new accounts have their DID-document requests in
// flight at once, and every commit is archived. A pipeline that resolved
// only in its verifiers would have at most one request per verifier (two)
// in flight.
func TestPipelineResolvesAhead(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 43, Accounts: 10})
	dids := activeDIDs(n.World())
	const want = 4
	relay, err := url.Parse(n.RelayURL())
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedPLC{next: httputil.NewSingleHostReverseProxy(relay), want: want, reached: make(chan struct{})}
	plc := httptest.NewServer(g)
	t.Cleanup(plc.Close)
	id := ident.New(ident.Config{PLC: plc.URL, Mode: ident.ModeStrict})
	t.Cleanup(id.Close)
	var emitted []oracle.Emitted
	for _, did := range dids {
		e, err := n.Emit(like(did))
		if err != nil {
			t.Fatal(err)
		}
		emitted = append(emitted, e)
	}
	s := ingestAll(t, n, id, 2)
	g.mu.Lock()
	peak := g.peak
	g.mu.Unlock()
	if peak < want {
		t.Errorf("at most %d DID-document requests in flight together, want %d", peak, want)
	}
	checkArchived(t, s, emitted)
}

// ingestAll runs a live consumer verifying with id on verifiers from
// cursor 0 until it has caught up with n, and returns its store.
func ingestAll(t *testing.T, n *oracle.Network, id *ident.Resolver, verifiers int) *archive.Store {
	t.Helper()
	s := openStore(t)
	zero := int64(0)
	c, _ := newConsumer(t, Config{Relay: n.RelayURL(), Writer: newWriter(t, s, false), Mode: ModeLive, Cursor: &zero,
		Identity: id, Verifiers: verifiers})
	startRun(t, c)
	waitCaughtUp(t, n, c, nil)
	return s
}

// checkArchived fails t for every record of the emitted commits missing
// from s's log.
func checkArchived(t *testing.T, s *archive.Store, emitted []oracle.Emitted) {
	t.Helper()
	got := map[string]bool{}
	for _, r := range readLog(t, s, false) {
		got[r.DID+" "+r.Collection+"/"+r.RKey] = true
	}
	for _, e := range emitted {
		for _, p := range opPaths(e) {
			if !got[e.Event.DID+" "+p] {
				t.Errorf("%s: commit %s (seq %d) not archived", e.Event.DID, p, e.Seq)
			}
		}
	}
}

// heldServer answers like next, except that a request whose host or path
// contains hold waits until release is closed (or its client gives up).
func heldServer(t *testing.T, next http.Handler, hold string) (srv *httptest.Server, release func()) {
	t.Helper()
	ch := make(chan struct{})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Host+r.URL.Path, hold) {
			select {
			case <-ch:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	}))
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(func() { release(); srv.Close() })
	return srv, release
}

// TestPipelineWaitHoldsOnlyItsLane: with one verifier, an account whose
// #identity waits for its handle's host and an account never seen whose
// commit waits for the DID directory hold up neither the commits of the
// other accounts (on other lanes: checked and verified meanwhile) nor the
// verifier's slot (free while they wait). A pipeline whose checks wait on
// the verifiers themselves, or that holds the slot across the directory's
// answer, leaves the other accounts' commits unchecked.
func TestPipelineWaitHoldsOnlyItsLane(t *testing.T) {
	// Enough accounts that at least 4 are on neither held lane whatever
	// the pipeline's random lane seed (with 6 others, 48 draws of 100,000
	// left fewer than 4).
	n := startNetwork(t, oracle.Config{Seed: 45, Accounts: 24})
	w := n.World()
	dids := activeDIDs(w)
	slowHandle, unseen := dids[0], dids[1]
	relay, err := url.Parse(n.RelayURL())
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(relay)
	plc, releasePLC := heldServer(t, proxy, unseen)
	host, releaseHost := heldServer(t, proxy, "slow.test")
	id := ident.New(ident.Config{PLC: plc.URL, Web: host.URL, Mode: ident.ModeStrict, Timeout: time.Minute, HandleTimeout: time.Minute})
	t.Cleanup(id.Close)
	ctx := context.Background()
	for _, did := range dids[2:] {
		if _, _, err := id.Lookup(ctx, did); err != nil {
			t.Fatal(err)
		}
	}
	c := &Consumer{cfg: Config{Identity: id}}
	p := newPipeline(c, 1)
	var wg sync.WaitGroup
	for _, in := range p.lanes {
		wg.Add(1)
		go func() { defer wg.Done(); p.lane(ctx, in) }()
	}
	t.Cleanup(func() {
		for _, in := range p.lanes {
			close(in)
		}
		wg.Wait()
	})
	send := func(ev world.Event) *job {
		f, err := upstream.DecodeFrame(encode(t, ev, 1))
		if err != nil {
			t.Fatal(err)
		}
		j := &job{f: f, done: make(chan struct{}, 1)}
		p.dispatch(j)
		return j
	}
	post := func(did string) world.Event {
		return must(t)(w.CreateRecord(did, "app.bsky.feed.post", "", map[string]any{
			"$type": "app.bsky.feed.post", "text": "lane", "createdAt": "2024-01-01T00:00:00Z"}))
	}
	var otherDIDs []string
	for _, did := range dids[2:] {
		if l := p.laneOf(did); l != p.laneOf(slowHandle) && l != p.laneOf(unseen) {
			otherDIDs = append(otherDIDs, did)
		}
	}
	if len(otherDIDs) < 4 { // before anything is held: the cleanup does not wait for it
		t.Fatalf("only %d accounts on other lanes", len(otherDIDs))
	}
	held := []*job{send(must(t)(w.SetHandle(slowHandle, "slow.test"))), send(post(unseen))}
	var others []*job
	for _, did := range otherDIDs {
		others = append(others, send(post(did)))
	}
	for i, j := range others {
		select {
		case <-j.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("commit %d of another account not checked while two lanes wait for the network", i)
		}
		if j.v.outcome != ident.OutcomeOK || j.v.err != nil {
			t.Fatalf("commit %d: outcome %q, err %v", i, j.v.outcome, j.v.err)
		}
	}
	for i, j := range held {
		select {
		case <-j.done:
			t.Fatalf("held frame %d checked before its answer", i)
		default:
		}
	}
	// The held checks leave their slots once they find they must wait for
	// the network (their lanes may not have got there yet under load).
	waitFor(t, 30*time.Second, "no verifier slot held while the checks wait for the network", func() bool { return len(p.gate) == 0 })
	releasePLC()
	releaseHost()
	for i, j := range held {
		<-j.done
		if j.v.err != nil || (j.f.Identity == nil && j.v.outcome != ident.OutcomeOK) {
			t.Fatalf("held frame %d: outcome %q, err %v", i, j.v.outcome, j.v.err)
		}
	}
	if len(p.gate) != 0 {
		t.Fatalf("%d verifier slots held after every check", len(p.gate))
	}
}
