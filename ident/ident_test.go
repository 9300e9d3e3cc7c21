package ident_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/k256"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

func startNet(t *testing.T) *oracle.Network {
	t.Helper()
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 6, RecordsMean: 3, Hosts: 2, Seed: 21, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func firstActive(t *testing.T, n *oracle.Network) world.Account {
	t.Helper()
	for _, a := range n.World().Accounts() {
		if a.Active {
			return a
		}
	}
	t.Fatal("no active account")
	return world.Account{}
}

// memStore is an ident/ store in memory, for the durable tier.
type memStore struct {
	mu    sync.Mutex
	m     map[string]archive.Ident
	reads int // Ident calls
}

func (s *memStore) Ident(did string) (archive.Ident, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	v, ok := s.m[did]
	if !ok {
		return v, &archive.KeyError{Key: "ident/" + did, Kind: archive.ErrNotFound}
	}
	return v, nil
}

func (s *memStore) NoIdents() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m) == 0, nil
}

func (s *memStore) persist(_ context.Context, did string, v archive.Ident) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[did] = v
	return nil
}

func noSleep(context.Context, time.Duration) error { return nil }

// newPublicKey is the public half of a fresh K-256 key.
func newPublicKey(t testing.TB) atcrypto.PublicKey {
	t.Helper()
	_, pub := newKeyPair(t)
	return pub
}

// newKeyPair is a fresh K-256 key and its public half.
func newKeyPair(t testing.TB) (atcrypto.PrivateKey, atcrypto.PublicKey) {
	t.Helper()
	k, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := k.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return k, pub
}

func TestLookupResolvesThroughPLCAndCaches(t *testing.T) {
	n := startNet(t)
	a := firstActive(t, n)
	reg := prometheus.NewRegistry()
	st := &memStore{m: map[string]archive.Ident{}}
	r := ident.New(ident.Config{PLC: n.RelayURL(), Metrics: ident.NewMetrics(reg), Store: st, Persist: st.persist})
	ctx := context.Background()
	asked := r.Now()
	info, fresh, err := r.Lookup(ctx, a.DID)
	if err != nil || !fresh {
		t.Fatalf("lookup: %v fresh=%v", err, fresh)
	}
	if !info.ResolvedSince(asked) || info.ResolvedSince(asked.Add(time.Hour)) {
		t.Fatalf("resolved at %v: ResolvedSince(%v) %v, an hour later %v", info.FetchedAt, asked,
			info.ResolvedSince(asked), info.ResolvedSince(asked.Add(time.Hour)))
	}
	// The handle is a verdict of CheckIdentity: none before an #identity.
	if info.KeyMultibase != a.PublicKeyMultibase || info.PDSHost() != hostOf(n.HostURLs()[a.Host]) || info.Handle != "" {
		t.Fatalf("info %+v does not match account %+v", info, a)
	}
	if _, fresh, err := r.Lookup(ctx, a.DID); err != nil || fresh {
		t.Fatalf("second lookup: %v fresh=%v, want a memory hit", err, fresh)
	}
	if got := st.m[a.DID]; got.Key != a.PublicKeyMultibase || got.FetchedUS == 0 {
		t.Fatalf("durable copy %+v", got)
	}
	// A fresh resolver on the same store answers from ident/ without the
	// network, even a day later with the directory down: the stale copy
	// serves while its background refresh fails, counted.
	reg2 := prometheus.NewRegistry()
	later := time.Now().Add(25 * time.Hour)
	r2 := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Store: st, Retries: -1, Metrics: ident.NewMetrics(reg2),
		Now: func() time.Time { return later }})
	if info, fresh, err := r2.Lookup(ctx, a.DID); err != nil || fresh || info.KeyMultibase != a.PublicKeyMultibase ||
		info.ResolvedSince(later.Add(-time.Hour)) {
		t.Fatalf("durable lookup: %+v fresh=%v err=%v", info, fresh, err)
	}
	promtest.Eventually(t, 5*time.Second, "a failed background refresh", func() bool {
		return promtest.Value(t, reg2, "backstream_ident_refresh_errors_total", nil) == 1
	})
	r2.Close()
	expect(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}, 1)
	expect(t, reg, "backstream_ident_lookups_total", map[string]string{"tier": "memory"}, 1)
	// An #identity invalidates: the next lookup goes to the network, not to
	// the (now stale) durable copy.
	r.Invalidate(a.DID)
	if _, fresh, err := r.Lookup(ctx, a.DID); err != nil || !fresh {
		t.Fatalf("lookup after invalidation: %v fresh=%v, want a network resolution", err, fresh)
	}
}

