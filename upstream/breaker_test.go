package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/internal/promtest"
)

const probeHold = 10 * time.Second // the probe hold of these tests' breakers: a connect timeout

func newTestBreaker(reg prometheus.Registerer) *breaker {
	return newBreaker("relay.test:443", probeHold, newTrips(slog.New(slog.DiscardHandler), NewMetrics(reg)))
}

// mustAllow fails unless host may be asked (probe as wanted); it returns
// the probe (allow's).
func mustAllow(t *testing.T, b *breaker, host string, wantProbe bool, when string) uint64 {
	t.Helper()
	probe, err := b.allow(host)
	if err != nil || (probe != 0) != wantProbe {
		t.Fatalf("%s: allow(%s) = probe %v, %v; want probe %v, no error", when, host, probe, err, wantProbe)
	}
	return probe
}

// mustRefuse fails unless a request to host fails at once as down.
func mustRefuse(t *testing.T, b *breaker, host, when string) {
	t.Helper()
	probe, err := b.allow(host)
	if err == nil || probe != 0 || !errors.Is(err, ErrHostDown) {
		t.Fatalf("%s: allow(%s) = probe %v, %v; want ErrHostDown", when, host, probe, err)
	}
}

// TestBreakerOpensAfterThreeMisses: 3 tries in a row without an answer
// find a host down; a request to it then fails at once with an error that
// matches ErrHostDown, classifies transient and says since when; other
// hosts are untouched. Any answer resets the count. In fake time.
func TestBreakerOpensAfterThreeMisses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		b := newTestBreaker(reg)
		const h = "pds.test:443"
		start := time.Now()
		for i := range breakerMisses - 1 {
			mustAllow(t, b, h, false, fmt.Sprintf("after %d misses", i))
			b.done(h, 0, tryNoAnswer)
		}
		b.done(h, 0, tryAnswered) // an answer: the count starts again
		for i := range breakerMisses - 1 {
			mustAllow(t, b, h, false, fmt.Sprintf("after an answer and %d misses", i))
			b.done(h, 0, tryNoAnswer)
			time.Sleep(time.Second)
		}
		b.done(h, 0, tryOther) // says nothing of the host
		mustAllow(t, b, h, false, "after 2 misses and a try that says nothing")
		b.done(h, 0, tryNoAnswer)
		mustRefuse(t, b, h, "after 3 misses in a row")
		mustAllow(t, b, "other.test:443", false, "another host")
		_, err := b.allow(h)
		e := &Error{Op: "getRepo", Host: "pds.test", Err: err, kind: ErrHostDown}
		if Classify(e) != ClassTransient || !errors.Is(e, ErrTransient) || Answered(e) {
			t.Fatalf("host down: class %v, transient %v, answered %v; want transient, not answered", Classify(e), errors.Is(e, ErrTransient), Answered(e))
		}
		if since := start.Add(breakerMisses - 1).UTC().Format(time.RFC3339); !strings.Contains(e.Error(), "has not answered since "+since) {
			t.Fatalf("host down error %q does not say since when (%s)", e.Error(), since)
		}
		if until, ok := HostDownUntil(e); !ok || !until.Equal(time.Now().Add(breakerCoolOff)) {
			t.Fatalf("HostDownUntil = %v, %v; want %v", until, ok, time.Now().Add(breakerCoolOff))
		}
		if n := promtest.Value(t, reg, "backstream_upstream_host_down_total", nil); n != 1 {
			t.Fatalf("host_down_total = %v, want 1", n)
		}
		if n := promtest.Value(t, reg, "backstream_upstream_getrepo_limited_total", map[string]string{"limit": limitHostDown}); n != 2 {
			t.Fatalf(`limited_total{host_down} = %v, want 2 (the requests refused)`, n)
		}
	})
}

