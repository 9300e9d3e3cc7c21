package ident_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
)

const (
	stubDIDA = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	stubDIDB = "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
)

// plcStub is a PLC directory whose answer per DID the test sets: a key
// (200 with a document), or a status.
type plcStub struct {
	mu       sync.Mutex
	key      map[string]string // multibase
	status   map[string]int    // non-zero: answer this status instead
	requests map[string]int
	// hold, when set, is closed by the test to let a held request answer;
	// entered receives once per held request, after its answer is fixed.
	hold    chan struct{}
	entered chan struct{}
}

func newPLCStub(t *testing.T) (*plcStub, string) {
	p := &plcStub{key: map[string]string{}, status: map[string]int{}, requests: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		did := req.URL.Path[1:]
		p.mu.Lock()
		p.requests[did]++
		key, status, hold, entered := p.key[did], p.status[did], p.hold, p.entered
		p.mu.Unlock()
		if hold != nil { // the answer is fixed now, sent later
			entered <- struct{}{}
			<-hold
		}
		if status != 0 {
			w.WriteHeader(status)
			return
		}
		if key == "" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		fmt.Fprintf(w, `{"id":%q,"alsoKnownAs":["at://a.test"],"verificationMethod":[{"id":"%s#atproto","type":"Multikey","controller":%q,"publicKeyMultibase":%q}],"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"https://pds.test"}]}`,
			did, did, did, key)
	}))
	t.Cleanup(srv.Close)
	return p, srv.URL
}

func (p *plcStub) set(did, key string, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.key[did], p.status[did] = key, status
}

func (p *plcStub) count(did string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.requests[did]
}

// stubKey is a fresh K-256 key and its public half's multibase.
func stubKey(t *testing.T) (atcrypto.PrivateKey, string) {
	t.Helper()
	k, pub := newKeyPair(t)
	return k, pub.Multibase()
}

