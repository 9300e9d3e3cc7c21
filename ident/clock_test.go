package ident_test

import (
	"context"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/k256"
	"github.com/backstream/backstream/internal/promtest"
)

// stepClock is a wall clock the test sets: ahead, then put right.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }

func (c *stepClock) set(t time.Time) { c.mu.Lock(); c.now = t; c.mu.Unlock() }

// The right time, and a clock a year ahead of it.
var (
	rightNow = time.Unix(1_800_000_000, 0)
	yearOn   = rightNow.Add(365 * 24 * time.Hour)
)

// aheadRow is a restarted resolver (clock right) on ident/ holding
// stubDIDA's document (oldKey) as a resolver whose clock ran a year ahead
// wrote it; the directory has since rotated the key to newKey (newPriv)
// without an #identity reaching us.
type aheadRow struct {
	plc            *plcStub
	r              *ident.Resolver
	reg            *prometheus.Registry
	oldKey, newKey string
	newPriv        atcrypto.PrivateKey
}

func startAheadRow(t *testing.T) aheadRow {
	t.Helper()
	plc, url := newPLCStub(t)
	a := aheadRow{plc: plc, reg: prometheus.NewRegistry()}
	_, a.oldKey = stubKey(t)
	a.newPriv, a.newKey = stubKey(t)
	plc.set(stubDIDA, a.oldKey, 0)
	st := &memStore{m: map[string]archive.Ident{}}
	ahead := ident.New(ident.Config{PLC: url, Retries: -1, Store: st, Persist: st.persist, Now: func() time.Time { return yearOn }})
	if _, _, err := ahead.Lookup(context.Background(), stubDIDA); err != nil {
		t.Fatal(err)
	}
	ahead.Close()
	if got := st.m[stubDIDA].FetchedUS; got != yearOn.UnixMicro() {
		t.Fatalf("stored fetched time %d, want the ahead clock's %d", got, yearOn.UnixMicro())
	}
	plc.set(stubDIDA, a.newKey, 0)
	a.r = ident.New(ident.Config{PLC: url, Retries: -1, TTL: time.Hour, Store: st, Persist: st.persist,
		Metrics: ident.NewMetrics(a.reg), Now: func() time.Time { return rightNow }})
	t.Cleanup(a.r.Close)
	return a
}

// TestClockAheadIdentRows: ident/ rows written while the wall clock ran a
// year ahead, read back after a restart with the clock put right. Each use
// of their fetched time must treat them as stale, not fresh for a year:
// the lookup starts a background refresh (expiry), the document is not
// resolved since now (the firehose's fresh), a failed signature check
// asks the directory (refreshSince), and the refresh is still limited to
// one per expired entry while it fails.
func TestClockAheadIdentRows(t *testing.T) {
	ctx := context.Background()
	t.Run("expiry", func(t *testing.T) {
		a := startAheadRow(t)
		if _, _, err := a.r.Lookup(ctx, stubDIDA); err != nil {
			t.Fatal(err)
		}
		promtest.Eventually(t, 5*time.Second, "a background refresh of the row a year-ahead clock wrote", func() bool {
			return a.plc.count(stubDIDA) == 2
		})
		a.r.Close()
		if info, _, err := a.r.Lookup(ctx, stubDIDA); err != nil || info.KeyMultibase != a.newKey {
			t.Fatalf("after the refresh: %v, key %s, want the rotated key", err, info.KeyMultibase)
		}
	})
	t.Run("resolved since", func(t *testing.T) {
		a := startAheadRow(t)
		seen := a.r.Now()
		info, fresh, err := a.r.Lookup(ctx, stubDIDA)
		if err != nil {
			t.Fatal(err)
		}
		if fresh || info.ResolvedSince(seen) {
			t.Fatalf("the row a year-ahead clock wrote: fresh %v, ResolvedSince(now) %v; want neither (fetched at %v)",
				fresh, info.ResolvedSince(seen), info.FetchedAt)
		}
	})
	t.Run("re-resolution", func(t *testing.T) {
		a := startAheadRow(t)
		if _, err := a.r.VerifyCommit(ctx, stubDIDA, stubCommit(t, stubDIDA, a.newPriv)); err != nil {
			t.Fatalf("a commit under the rotated key, the year-ahead row in memory: %v (%d directory requests)",
				err, a.plc.count(stubDIDA))
		}
	})
	t.Run("refresh rate", func(t *testing.T) {
		a := startAheadRow(t)
		a.plc.set(stubDIDA, "", http.StatusServiceUnavailable)
		for i := range 5 {
			if info, _, err := a.r.Lookup(ctx, stubDIDA); err != nil || info.KeyMultibase != a.oldKey {
				t.Fatalf("lookup %d while the directory fails: %v, want the stale key", i, err)
			}
			if i == 0 {
				promtest.Eventually(t, 5*time.Second, "the background refresh fails", func() bool {
					return promtest.Value(t, a.reg, "backstream_ident_refresh_errors_total", nil) == 1
				})
			}
		}
		a.r.Close() // waits for any refresh the later lookups started
		if got := a.plc.count(stubDIDA); got != 2 {
			t.Fatalf("%d directory requests for 5 lookups within a minute, want 2 (the ahead clock's, one refresh)", got)
		}
	})
}

