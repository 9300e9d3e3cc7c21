package ident_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// TestCheckIdentityVerifiesHandleBothWays: an #identity naming the
// account's handle verifies (its document declares it, its well-known
// resolves back); one naming another account's handle that the document
// now claims (it resolves to the other account), one naming a handle that
// resolves to the account but that the document does not declare, one
// naming no handle at all, a malformed one and one of a DID that does not
// resolve are each handle.invalid, counted by result. Each check costs one
// DID resolution (shared with the invalidation's refresh), and the verdict
// is what the cache and ident/<did> keep, through later resolutions too.
func TestCheckIdentityVerifiesHandleBothWays(t *testing.T) {
	n := startNet(t)
	var live []world.Account
	for _, a := range n.World().Accounts() {
		if a.Active {
			live = append(live, a)
		}
	}
	a, b := live[0], live[1]
	reg := prometheus.NewRegistry()
	st := &memStore{m: map[string]archive.Ident{}}
	clock := &stepClock{now: time.Unix(1_800_000_000, 0)} // read by the background refreshes too
	r := ident.New(ident.Config{PLC: n.RelayURL(), Web: n.RelayURL(), Metrics: ident.NewMetrics(reg), Store: st, Persist: st.persist,
		Sleep: noSleep, Now: clock.Now})
	defer r.Close()
	ctx := context.Background()
	check := func(did, handle, wantVerdict, wantResult string) {
		t.Helper()
		before := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"})
		verdict, result, err := r.CheckIdentity(ctx, did, handle)
		if err != nil || verdict != wantVerdict || result != wantResult {
			t.Fatalf("%s naming %q: %q %q %v, want %q %q", did, handle, verdict, result, err, wantVerdict, wantResult)
		}
		if wantResult != ident.HandleNoDocument {
			// One network resolution of the DID, shared by the
			// invalidation's background refresh and the check.
			if got := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}); got != before+1 {
				t.Fatalf("%s naming %q: %v DID resolutions, want 1", did, handle, got-before)
			}
			info, _, err := r.Lookup(ctx, did)
			if err != nil || info.Handle != wantVerdict || st.m[did].Handle != wantVerdict {
				t.Fatalf("%s: cached %+v (%v), stored %+v, want handle %q", did, info, err, st.m[did], wantVerdict)
			}
		}
		clock.set(clock.Now().Add(time.Second))
	}
	check(a.DID, a.Handle, a.Handle, ident.HandleOK)
	check(a.DID, "  "+a.Handle, ident.HandleInvalid, ident.HandleBadSyntax)
	check(a.DID, "handle.invalid", ident.HandleInvalid, ident.HandleBadSyntax)

	e, err := n.EmitBadHandle(a.DID, oracle.FaultHandleNotResolving)
	if err != nil {
		t.Fatal(err)
	}
	claimed := *e.Event.Identity.Handle
	if claimed != b.Handle && claimed == a.Handle {
		t.Fatalf("claimed %q", claimed)
	}
	check(a.DID, claimed, ident.HandleInvalid, ident.HandleMismatch)

	// A change of a's handle ends the claim; an alias resolving to a that
	// its document does not declare.
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.SetHandle(a.DID, "renamed.test") }); err != nil {
		t.Fatal(err)
	}
	check(a.DID, "renamed.test", "renamed.test", ident.HandleOK)
	e, err = n.EmitBadHandle(a.DID, oracle.FaultHandleUndeclared)
	if err != nil {
		t.Fatal(err)
	}
	check(a.DID, *e.Event.Identity.Handle, ident.HandleInvalid, ident.HandleUndeclared)
	check(b.DID, "nobody-holds-this.test", ident.HandleInvalid, ident.HandleUndeclared)

	// A resolution after the check (the TTL ran out) keeps the verdict.
	clock.set(clock.Now().Add(48 * time.Hour))
	if _, err := r.Refresh(ctx, a.DID); err != nil {
		t.Fatal(err)
	}
	if info, _, _ := r.Lookup(ctx, a.DID); info.Handle != ident.HandleInvalid || st.m[a.DID].Handle != ident.HandleInvalid {
		t.Fatalf("after a refresh: cached %q, stored %q, want the verdict kept", info.Handle, st.m[a.DID].Handle)
	}

	// A DID that does not resolve; an event naming no handle.
	n.Faults().DIDNotFound(b.DID, oracle.Always)
	check(b.DID, b.Handle, ident.HandleInvalid, ident.HandleNoDocument)
	if verdict, result, err := r.CheckIdentity(ctx, b.DID, ""); verdict != "" || result != "" || err != nil {
		t.Fatalf("no handle: %q %q %v", verdict, result, err)
	}
	for result, want := range map[string]float64{ident.HandleOK: 2, ident.HandleBadSyntax: 2, ident.HandleMismatch: 1,
		ident.HandleUndeclared: 2, ident.HandleNoDocument: 1, ident.HandleUnresolved: 0} {
		expect(t, reg, "backstream_ident_handles_total", map[string]string{"result": result}, want)
	}
}