// stubCommit is a commit of did signed with k.
func stubCommit(t *testing.T, did string, k atcrypto.PrivateKey) *repo.Commit {
	t.Helper()
	h, err := multihash.Sum([]byte("data"), multihash.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	c := &repo.Commit{DID: did, Version: 3, Data: cid.NewCidV1(cid.DagCBOR, h), Rev: "3l3qo2vutsw2b"}
	if err := c.Sign(k); err != nil {
		t.Fatal(err)
	}
	return c
}

// rotateUnseen resolves stubDIDA (memory and ident/ then hold its key),
// rotates its key to newKey and sends the #identity while the directory
// answers 503: the invalidation's refresh fails. The directory is back
// afterwards.
func rotateUnseen(t *testing.T, plc *plcStub, r *ident.Resolver, reg *prometheus.Registry, newKey string) {
	t.Helper()
	ctx := context.Background()
	if _, _, err := r.Lookup(ctx, stubDIDA); err != nil {
		t.Fatal(err)
	}
	plc.set(stubDIDA, newKey, http.StatusServiceUnavailable)
	if _, _, err := r.CheckIdentity(ctx, stubDIDA, ""); err != nil { // the #identity
		t.Fatal(err)
	}
	promtest.Eventually(t, 5*time.Second, "the #identity's refresh fails", func() bool {
		return promtest.Value(t, reg, "backstream_ident_refresh_errors_total", nil) == 1
	})
	plc.set(stubDIDA, newKey, 0)
}

// requireRotated checks that r looks stubDIDA up with newKey and refuses a
// commit signed with the rotated-away key.
func requireRotated(t *testing.T, r *ident.Resolver, newKey string, oldPriv atcrypto.PrivateKey) {
	t.Helper()
	ctx := context.Background()
	info, fresh, err := r.Lookup(ctx, stubDIDA)
	if err != nil {
		t.Fatal(err)
	}
	if info.KeyMultibase != newKey {
		t.Errorf("lookup after the #identity: key %s (fresh %v), want the new key %s", info.KeyMultibase, fresh, newKey)
	}
	if _, err := r.VerifyCommit(ctx, stubDIDA, stubCommit(t, stubDIDA, oldPriv)); err == nil {
		t.Errorf("a commit signed with the rotated-away key verifies after the #identity")
	}
}

// TestInvalidationOutlivesEviction: an #identity invalidates the durable
// copy too. Its refresh fails (the directory briefly answering 503), then
// the invalidated entry leaves memory (an eviction): the next lookup must
// resolve the DID again, not read the pre-#identity ident/ row, and a
// commit signed with the rotated-away key must not verify.
func TestInvalidationOutlivesEviction(t *testing.T) {
	plc, url := newPLCStub(t)
	oldPriv, oldKey := stubKey(t)
	_, newKey := stubKey(t)
	_, keyB := stubKey(t)
	plc.set(stubDIDA, oldKey, 0)
	plc.set(stubDIDB, keyB, 0)
	reg := prometheus.NewRegistry()
	st := &memStore{m: map[string]archive.Ident{}}
	r := ident.New(ident.Config{PLC: url, CacheSize: 1, Retries: -1, Store: st, Persist: st.persist, Metrics: ident.NewMetrics(reg)})
	defer r.Close()
	rotateUnseen(t, plc, r, reg, newKey)
	if _, _, err := r.Lookup(context.Background(), stubDIDB); err != nil { // evicts A's invalidated entry
		t.Fatal(err)
	}
	requireRotated(t, r, newKey, oldPriv)
}

// TestInvalidationOutlivesRestart: the same through a restart. The
// #identity's unit is durable (its cursor moved past it) and its refresh
// did not complete: the restarted resolver must not answer from the
// pre-#identity ident/ row.
func TestInvalidationOutlivesRestart(t *testing.T) {
	plc, url := newPLCStub(t)
	oldPriv, oldKey := stubKey(t)
	_, newKey := stubKey(t)
	plc.set(stubDIDA, oldKey, 0)
	reg := prometheus.NewRegistry()
	st := &memStore{m: map[string]archive.Ident{}}
	r := ident.New(ident.Config{PLC: url, Retries: -1, Store: st, Persist: st.persist, Metrics: ident.NewMetrics(reg)})
	rotateUnseen(t, plc, r, reg, newKey)
	r.Close()
	r2 := ident.New(ident.Config{PLC: url, Retries: -1, Store: st, Persist: st.persist})
	defer r2.Close()
	requireRotated(t, r2, newKey, oldPriv)
}

// TestInvalidationDuringResolution: an #identity that arrives while a
// resolution of the DID is in flight (its answer fixed before the
// rotation) is still followed by a resolution of its own: an answer is as
// new as its request, not its arrival, so the one requested before the
// invalidation is neither taken by the invalidation's refresh nor kept.
func TestInvalidationDuringResolution(t *testing.T) {
	plc, url := newPLCStub(t)
	oldPriv, oldKey := stubKey(t)
	_, newKey := stubKey(t)
	plc.set(stubDIDA, oldKey, 0)
	hold, entered := make(chan struct{}), make(chan struct{}, 1)
	plc.mu.Lock()
	plc.hold, plc.entered = hold, entered
	plc.mu.Unlock()
	r := ident.New(ident.Config{PLC: url, Retries: -1})
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { _, _, err := r.Lookup(ctx, stubDIDA); done <- err }()
	<-entered // the directory has fixed its answer: the old key
	plc.mu.Lock()
	plc.hold, plc.entered = nil, nil
	plc.mu.Unlock()
	plc.set(stubDIDA, newKey, 0)                                     // the rotation
	if _, _, err := r.CheckIdentity(ctx, stubDIDA, ""); err != nil { // its #identity
		t.Fatal(err)
	}
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	r.Close() // waits for the invalidation's background refresh
	info, _, err := r.Lookup(ctx, stubDIDA)
	if err != nil {
		t.Fatal(err)
	}
	if info.KeyMultibase != newKey {
		t.Errorf("after the #identity: key %s (the answer requested before it), want %s; %d directory requests, want 2",
			info.KeyMultibase, newKey, plc.count(stubDIDA))
	}
	if _, err := r.VerifyCommit(ctx, stubDIDA, stubCommit(t, stubDIDA, oldPriv)); err == nil {
		t.Errorf("a commit signed with the rotated-away key verifies after the #identity")
	}
}

// TestGoneDIDStopsVerifying: a document past its TTL is served while it
// is refreshed in the background, but when the refresh's answer is that
// the DID has no document any more (a tombstoned did:plc: 404), the stale
// key stops verifying: the next check resolves the DID and fails as
// ErrUnresolvable.
func TestGoneDIDStopsVerifying(t *testing.T) {
	plc, url := newPLCStub(t)
	priv, key := stubKey(t)
	plc.set(stubDIDA, key, 0)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	reg := prometheus.NewRegistry()
	r := ident.New(ident.Config{PLC: url, Retries: -1, TTL: time.Hour, Now: clock, Metrics: ident.NewMetrics(reg)})
	defer r.Close()
	ctx := context.Background()
	if _, _, err := r.Lookup(ctx, stubDIDA); err != nil {
		t.Fatal(err)
	}
	plc.set(stubDIDA, "", http.StatusNotFound) // tombstoned
	advance(24 * time.Hour)
	if _, _, err := r.Lookup(ctx, stubDIDA); err != nil { // the stale copy serves while the refresh runs
		t.Fatalf("the expired document: %v", err)
	}
	promtest.Eventually(t, 5*time.Second, "the refresh fails", func() bool {
		return promtest.Value(t, reg, "backstream_ident_refresh_errors_total", nil) == 1
	})
	_, err := r.VerifyCommit(ctx, stubDIDA, stubCommit(t, stubDIDA, priv))
	if err == nil || !errors.Is(err, ident.ErrUnresolvable) {
		t.Errorf("a day past a 1 h TTL, after a refresh answered 404 (%d requests): VerifyCommit %v, want ErrUnresolvable",
			plc.count(stubDIDA), err)
	}
}

// TestCheckAuthorityHostCase: host names are case-insensitive, and
// upstream reports the serving host lowercased: a document naming its PDS
// https://PDS.Example.com accepts repos its own PDS serves.
func TestCheckAuthorityHostCase(t *testing.T) {
	info := &ident.Info{DID: stubDIDA, PDS: "https://PDS.Example.com"}
	if err := ident.CheckAuthority(info, "pds.example.com", "relay.example.com"); err != nil {
		t.Errorf("served by the document's own PDS (as upstream reports it): %v", err)
	}
}