// rotateAfterAhead resolves stubDIDA with clock a year ahead, rotates its
// key silently and puts the clock right; it returns the new key.
func rotateAfterAhead(t *testing.T, plc *plcStub, clock *stepClock, r *ident.Resolver) string {
	t.Helper()
	if _, _, err := r.Lookup(context.Background(), stubDIDA); err != nil {
		t.Fatal(err)
	}
	_, newKey := stubKey(t)
	plc.set(stubDIDA, newKey, 0)
	clock.set(rightNow)
	return newKey
}

// TestClockAheadInMemory: the same in one resolver whose clock ran a year
// ahead and is put right while it runs, with the documents in memory. (A
// clock that carries Go's monotonic reading, as time.Now does, compares
// times taken in one process by it; this resolver's does not.)
func TestClockAheadInMemory(t *testing.T) {
	ctx := context.Background()
	start := func(t *testing.T) (*plcStub, *stepClock, *ident.Resolver, *prometheus.Registry, string) {
		plc, url := newPLCStub(t)
		_, oldKey := stubKey(t)
		plc.set(stubDIDA, oldKey, 0)
		clock := &stepClock{now: yearOn}
		reg := prometheus.NewRegistry()
		r := ident.New(ident.Config{PLC: url, Retries: -1, Rate: 200, TTL: time.Hour, Metrics: ident.NewMetrics(reg), Now: clock.Now})
		t.Cleanup(r.Close)
		return plc, clock, r, reg, oldKey
	}
	t.Run("expiry and resolved since", func(t *testing.T) {
		plc, clock, r, _, _ := start(t)
		rotateAfterAhead(t, plc, clock, r)
		info, fresh, err := r.Lookup(ctx, stubDIDA)
		if err != nil {
			t.Fatal(err)
		}
		if fresh || info.ResolvedSince(rightNow) {
			t.Errorf("fetched a year ahead, read with the clock right: fresh %v, ResolvedSince(now) %v; want neither",
				fresh, info.ResolvedSince(rightNow))
		}
		promtest.Eventually(t, 5*time.Second, "a background refresh of the document a year-ahead clock fetched", func() bool {
			return plc.count(stubDIDA) == 2
		})
	})
	t.Run("refresh", func(t *testing.T) {
		plc, clock, r, _, _ := start(t)
		newKey := rotateAfterAhead(t, plc, clock, r)
		info, err := r.Refresh(ctx, stubDIDA)
		if err != nil || info.KeyMultibase != newKey {
			t.Fatalf("Refresh with the clock put right: %v, key %s, want the rotated key (%d directory requests, want 2)",
				err, info.KeyMultibase, plc.count(stubDIDA))
		}
	})
	t.Run("invalidated ahead", func(t *testing.T) {
		plc, clock, r, reg, oldKey := start(t)
		if _, _, err := r.Lookup(ctx, stubDIDA); err != nil {
			t.Fatal(err)
		}
		plc.set(stubDIDA, oldKey, http.StatusServiceUnavailable)
		if _, _, err := r.CheckIdentity(ctx, stubDIDA, ""); err != nil { // an #identity while the clock is ahead
			t.Fatal(err)
		}
		promtest.Eventually(t, 5*time.Second, "the #identity's refresh fails", func() bool {
			return promtest.Value(t, reg, "backstream_ident_refresh_errors_total", nil) == 1
		})
		_, newKey := stubKey(t)
		plc.set(stubDIDA, newKey, 0)
		clock.set(rightNow)
		before := plc.count(stubDIDA)
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second) // bounds a resolver that never settles
		defer cancel()
		info, _, err := r.Lookup(lctx, stubDIDA)
		if err != nil || info.KeyMultibase != newKey {
			t.Fatalf("lookup of a DID invalidated by a year-ahead clock: %v after %d directory requests, want the new key after 1",
				err, plc.count(stubDIDA)-before)
		}
		if _, fresh, err := r.Lookup(ctx, stubDIDA); err != nil || fresh || plc.count(stubDIDA)-before != 1 {
			t.Fatalf("second lookup: %v fresh=%v after %d directory requests; want a memory hit after 1",
				err, fresh, plc.count(stubDIDA)-before)
		}
	})
	t.Run("put right during the refresh", func(t *testing.T) {
		plc, clock, r, _, _ := start(t)
		if _, _, err := r.Lookup(ctx, stubDIDA); err != nil {
			t.Fatal(err)
		}
		hold, entered := make(chan struct{}), make(chan struct{}, 1)
		plc.mu.Lock()
		plc.hold, plc.entered = hold, entered
		plc.mu.Unlock()
		if _, _, err := r.CheckIdentity(ctx, stubDIDA, ""); err != nil { // an #identity while the clock is ahead
			t.Fatal(err)
		}
		<-entered // its refresh asked the directory, the clock still ahead
		plc.mu.Lock()
		plc.hold, plc.entered = nil, nil
		plc.mu.Unlock()
		clock.set(rightNow)
		close(hold)
		// The answer requested while the clock was ahead is dated as
		// unknown, so the refresh asks once more, and then it is done.
		promtest.Eventually(t, 5*time.Second, "the #identity's refresh asks again", func() bool { return plc.count(stubDIDA) >= 3 })
		r.Close()
		if got := plc.count(stubDIDA); got != 3 {
			t.Fatalf("the #identity's refresh, the clock put right while it ran: %d directory requests, want 3", got)
		}
	})
}