func hostOf(u string) string { return u[len("http://"):] }

// A resolver on a store without ident/ rows answers a memory miss from the
// network without reading the store (every row there is one it wrote and
// still holds), until its cache evicts an entry: that DID's row is then
// read back from the store, not resolved again.
func TestColdStoreSkipsTheDurableReadUntilAnEviction(t *testing.T) {
	n := startNet(t)
	var live []string
	for _, a := range n.World().Accounts() {
		if a.Active {
			live = append(live, a.DID)
		}
	}
	reg := prometheus.NewRegistry()
	st := &memStore{m: map[string]archive.Ident{}}
	r := ident.New(ident.Config{PLC: n.RelayURL(), CacheSize: 2, Metrics: ident.NewMetrics(reg), Store: st, Persist: st.persist})
	defer r.Close()
	ctx := context.Background()
	for _, d := range live[:2] {
		if _, fresh, err := r.Lookup(ctx, d); err != nil || !fresh {
			t.Fatalf("lookup %s: %v fresh=%v", d, err, fresh)
		}
	}
	if st.reads != 0 {
		t.Fatalf("%d reads of a store that held no ident/ row", st.reads)
	}
	if _, _, err := r.Lookup(ctx, live[2]); err != nil { // evicts live[0]
		t.Fatal(err)
	}
	info, fresh, err := r.Lookup(ctx, live[0])
	if err != nil || fresh || info == nil {
		t.Fatalf("evicted entry: %+v fresh=%v err=%v, want its row from the store", info, fresh, err)
	}
	if st.reads != 1 {
		t.Fatalf("%d store reads after an eviction, want 1", st.reads)
	}
	expect(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}, 3)
}

func TestUnresolvableIsTypedAndRetryable(t *testing.T) {
	n := startNet(t)
	a := firstActive(t, n)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	r := ident.New(ident.Config{PLC: n.RelayURL(), Metrics: ident.NewMetrics(reg), Sleep: noSleep, Retries: 2})

	n.Faults().DIDNotFound(a.DID, 1)
	_, _, err := r.Lookup(ctx, a.DID)
	if !errors.Is(err, ident.ErrUnresolvable) || ident.Class(err) != ident.ClassIdentity {
		t.Fatalf("not found: %v (class %q)", err, ident.Class(err))
	}
	if n.Faults().Fired(oracle.FaultDIDNotFound) != 1 {
		t.Fatal("404 fault did not fire once (a 404 must not be retried)")
	}
	// A failing PLC is retried within the budget: 2 failures then success.
	n.Faults().FailPLC(2)
	if _, _, err := r.Lookup(ctx, a.DID); err != nil {
		t.Fatalf("lookup through 2 failures with 2 retries: %v", err)
	}
	expect(t, reg, "backstream_ident_retries_total", nil, 2)
	// Past the budget it is unresolvable, not a crash or a hang. Another
	// account, never looked up: an Invalidate of a's entry would start a
	// background refresh that may use the faults up before the lookup.
	var b world.Account
	for _, c := range n.World().Accounts() {
		if c.Active && c.DID != a.DID {
			b = c
			break
		}
	}
	n.Faults().FailPLC(3)
	if _, _, err := r.Lookup(ctx, b.DID); ident.Class(err) != ident.ClassIdentity {
		t.Fatalf("3 failures with 2 retries: %v", err)
	}
	n.Faults().DIDNoKey(b.DID, 1)
	if _, _, err := r.Lookup(ctx, b.DID); !errors.Is(err, ident.ErrNoKey) || ident.Class(err) != ident.ClassIdentity {
		t.Fatalf("document without key: %v", err)
	}
	expect(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "no_key"}, 1)
}