// TestBreakerHalfOpenProbe: when the cool-off ends one request is let
// through (the probe) while the others still fail at once; a probe without
// an answer reopens the breaker for twice the cool-off, up to its ceiling;
// a probe that did not go (tryOther) lets the next request probe; a probe
// whose outcome never comes holds the host one connect timeout at most; an
// answer closes it. In fake time.
func TestBreakerHalfOpenProbe(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		b := newTestBreaker(reg)
		const h = "pds.test:443"
		for range breakerMisses {
			b.done(h, 0, tryNoAnswer)
		}
		want := breakerCoolOff
		for round := range 8 {
			time.Sleep(want - time.Millisecond)
			mustRefuse(t, b, h, fmt.Sprintf("round %d: within the %v cool-off", round, want))
			time.Sleep(time.Millisecond)
			probe := mustAllow(t, b, h, true, fmt.Sprintf("round %d: the %v cool-off over", round, want))
			mustRefuse(t, b, h, fmt.Sprintf("round %d: while the probe runs", round))
			b.done(h, probe, tryNoAnswer)
			want = min(2*want, breakerCoolOffMax)
		}
		if want != breakerCoolOffMax {
			t.Fatalf("cool-off after 8 failed probes %v, want its ceiling %v", want, breakerCoolOffMax)
		}
		time.Sleep(want)
		probe := mustAllow(t, b, h, true, "cool-off over")
		b.done(h, probe, tryOther) // the probe was refused before it went
		mustAllow(t, b, h, true, "the probe did not go: the next request")
		// Its outcome never comes: another probe one connect timeout on.
		time.Sleep(probeHold - time.Millisecond)
		mustRefuse(t, b, h, "within the lost probe's hold")
		time.Sleep(time.Millisecond)
		probe = mustAllow(t, b, h, true, "the lost probe's hold over")
		b.done(h, probe, tryAnswered)
		mustAllow(t, b, h, false, "the probe answered")
		if len(b.hosts) != 0 {
			t.Fatalf("a host that answered is remembered: %v", b.hosts)
		}
		// Closed, the count starts again: 3 more misses to be down.
		for range breakerMisses - 1 {
			b.done(h, 0, tryNoAnswer)
		}
		mustAllow(t, b, h, false, "closed, 2 misses")
		if n := promtest.Value(t, reg, "backstream_upstream_host_down_total", nil); n != 9 {
			t.Fatalf("host_down_total = %v, want 9 (found down, then 8 failed probes)", n)
		}
	})
}

// TestBreakerRelayNeverBroken: the relay's own tries never open the
// breaker, however many go unanswered.
func TestBreakerRelayNeverBroken(t *testing.T) {
	b := newTestBreaker(nil)
	for range 100 {
		b.done("relay.test:443", 0, tryNoAnswer)
	}
	mustAllow(t, b, "relay.test:443", false, "the relay after 100 misses")
	if len(b.hosts) != 0 {
		t.Fatalf("the relay's misses are remembered: %v", b.hosts)
	}
}

// TestBreakerMapBounded: the map holds the hosts with a miss or down that
// were asked within the cool-off ceiling: a host that answers is
// forgotten at once, the others once a sweep (when the map has doubled)
// finds them not asked for that long; a host in its cool-off is kept. In
// fake time.
func TestBreakerMapBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTestBreaker(nil)
		const n = 1000
		for range breakerMisses {
			b.done("down.test:443", 0, tryNoAnswer)
		}
		for i := range n {
			b.done(fmt.Sprintf("old%d.test:443", i), 0, tryNoAnswer)
			b.done(fmt.Sprintf("answered%d.test:443", i), 0, tryNoAnswer)
			b.done(fmt.Sprintf("answered%d.test:443", i), 0, tryAnswered)
		}
		if len(b.hosts) != n+1 {
			t.Fatalf("%d hosts remembered, want %d (those that answered forgotten)", len(b.hosts), n+1)
		}
		time.Sleep(breakerCoolOff + breakerCoolOffMax + time.Second) // down.test's cool-off ended 10 min ago
		for range breakerMisses {
			b.done("down2.test:443", 0, tryNoAnswer)
		}
		for i := range n {
			b.done(fmt.Sprintf("new%d.test:443", i), 0, tryNoAnswer)
		}
		for name := range b.hosts {
			if strings.HasPrefix(name, "old") || name == "down.test:443" {
				t.Fatalf("%s, not asked for over %v, is still remembered (%d hosts)", name, breakerCoolOffMax, len(b.hosts))
			}
		}
		if len(b.hosts) > n+1 || b.hosts["down2.test:443"] == nil {
			t.Fatalf("%d hosts remembered, want at most %d with down2.test in its cool-off", len(b.hosts), n+1)
		}
	})
}

// blackholeResolver answers the names in alive with 127.0.0.1 and blocks
// every other until the dial's connect timeout (a dropped SYN), counting
// those tries.
type blackholeResolver struct {
	mu    sync.Mutex
	alive map[string]bool
	tries atomic.Int64
}