// TestClockAheadHandleResult: a handle check's result kept while the
// clock ran a year ahead is not reused for a year once it is put right:
// the repeated #identity checks the handle again.
func TestClockAheadHandleResult(t *testing.T) {
	n := startNet(t)
	a := firstActive(t, n)
	var hits atomic.Int64
	web := handleHost(t, n, &hits)
	clock := &stepClock{now: yearOn}
	r := ident.New(ident.Config{PLC: n.RelayURL(), Web: web.URL, Sleep: noSleep, Now: clock.Now})
	defer r.Close()
	for i, at := range []time.Time{yearOn, rightNow} {
		clock.set(at)
		if v, result, err := r.CheckIdentity(context.Background(), a.DID, a.Handle); err != nil || result != ident.HandleOK {
			t.Fatalf("check %d: %q %q %v", i, v, result, err)
		}
	}
	if got := hits.Load(); got != 2 {
		t.Fatalf("%d requests to the handle host for a check a year ahead and one with the clock put right, want 2", got)
	}
}

// exportThenPLC answers GET /export with lines (one page) and passes every
// other request to the directory at plc.
type exportThenPLC struct {
	lines []string
	plc   string
}

func (x exportThenPLC) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Path == "/export" {
		return (&exportTransport{lines: x.lines}).RoundTrip(req)
	}
	u, err := url.Parse(x.plc)
	if err != nil {
		return nil, err
	}
	req = req.Clone(req.Context())
	req.URL.Scheme, req.URL.Host = u.Scheme, u.Host
	return http.DefaultTransport.RoundTrip(req)
}