func TestSlowPLCTimesOut(t *testing.T) {
	n := startNet(t)
	a := firstActive(t, n)
	n.Faults().SlowPLC(5*time.Second, oracle.Always)
	r := ident.New(ident.Config{PLC: n.RelayURL(), Timeout: 100 * time.Millisecond, Retries: -1})
	t0 := time.Now()
	_, _, err := r.Lookup(context.Background(), a.DID)
	if ident.Class(err) != ident.ClassIdentity {
		t.Fatalf("slow PLC: %v", err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("lookup took %v: the timeout did not bound it", d)
	}
}

func TestConcurrencyLimitAndSingleFlight(t *testing.T) {
	n := startNet(t)
	accts := n.World().Accounts()
	reg := prometheus.NewRegistry()
	r := ident.New(ident.Config{PLC: n.RelayURL(), Concurrency: 1, Metrics: ident.NewMetrics(reg)})
	n.Faults().SlowPLC(50*time.Millisecond, oracle.Always)
	var wg sync.WaitGroup
	var errs atomic.Int64
	for i := 0; i < 8; i++ { // 4 DIDs, 2 lookups each at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := accts[i%4]
			if _, _, err := r.Lookup(context.Background(), a.DID); err != nil && a.Status != world.StatusDeleted {
				errs.Add(1)
			}
		}()
	}
	wg.Wait()
	if errs.Load() != 0 {
		t.Fatalf("%d lookups failed", errs.Load())
	}
	res := promtest.Sum(t, reg, "backstream_ident_resolutions_total")
	if res > 4 {
		t.Fatalf("%v network resolutions for 4 DIDs: concurrent lookups of a DID must share one", res)
	}
	if promtest.Sum(t, reg, "backstream_ident_limited_total") == 0 {
		t.Fatal("no lookup waited for the single slot")
	}
}

func TestCacheIsBoundedAndExpires(t *testing.T) {
	n := startNet(t)
	accts := n.World().Accounts()
	now := time.Unix(1_800_000_000, 0)
	reg := prometheus.NewRegistry()
	r := ident.New(ident.Config{PLC: n.RelayURL(), CacheSize: 2, TTL: time.Minute, Metrics: ident.NewMetrics(reg),
		Now: func() time.Time { return now }})
	ctx := context.Background()
	var live []string
	for _, a := range accts {
		if a.Active {
			live = append(live, a.DID)
		}
	}
	for _, d := range live[:3] {
		if _, _, err := r.Lookup(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	expect(t, reg, "backstream_ident_cache_entries", nil, 2)
	if _, fresh, _ := r.Lookup(ctx, live[0]); !fresh {
		t.Fatal("the least recently used entry was not evicted")
	}
	if _, fresh, _ := r.Lookup(ctx, live[0]); fresh {
		t.Fatal("a cached entry was resolved again")
	}
	// Past its TTL an entry is still served at once, not fresh, while one
	// background refresh replaces it.
	now = now.Add(time.Minute)
	before := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"})
	for range 5 {
		if info, fresh, err := r.Lookup(ctx, live[0]); err != nil || fresh || info == nil {
			t.Fatalf("expired entry: %v fresh=%v", err, fresh)
		}
	}
	promtest.Eventually(t, 5*time.Second, "a background refresh", func() bool {
		return promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}) == before+1
	})
	r.Close()
	if got := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}); got != before+1 {
		t.Fatalf("%v background refreshes for 5 lookups of one expired entry, want 1", got-before)
	}
}