// TestCheckIdentityFailingHandleHost: a handle host that fails (500) makes
// the handle unresolved at once — one attempt, no retry, since the check
// runs on the firehose's path — and handle.invalid; the DID document still
// comes from the PLC directory, not from the handle host.
func TestCheckIdentityFailingHandleHost(t *testing.T) {
	n := startNet(t)
	a := firstActive(t, n)
	var hits atomic.Int64
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.URL.Path != "/.well-known/atproto-did" || r.Host != a.Handle {
			t.Errorf("handle host asked %s %s", r.Host, r.URL.Path)
		}
		http.Error(w, "down", http.StatusInternalServerError)
	}))
	defer web.Close()
	reg := prometheus.NewRegistry()
	r := ident.New(ident.Config{PLC: n.RelayURL(), Web: web.URL, Metrics: ident.NewMetrics(reg), Sleep: noSleep, Retries: 3})
	defer r.Close()
	verdict, result, err := r.CheckIdentity(context.Background(), a.DID, a.Handle)
	if err != nil || verdict != ident.HandleInvalid || result != ident.HandleUnresolved {
		t.Fatalf("%q %q %v, want handle.invalid unresolved", verdict, result, err)
	}
	if hits.Load() != 1 {
		t.Fatalf("%d requests to the handle host, want 1", hits.Load())
	}
	expect(t, reg, "backstream_ident_retries_total", nil, 0)
	expect(t, reg, "backstream_ident_handles_total", map[string]string{"result": ident.HandleUnresolved}, 1)
}

// BenchmarkCheckIdentity: the consumer-path cost of one #identity naming a
// handle against the simulated network on loopback: a DID resolution over
// HTTP on 127.0.0.1; the well-known request is made by the first iteration
// only (the pair's result is reused within HandleTTL).
func BenchmarkCheckIdentity(b *testing.B) {
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 6, RecordsMean: 3, Hosts: 2, Seed: 21, Traffic: oracle.TrafficNone})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	var a world.Account
	for _, x := range n.World().Accounts() {
		if x.Active {
			a = x
			break
		}
	}
	r := ident.New(ident.Config{PLC: n.RelayURL(), Web: n.RelayURL()})
	defer r.Close()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		if v, _, err := r.CheckIdentity(ctx, a.DID, a.Handle); err != nil || v != a.Handle {
			b.Fatalf("%q %v", v, err)
		}
	}
}

// TestHandleResultsBounded: handle results are kept for at most CacheSize
// (DID, handle) pairs, least recently used evicted: a pair checked again
// while kept costs no request (a cache hit), an evicted one is resolved
// again. Every check still resolves the DID document.
func TestHandleResultsBounded(t *testing.T) {
	n := startNet(t)
	var live []world.Account
	for _, a := range n.World().Accounts() {
		if a.Active {
			live = append(live, a)
		}
	}
	if len(live) < 3 {
		t.Fatalf("%d active accounts, want 3", len(live))
	}
	var hits atomic.Int64
	web := handleHost(t, n, &hits)
	reg := prometheus.NewRegistry()
	r := ident.New(ident.Config{PLC: n.RelayURL(), Web: web.URL, CacheSize: 2, Metrics: ident.NewMetrics(reg), Sleep: noSleep})
	defer r.Close()
	check := func(a world.Account, wantHits int64) {
		t.Helper()
		resolved := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"})
		if v, result, err := r.CheckIdentity(context.Background(), a.DID, a.Handle); err != nil || v != a.Handle || result != ident.HandleOK {
			t.Fatalf("%s: %q %q %v", a.Handle, v, result, err)
		}
		if got := hits.Load(); got != wantHits {
			t.Fatalf("%s: %d requests to the handle host, want %d", a.Handle, got, wantHits)
		}
		if got := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}); got != resolved+1 {
			t.Fatalf("%s: %v DID resolutions, want 1", a.Handle, got-resolved)
		}
	}
	a, b, c := live[0], live[1], live[2]
	check(a, 1)
	check(b, 2)
	check(a, 2) // kept
	check(c, 3) // evicts b, the least recently used
	check(b, 4)
	check(c, 4)
	expect(t, reg, "backstream_ident_handle_cache_hits_total", nil, 2)
}

// handleHost answers every handle's well-known request the way the
// simulated network's world does, counting them in hits.
func handleHost(t *testing.T, n *oracle.Network, hits *atomic.Int64) *httptest.Server {
	t.Helper()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		did, ok := n.World().HandleDID(r.Host)
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(did))
	}))
	t.Cleanup(web.Close)
	return web
}