// TestIdentityNotAnsweredByTheExport: a document the directory's export
// loaded before an #identity never answers it, even loaded at the same
// instant of the resolver's clock (fetched at the event's time, which
// refreshSince's comparison alone would take): the invalidation replaces
// it in memory before the refresh looks, and the export does not load
// over an invalidation.
func TestIdentityNotAnsweredByTheExport(t *testing.T) {
	plc, plcURL := newPLCStub(t)
	_, oldKey := stubKey(t)
	newPriv, newKey := stubKey(t)
	oldPub, err := k256.ParsePublicMultibase(oldKey)
	if err != nil {
		t.Fatal(err)
	}
	line := exportOp(stubDIDA, oldPub.DIDKey(), "2024-01-01T00:00:00.001Z")
	r := ident.New(ident.Config{PLC: plcURL, Retries: -1, Sleep: noSleep, Now: func() time.Time { return rightNow },
		HTTPClient: &http.Client{Transport: exportThenPLC{lines: []string{line}, plc: plcURL}}})
	defer r.Close()
	ctx := context.Background()
	if st, err := r.ReadExport(ctx, "", nil); err != nil || st.Loaded != 1 {
		t.Fatalf("export: %+v %v", st, err)
	}
	plc.set(stubDIDA, newKey, 0)                                                           // the rotation, after the export was read
	if v, result, err := r.CheckIdentity(ctx, stubDIDA, "a.test"); err != nil || v == "" { // its #identity
		t.Fatalf("#identity: %q %q %v", v, result, err)
	}
	info, _, err := r.Lookup(ctx, stubDIDA)
	if err != nil || info.KeyMultibase != newKey || plc.count(stubDIDA) == 0 {
		t.Fatalf("after the #identity: %v, key %s after %d directory requests; want the rotated key, resolved",
			err, info.KeyMultibase, plc.count(stubDIDA))
	}
	if _, err := r.VerifyCommit(ctx, stubDIDA, stubCommit(t, stubDIDA, newPriv)); err != nil {
		t.Fatal(err)
	}
}

// TestClockAheadRowAndTheExport: an ident/ row a resolution wrote while
// the wall clock ran a year ahead, met by the export with the clock put
// right, counts as resolved a TTL ago (dated), not a year on: an op of
// the export created before that does not replace it, one created since
// does (and its lookup needs no request).
func TestClockAheadRowAndTheExport(t *testing.T) {
	plc, plcURL := newPLCStub(t)
	_, oldKey := stubKey(t)
	_, olderKey := stubKey(t)
	_, newKey := stubKey(t)
	plc.set(stubDIDA, oldKey, 0)
	st := &memStore{m: map[string]archive.Ident{}}
	ahead := ident.New(ident.Config{PLC: plcURL, Retries: -1, Store: st, Persist: st.persist, Now: func() time.Time { return yearOn }})
	if _, _, err := ahead.Lookup(context.Background(), stubDIDA); err != nil {
		t.Fatal(err)
	}
	ahead.Close()
	line := func(key string, at time.Time) string {
		return exportOp(stubDIDA, "did:key:"+key, at.UTC().Format(time.RFC3339Nano))
	}
	read := func(l string) *ident.Resolver {
		r := ident.New(ident.Config{PLC: plcURL, Retries: -1, TTL: time.Hour, Store: st, Persist: st.persist, Sleep: noSleep,
			Now: func() time.Time { return rightNow }, HTTPClient: &http.Client{Transport: exportThenPLC{lines: []string{l}, plc: plcURL}}})
		t.Cleanup(r.Close)
		if _, err := r.ReadExport(context.Background(), "", nil); err != nil {
			t.Fatal(err)
		}
		return r
	}
	read(line(olderKey, rightNow.Add(-2*time.Hour)))
	if got, _ := st.Ident(stubDIDA); got.Key != oldKey {
		t.Fatalf("an op from before the row's dated fetch replaced it: key %s, want %s", got.Key, oldKey)
	}
	r := read(line(newKey, rightNow.Add(-time.Minute)))
	info, _, err := r.Lookup(context.Background(), stubDIDA)
	if err != nil {
		t.Fatal(err)
	}
	if info.KeyMultibase != newKey || plc.count(stubDIDA) != 1 {
		t.Fatalf("after an op since: key %s after %d directory requests; want the op's key, no request", info.KeyMultibase, plc.count(stubDIDA)-1)
	}
}