// verifyHead decodes did's current head commit from its CAR.
func headCommit(t *testing.T, n *oracle.Network, did string) *repo.Commit {
	t.Helper()
	b, _, err := n.World().RepoCAR(did)
	if err != nil {
		t.Fatal(err)
	}
	c, _, err := repo.LoadCommitFromCAR(context.Background(), bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verifiedAccount is a network, its first active account, and a resolver
// (closed with the test) that has verified the account's head commit once,
// so its document is in memory; reg holds the resolver's metrics.
func verifiedAccount(t *testing.T) (*oracle.Network, world.Account, *ident.Resolver, *prometheus.Registry) {
	t.Helper()
	n := startNet(t)
	a := firstActive(t, n)
	reg := prometheus.NewRegistry()
	r := ident.New(ident.Config{PLC: n.RelayURL(), Metrics: ident.NewMetrics(reg)})
	t.Cleanup(r.Close)
	if _, err := r.VerifyCommit(context.Background(), a.DID, headCommit(t, n, a.DID)); err != nil {
		t.Fatalf("genuine commit: %v", err)
	}
	return n, a, r, reg
}

// rotateAndCommit rotates did's key on the network and commits a record
// under the new one.
func rotateAndCommit(t *testing.T, n *oracle.Network, did string) {
	t.Helper()
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(did) }); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Emit(func(w *world.World) (world.Event, error) {
		return w.CreateRecord(did, "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
	}); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyCommitReresolvesOnceOnRotation(t *testing.T) {
	n, a, r, reg := verifiedAccount(t)
	ctx := context.Background()
	// The account rotates its key and commits with the new one: the cached
	// old key fails, one re-resolution finds the new key.
	rotateAndCommit(t, n, a.DID)
	if _, err := r.VerifyCommit(ctx, a.DID, headCommit(t, n, a.DID)); err != nil {
		t.Fatalf("commit under the rotated key: %v", err)
	}
	expect(t, reg, "backstream_ident_reresolved_total", nil, 1)
	// The document names a key that does not sign (old key signs, document
	// names a new one). The invalidation refreshes in the background; the
	// check with that document fails, re-resolves once, then ErrBadSignature.
	n.Faults().DIDWrongKey(a.DID, oracle.Always)
	r.Invalidate(a.DID)
	promtest.Eventually(t, 5*time.Second, "the background refresh", func() bool {
		return promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"}) == 3
	})
	_, err := r.VerifyCommit(ctx, a.DID, headCommit(t, n, a.DID))
	if !errors.Is(err, ident.ErrBadSignature) || ident.Class(err) != ident.ClassSignature {
		t.Fatalf("wrong key: %v", err)
	}
	expect(t, reg, "backstream_ident_reresolved_total", nil, 2)
	// Fresh from the network in the same lookup: no second resolution.
	r2 := ident.New(ident.Config{PLC: n.RelayURL(), Metrics: ident.NewMetrics(prometheus.NewRegistry())})
	defer r2.Close()
	if _, err := r2.VerifyCommit(ctx, a.DID, headCommit(t, n, a.DID)); ident.Class(err) != ident.ClassSignature {
		t.Fatalf("wrong key, fresh: %v", err)
	}
}

// TestIdentityWithoutHandleAnnouncesRotation: an #identity event that
// names no handle still announces a new document (the handle field is
// optional). The account rotates its key, the #identity comes, then a
// commit under the new key: it verifies without a forced re-resolution,
// because the #identity dropped the cached document (V7: none when the
// rotation is announced). An #identity with a handle refreshes the
// document through its handle check anyway; without one, only the
// invalidation does.
func TestIdentityWithoutHandleAnnouncesRotation(t *testing.T) {
	n, a, r, reg := verifiedAccount(t)
	ctx := context.Background()
	rotateAndCommit(t, n, a.DID)
	if verdict, result, err := r.CheckIdentity(ctx, a.DID, ""); err != nil || verdict != "" || result != "" {
		t.Fatalf("#identity without a handle: %q, %q, %v", verdict, result, err)
	}
	if _, err := r.VerifyCommit(ctx, a.DID, headCommit(t, n, a.DID)); err != nil {
		t.Fatalf("commit under the announced key: %v", err)
	}
	expect(t, reg, "backstream_ident_reresolved_total", nil, 0)
}

func TestCheckAuthority(t *testing.T) {
	info := &ident.Info{DID: "did:plc:x", PDS: "https://pds.example.com"}
	if err := ident.CheckAuthority(info, "pds.example.com"); err != nil {
		t.Fatal(err)
	}
	if err := ident.CheckAuthority(info, "relay.example.com", "relay.example.com"); err != nil {
		t.Fatalf("the relay itself: %v", err)
	}
	if err := ident.CheckAuthority(info, "evil.example.com", "relay.example.com"); ident.Class(err) != ident.ClassAuthority {
		t.Fatalf("another host: %v", err)
	}
	if err := ident.CheckAuthority(&ident.Info{DID: "did:plc:x"}, "pds.example.com"); ident.Class(err) != ident.ClassAuthority {
		t.Fatalf("no PDS in the document: %v", err)
	}
}

// TestCheckAuthoritySpellings: a DID document may write its PDS endpoint
// with the scheme's default port, a trailing dot or upper case (the
// network's documents are written by hand and by many PDS versions): it
// names the same host as a download from that host, so the repository is
// not refused as misattributed. The download side's host may be written
// so too. Another port, or another host, is still refused.
func TestCheckAuthoritySpellings(t *testing.T) {
	for _, c := range []struct{ pds, host string }{
		{"https://pds.example.com:443", "pds.example.com"},
		{"https://pds.example.com", "pds.example.com:443"},
		{"https://pds.example.com.", "pds.example.com"},
		{"https://PDS.Example.COM./", "pds.example.com"},
		{"http://pds.example.com:80", "pds.example.com"},
		{"https://[2001:db8::1]:443", "[2001:db8::1]"},
		{"https://pds.example.com:8443", "pds.example.com:8443"},
	} {
		info := &ident.Info{DID: "did:plc:x", PDS: c.pds}
		if err := ident.CheckAuthority(info, c.host); err != nil {
			t.Errorf("document %q, fetched from %q: %v", c.pds, c.host, err)
		}
	}
	for _, c := range []struct{ pds, host string }{
		{"https://pds.example.com:8443", "pds.example.com"},
		{"https://pds.example.com", "pds.example.com:8443"},
		{"http://pds.example.com:443", "pds.example.com"},
		{"https://pds.example.com.evil.example", "pds.example.com"},
		{"https://[2001:db8::1]", "[2001:db8::2]"},
	} {
		info := &ident.Info{DID: "did:plc:x", PDS: c.pds}
		if err := ident.CheckAuthority(info, c.host); ident.Class(err) != ident.ClassAuthority {
			t.Errorf("document %q, fetched from %q: %v, want class %q", c.pds, c.host, err, ident.ClassAuthority)
		}
	}
}

func expect(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string, want float64) {
	t.Helper()
	if got := promtest.Value(t, reg, name, labels); got != want {
		t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
	}
}

// TestFailuresLogOncePerMinute: a hundred verification failures of one kind
// write one line, which counts them; a minute later the next writes another.
func TestFailuresLogOncePerMinute(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	r := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Logger: slog.New(slog.NewTextHandler(&buf, nil)),
		Now: func() time.Time { return now }})
	for range 100 {
		r.Verified(ident.PathLive, ident.OutcomeSignature, "did:plc:x")
	}
	r.Verified(ident.PathLive, ident.OutcomeOK, "did:plc:x")
	if got := strings.Count(buf.String(), "verification failed"); got != 1 || !strings.Contains(buf.String(), "occurrences=1 ") {
		t.Fatalf("%d lines after 100 failures:\n%s", got, buf.String())
	}
	now = now.Add(time.Minute)
	r.Verified(ident.PathLive, ident.OutcomeSignature, "did:plc:x")
	if got := strings.Count(buf.String(), "verification failed"); got != 2 || !strings.Contains(buf.String(), "occurrences=100 ") {
		t.Fatalf("%d lines a minute later:\n%s", got, buf.String())
	}
}