func (r *blackholeResolver) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	ok := r.alive[host]
	r.mu.Unlock()
	if ok {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	r.tries.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

func (r *blackholeResolver) set(host string, alive bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alive[host] = alive
}

// TestClientHostDownFailsFast: through the client, a PDS host that does
// not answer (blackholed: each try waits the connect timeout) is tried 3
// times; then a download redirected to it, a download asked of it
// directly and a listing of it fail at once (no dial) with ErrHostDown,
// class transient. At the cool-off's end one download probes it: it has
// come back, answers, and the host is asked as before. Real HTTP; the
// breaker's clock is moved by hand.
func TestClientHostDownFailsFast(t *testing.T) {
	pds := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "listRepos") {
			fmt.Fprint(w, `{"repos":[]}`)
			return
		}
		w.Write(carBody)
	})
	host := "pds.test:" + pds.port()
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+host+r.URL.RequestURI(), http.StatusFound)
	})
	res := &blackholeResolver{alive: map[string]bool{}}
	c, _ := testClient(t, relay.URL, func(o *Options) { o.ConnectTimeout, o.Resolve = 50*time.Millisecond, res.resolve })
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	c.down.now = func() time.Time { return time.Unix(0, now.Load()) }
	ctx := context.Background()
	for i := range breakerMisses {
		_, err := c.GetRepo(ctx, testDID)
		if err == nil || errors.Is(err, ErrHostDown) || Classify(err) != ClassTransient {
			t.Fatalf("try %d of a blackholed host: %v, want a transient failure that waited", i, err)
		}
	}
	if n := res.tries.Load(); n != breakerMisses {
		t.Fatalf("%d tries dialed, want %d", n, breakerMisses)
	}
	_, err := c.GetRepo(ctx, testDID)
	var ue *Error
	if !errors.Is(err, ErrHostDown) || Classify(err) != ClassTransient || !errors.As(err, &ue) || ue.Host != host {
		t.Fatalf("a download redirected to the host found down: %v (class %v), want ErrHostDown of %s, transient", err, Classify(err), host)
	}
	if _, err := c.HostGetRepo(ctx, host, testDID); !errors.Is(err, ErrHostDown) {
		t.Fatalf("a download asked of the host found down: %v, want ErrHostDown", err)
	}
	if _, err := c.HostListRepos(ctx, host, "", 10); !errors.Is(err, ErrHostDown) {
		t.Fatalf("a listing of the host found down: %v, want ErrHostDown", err)
	}
	if n := res.tries.Load(); n != breakerMisses {
		t.Fatalf("%d tries dialed, want still %d: a host found down was dialed", n, breakerMisses)
	}
	if pds.hits.Load() != 0 {
		t.Fatalf("the blackholed host saw %d requests", pds.hits.Load())
	}
	// It comes back; the cool-off ends: one download probes and succeeds.
	res.set("pds.test", true)
	now.Add(int64(breakerCoolOff))
	d, err := c.GetRepo(ctx, testDID)
	if err != nil {
		t.Fatalf("the probe of a host back up: %v", err)
	}
	_ = d.Remove()
	if _, err := c.HostListRepos(ctx, host, "", 10); err != nil {
		t.Fatalf("a listing after the probe answered: %v", err)
	}
}

// TestClientRelayNeverBroken: a relay that does not answer is tried every
// time: the breaker never refuses it (its callers' own retry rules do).
func TestClientRelayNeverBroken(t *testing.T) {
	res := &blackholeResolver{alive: map[string]bool{}}
	c, _ := testClient(t, "http://relay.test", func(o *Options) { o.ConnectTimeout, o.Resolve = 30*time.Millisecond, res.resolve })
	const tries = 2 * breakerMisses
	for i := range tries {
		if _, err := c.GetRepo(context.Background(), testDID); err == nil || errors.Is(err, ErrHostDown) {
			t.Fatalf("try %d of a blackholed relay: %v, want a transient failure that waited", i, err)
		}
		if _, err := c.ListRepos(context.Background(), "", 10); err == nil || errors.Is(err, ErrHostDown) {
			t.Fatalf("listing %d of a blackholed relay: %v, want a transient failure that waited", i, err)
		}
	}
	if n := res.tries.Load(); n != 2*tries {
		t.Fatalf("%d tries of the relay dialed, want %d", n, 2*tries)
	}
}

// TestBreakerOverlappingProbes: a probe whose outcome is late (a host that
// takes the connection and sends no headers holds it up to the response
// header timeout) lets another request probe one connect timeout on. The
// round's probes failing reopen the breaker once, for twice the cool-off,
// not once for each of them; and a probe of a round already reopened that
// did not go does not end the cool-off its fellow began. In fake time.
func TestBreakerOverlappingProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := newTestBreaker(nil)
		const h = "pds.test:443"
		none, _ := b.allow(h) // not a probe: the host is not down
		for range breakerMisses {
			b.done(h, none, tryNoAnswer)
		}
		time.Sleep(breakerCoolOff)
		p1, err := b.allow(h)
		if err != nil {
			t.Fatalf("the cool-off over: %v, want the probe", err)
		}
		time.Sleep(probeHold) // p1's outcome is late: the next request probes too
		p2, err := b.allow(h)
		if err != nil {
			t.Fatalf("the first probe's hold over: %v, want another probe", err)
		}
		b.done(h, p1, tryNoAnswer)
		b.done(h, p2, tryNoAnswer)
		time.Sleep(2 * breakerCoolOff)
		p3, err := b.allow(h)
		if err != nil {
			t.Fatalf("twice the cool-off after the round's two probes failed: %v; want the next probe (the cool-off doubled once per round)", err)
		}
		time.Sleep(probeHold)
		p4, err := b.allow(h)
		if err != nil {
			t.Fatalf("the third probe's hold over: %v, want another probe", err)
		}
		b.done(h, p3, tryNoAnswer) // reopened for 4 cool-offs
		b.done(h, p4, tryOther)    // a probe of the round already reopened, that did not go
		if _, err := b.allow(h); err == nil {
			t.Fatal("a late probe that did not go ended the cool-off its round's failed probe began")
		}
	})
}