// TestHugeDocumentRefused: a directory (or a did:web host, anyone's) that
// answers with an endless body is cut at MaxDocumentBytes: the DID is
// unresolvable, the memory bounded.
func TestHugeDocumentRefused(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		chunk := bytes.Repeat([]byte(" "), 64<<10)
		for range 64 { // 4 MiB of JSON whitespace, then nothing valid
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	r := ident.New(ident.Config{PLC: srv.URL, Retries: -1})
	_, _, err := r.Lookup(context.Background(), "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa")
	if ident.Class(err) != ident.ClassIdentity || !errors.Is(err, ident.ErrDocumentTooLarge) {
		t.Fatalf("huge document: %v", err)
	}
}

// TestKeysArePrepared: a key from the network and one from the durable
// copy are both prepared for libsecp256k1 (k256.ParsePublicMultibase) in a cgo build,
// and both verify the account's commits.
func TestKeysArePrepared(t *testing.T) {
	n := startNet(t)
	a := firstActive(t, n)
	st := &memStore{m: map[string]archive.Ident{}}
	ctx := context.Background()
	r := ident.New(ident.Config{PLC: n.RelayURL(), Store: st, Persist: st.persist})
	defer r.Close()
	fromNet, fresh, err := r.Lookup(ctx, a.DID)
	if err != nil || !fresh {
		t.Fatalf("lookup: %v fresh=%v", err, fresh)
	}
	r2 := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Store: st, Retries: -1})
	defer r2.Close()
	fromStore, fresh, err := r2.Lookup(ctx, a.DID)
	if err != nil || fresh {
		t.Fatalf("durable lookup: %v fresh=%v", err, fresh)
	}
	parsed, err := atcrypto.ParsePublicMultibase(a.PublicKeyMultibase)
	if err != nil {
		t.Fatal(err)
	}
	for tier, info := range map[string]*ident.Info{"network": fromNet, "store": fromStore} {
		if prepared := reflect.TypeOf(info.Key) != reflect.TypeOf(parsed); prepared != k256.Native {
			t.Errorf("%s: key %T, prepared %v, want %v", tier, info.Key, prepared, k256.Native)
		}
		if err := headCommit(t, n, a.DID).VerifySignature(info.Key); err != nil {
			t.Errorf("%s: %v", tier, err)
		}
	}
}
