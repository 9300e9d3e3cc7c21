package ident

// ident.go owns the Resolver: lookups through the memory cache, the durable
// copy and the network, forced refreshes, invalidation, and the signature
// check with one re-resolution.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/k256"
	"github.com/backstream/backstream/internal/loglimit"
	"github.com/backstream/backstream/upstream"
)

// Defaults of Config.
const (
	DefaultPLC         = "https://plc.directory"
	DefaultTimeout     = 10 * time.Second
	DefaultConcurrency = 64
	// DefaultRate is the request rate serve holds the public PLC directory
	// to (indigo's own PLC clients default to 100–300/s).
	DefaultRate        = 300
	DefaultRetries     = 2
	DefaultTTL         = 24 * time.Hour
	DefaultCacheSize   = 100_000
	DefaultBackoffBase = 250 * time.Millisecond
	DefaultBackoffMax  = 5 * time.Second
)

// Defaults of Config's handle check.
const (
	// DefaultHandleTimeout bounds an #identity's handle check (DNS TXT,
	// then the well-known request), which runs on the firehose's path:
	// ONE sequencer takes verified frames back in read order, so a handle
	// host that holds the request stalls every account's frames for this
	// long. A healthy host answers in one connection's round trips (well
	// under a second from anywhere); 2 s leaves room for a slow TLS
	// handshake while bounding what a hostile host costs per event.
	DefaultHandleTimeout = 2 * time.Second
	// DefaultHandleTTL is how long a handle check's result for a (DID,
	// handle) pair stands: a repeated #identity naming the same pair
	// within it is not checked again (an operator's fix of a DNS record
	// is seen within it).
	DefaultHandleTTL = 10 * time.Minute
)

// ErrUnresolvable: the DID could not be resolved to a usable document (not
// found, the directory failing past the retry budget, no signing key).
// Failure class "identity", retryable.
var ErrUnresolvable = errors.New("identity unresolvable")

// ErrNoKey: the document declares no usable atproto signing key. It matches
// ErrUnresolvable.
var ErrNoKey = fmt.Errorf("%w: DID document has no atproto signing key", ErrUnresolvable)

// ErrBadSignature: a commit's signature does not verify with the DID's
// current key, re-resolved once. Failure class "signature".
var ErrBadSignature = errors.New("commit signature does not verify with the DID's key")

// Failure classes of this package's errors (archive.RepoState.ErrClass).
const (
	ClassIdentity  = "identity"
	ClassSignature = "signature"
	ClassAuthority = "authority"
)

// Info is what backstream keeps of a DID document.
type Info struct {
	DID string
	// Key is the atproto signing key (prepared for repeated checks:
	// k256.ParsePublicMultibase, k256.Prepare); KeyMultibase its stored form.
	Key          atcrypto.PublicKey
	KeyMultibase string
	// PDS is the atproto_pds endpoint URL ("" when none).
	PDS string
	// Handle is the verdict of the last #identity event that named a
	// handle (CheckIdentity): the handle verified both ways, or
	// HandleInvalid; "" when none was checked since the DID was first
	// resolved or last invalidated. A resolution in between keeps it.
	Handle    string
	FetchedAt time.Time
	// declared is the handle the document declares (its first at://
	// alsoKnownAs); set only on a document resolved in this process.
	declared string
	// exported says the document came from the directory's export
	// (ReadExport, or an ident/ row it wrote), not from a resolution of
	// the DID.
	exported bool
}

// ResolvedSince reports whether info came from a resolution of its DID
// over the network at or after t (the resolver's clock, Resolver.Now): a
// check that fails with it would resolve the same document again. A
// durable copy keeps its first fetch's time; a document from the
// directory's export never counts.
func (i *Info) ResolvedSince(t time.Time) bool { return !i.exported && !i.FetchedAt.Before(t) }

// usable reports whether a cached entry is a document. An entry without a
// key marks the DID invalidated at its FetchedAt (an #identity, or the
// directory no longer giving it a key): its next lookup resolves it.
func (i *Info) usable() bool { return i != nil && i.Key != nil }

// PDSHost is host[:port] of the PDS endpoint ("" when none or unparsable),
// in the form upstream.Download.FinalHost takes (upstream.CanonicalHost
// under the endpoint's scheme): an endpoint written
// https://PDS.example.com.:443 is pds.example.com.
func (i *Info) PDSHost() string {
	u, err := url.Parse(i.PDS)
	if err != nil {
		return ""
	}
	return upstream.CanonicalHost(u.Scheme, u.Host)
}

// Store is the durable copy's read side (*archive.Store).
type Store interface {
	Ident(did string) (archive.Ident, error)
}

// emptyReporter is a Store that can tell it holds no ident/ row at all
// (*archive.Store): a resolver on one that holds none skips the durable
// read of a DID memory does not hold (Resolver.memoryOnly).
type emptyReporter interface {
	NoIdents() (bool, error)
}

var _ emptyReporter = (*archive.Store)(nil)

// Config configures a Resolver. Zero fields take the defaults.
type Config struct {
	// PLC is the PLC directory's base URL (scheme, host, optional port).
	PLC string
	// Timeout bounds one request to the directory (or a did:web host).
	Timeout time.Duration
	// Concurrency bounds the network resolutions in flight. Each takes the
	// directory's latency, so it bounds resolutions per second to
	// Concurrency / latency (64 at 50 ms: 1,280/s, above bootstrap's
	// download rate).
	Concurrency int
	// Rate bounds the requests per second to the PLC directory, retries
	// included (a burst of Concurrency); 0: none (DefaultRate is the
	// public directory's). did:web requests go to each account's own host
	// and are not paced.
	Rate float64
	// Retries is the budget of retries of a failed request per resolution;
	// negative means none.
	Retries                 int
	BackoffBase, BackoffMax time.Duration
	// TTL is how long a resolved document is trusted (memory and store).
	TTL time.Duration
	// CacheSize bounds the memory cache's entries (the documents' and,
	// separately, the handle results').
	CacheSize int
	// HandleTimeout bounds the one attempt of a handle's resolution
	// (CheckIdentity; at most Timeout); HandleTTL is how long its result
	// for a (DID, handle) pair is reused.
	HandleTimeout, HandleTTL time.Duration
	// Store, when set, is read on a memory miss.
	Store Store
	// Persist, when set, writes a network resolution's result durably
	// (ident/<did> through the writer). Its error is counted, not returned.
	Persist func(ctx context.Context, did string, v archive.Ident) error
	// Mode is the verification mode the callers apply (Resolver.Mode).
	Mode Mode
	// Web, when set (an http(s) base URL), receives every did:web document
	// and handle well-known request in place of https://<name>, with the
	// name as the Host header, and handles are not looked up in DNS: the
	// simulated network answers them all by Host. "" (production): each
	// name is asked directly.
	Web string
	// Dial, when set, makes every connection of the resolver's own client
	// (node wires upstream's address policy, Client.GuardedDial: a did:web
	// or handle host on a private, loopback or metadata address is
	// refused); no proxy is used then.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Verifiers is how many live frames the firehose consumer checks in
	// parallel (Resolver.Verifiers; 0: GOMAXPROCS).
	Verifiers int
	// HTTPClient overrides the client built from Timeout, Dial and Web
	// (tests).
	HTTPClient *http.Client
	Metrics    *Metrics
	Logger     *slog.Logger
	// Now, Sleep and Rand are the clock, the backoff sleep and the jitter
	// source (defaults: time.Now, backoff.Sleep, math/rand/v2).
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error
	Rand  func() float64
}

func (c *Config) defaults() {
	if c.PLC == "" {
		c.PLC = DefaultPLC
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Concurrency <= 0 {
		c.Concurrency = DefaultConcurrency
	}
	switch {
	case c.Retries == 0:
		c.Retries = DefaultRetries
	case c.Retries < 0:
		c.Retries = 0
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.TTL <= 0 {
		c.TTL = DefaultTTL
	}
	if c.HandleTimeout <= 0 {
		c.HandleTimeout = DefaultHandleTimeout
	}
	if c.HandleTTL <= 0 {
		c.HandleTTL = DefaultHandleTTL
	}
	if c.CacheSize <= 0 {
		c.CacheSize = DefaultCacheSize
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Sleep == nil {
		c.Sleep = backoff.Sleep
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
}

// Resolver resolves DIDs. Safe for concurrent use. Its background
// refreshes are owned goroutines that Close stops.
type Resolver struct {
	cfg    Config
	dir    *identity.BaseDirectory
	export *http.Client // ReadExport's: no cap on the body (it reads it line by line)
	cache  *cache[*Info]
	slots  chan struct{}
	pacer  *rate.Limiter // PLC requests per second; nil: none
	flight singleflight.Group
	m      *Metrics
	lines  *loglimit.Every // one line per trip kind per logEvery
	// handles: a handle resolution's result by (DID, handle) (handle.go).
	handles *cache[string]
	// memoryOnly holds while every ident/ row the store can have is one
	// this resolver wrote and still holds in memory: the store had none
	// when it started and the cache has evicted nothing since. A memory
	// miss then skips the durable read (a bootstrap's every DID is one).
	memoryOnly atomic.Bool

	// Background refreshes of expired entries (revalidate): at most
	// Concurrency at once, stopped by Close.
	bg     chan struct{}
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// logEvery is the interval of this package's rate-limited log lines.
const logEvery = time.Minute

// New returns a Resolver for cfg.
func New(cfg Config) *Resolver {
	cfg.defaults()
	hc := cfg.HTTPClient
	if hc == nil {
		// No client Timeout: every request runs under a deadline of its
		// own ctx (a resolution's Timeout, a handle check's HandleTimeout,
		// at most Timeout). A client Timeout over a transport it does not
		// know (capBodies) costs each request a goroutine, a timer and two
		// channels.
		hc = &http.Client{Transport: capBodies{cfg.transport()}}
	}
	export := cfg.HTTPClient
	if export == nil {
		export = &http.Client{Transport: cfg.transport()}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var pacer *rate.Limiter
	if cfg.Rate > 0 {
		pacer = rate.NewLimiter(rate.Limit(cfg.Rate), cfg.Concurrency)
	}
	r := &Resolver{
		pacer:   pacer,
		bg:      make(chan struct{}, cfg.Concurrency),
		ctx:     ctx,
		cancel:  cancel,
		cfg:     cfg,
		export:  export,
		dir:     &identity.BaseDirectory{PLCURL: cfg.PLC, HTTPClient: *hc, SkipHandleVerification: true, UserAgent: "backstream"},
		cache:   newCache[*Info](cfg.CacheSize, cfg.TTL),
		handles: newCache[string](cfg.CacheSize, cfg.HandleTTL),
		slots:   make(chan struct{}, cfg.Concurrency),
		m:       cfg.Metrics,
		lines:   loglimit.New(logEvery, cfg.Now),
	}
	r.memoryOnly.Store(storeHoldsNone(cfg.Store))
	return r
}

// storeHoldsNone reports whether st holds no ident/ row; false when there
// is no store (nothing to skip), it cannot tell, or the scan fails (read
// it as usual).
func storeHoldsNone(st Store) bool {
	e, ok := st.(emptyReporter)
	if !ok {
		return false
	}
	none, err := e.NoIdents()
	return err == nil && none
}

// hold puts did's entry in the document cache; an eviction ends
// memoryOnly (the evicted DID's row may be in the store).
func (r *Resolver) hold(did string, info *Info, expires time.Time) {
	if r.cache.put(did, info, expires) {
		r.memoryOnly.Store(false)
	}
}

// Mode is the configured verification mode; a nil Resolver is ModeOff.
func (r *Resolver) Mode() Mode {
	if r == nil {
		return ModeOff
	}
	return r.cfg.Mode
}

// Verifiers is Config.Verifiers, GOMAXPROCS when unset; 1 on a nil
// Resolver. (With the relay in the same process, as in the firehose
// package's benchmark, one verifier fewer than the CPUs is faster: two
// verifiers on 2 CPUs starve the relay; with serve and the relay as
// separate processes, two are faster.)
func (r *Resolver) Verifiers() int {
	if r == nil {
		return 1
	}
	if r.cfg.Verifiers > 0 {
		return r.cfg.Verifiers
	}
	return runtime.GOMAXPROCS(0)
}

// Verified counts one verification of did on path with outcome (nil-safe);
// a failure is logged once per path and outcome per minute.
func (r *Resolver) Verified(path, outcome, did string) {
	if r == nil {
		return
	}
	r.m.Verified(path, outcome)
	if outcome != OutcomeOK {
		r.logTrip(path+"/"+outcome, "ident: verification failed", "path", path, "outcome", outcome, "mode", r.cfg.Mode.String(),
			"did", loglimit.Clip(did, 256))
	}
}

// logTrip logs msg at Warn when key's line is due, with the number of
// occurrences it stands for.
func (r *Resolver) logTrip(key, msg string, args ...any) {
	r.lines.Log(r.cfg.Logger, slog.LevelWarn, key, msg, args...)
}

// MaxDocumentBytes bounds a DID document response: a did:web host is
// anyone's, and indigo reads the whole body.
const MaxDocumentBytes = 1 << 20

// ErrDocumentTooLarge: a DID document response exceeded MaxDocumentBytes.
var ErrDocumentTooLarge = errors.New("DID document response too large")

// capBodies cuts every response body at MaxDocumentBytes.
type capBodies struct{ next http.RoundTripper }

func (c capBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(req)
	if err == nil {
		resp.Body = &cappedBody{rc: resp.Body, left: MaxDocumentBytes}
	}
	return resp, err
}

// cappedBody fails a read past its limit instead of returning a silently
// truncated document.
type cappedBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		if n, err := b.rc.Read(one[:]); n == 0 && err == io.EOF {
			return 0, io.EOF
		}
		return 0, ErrDocumentTooLarge
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }

// Lookup returns did's document: from memory, from the durable copy, or
// from the network (written back). fresh says it came from the network
// during this call (Info.ResolvedSince the call's start). A document past its TTL is still returned at once (not fresh:
// a failed check with it resolves again) while a background refresh
// replaces it, so an expired entry never puts a network round trip on the
// caller's path; only a DID never seen or invalidated does.
func (r *Resolver) Lookup(ctx context.Context, did string) (info *Info, fresh bool, err error) {
	now := r.cfg.Now()
	info, expired, ok := r.cached(did, now)
	var since time.Time // any answer will do, unless the DID was invalidated
	switch {
	case ok && info.usable():
		r.m.cache(tierMemory)
		if expired {
			r.revalidate(did, info, now)
		}
		return info, false, nil
	case ok: // invalidated: the durable copy is stale too, and so is any answer requested before
		since, info = info.FetchedAt, nil
	default:
		info, err = r.durable(did)
	}
	if err != nil {
		return nil, false, err
	}
	if info != nil {
		r.m.cache(tierStore)
		r.hold(did, info, info.FetchedAt.Add(r.cfg.TTL))
		if !now.Before(info.FetchedAt.Add(r.cfg.TTL)) {
			r.revalidate(did, info, now)
		}
		return info, false, nil
	}
	r.m.cache(tierMiss)
	if info, err = r.refreshSince(ctx, did, since); err != nil {
		return nil, false, err
	}
	// The flight may have found a document in memory that arrived since
	// (another flight's, or the directory's export): fresh by the one rule.
	return info, info.ResolvedSince(now), nil
}

// Now is the resolver's clock, the one documents' FetchedAt is read from.
func (r *Resolver) Now() time.Time {
	if r == nil {
		return time.Now()
	}
	return r.cfg.Now()
}

// Known reports whether memory holds a usable document for did (expired
// or not), so a Lookup would not wait for the network. It is not counted
// as a lookup.
func (r *Resolver) Known(did string) bool {
	if r == nil {
		return true
	}
	info, _, ok := r.cache.get(did, r.cfg.Now())
	return ok && info.usable()
}

// revalidate refreshes did's expired document in the background (see
// background). The stale entry is kept for revalidateGrace meanwhile, so a
// burst of lookups starts one refresh.
func (r *Resolver) revalidate(did string, stale *Info, now time.Time) {
	r.hold(did, stale, now.Add(min(revalidateGrace, r.cfg.TTL)))
	r.background(did, now)
}

// background resolves did on an owned goroutine, unless as many background
// refreshes as Concurrency already run (a later lookup resolves it then),
// or a document fetched since `since` is in memory by the time it starts.
func (r *Resolver) background(did string, since time.Time) {
	select {
	case r.bg <- struct{}{}:
	default:
		return
	}
	r.wg.Add(1)
	go func() { // owned: Close cancels r.ctx and waits
		defer r.wg.Done()
		defer func() { <-r.bg }()
		_, err := r.refreshSince(r.ctx, did, since)
		if err == nil || r.ctx.Err() != nil {
			return
		}
		r.m.staleFailed()
		if errors.Is(err, identity.ErrDIDNotFound) || errors.Is(err, ErrNoKey) {
			// A definite answer: the DID has no document or no key any
			// more. Its stale document must not keep verifying.
			r.forget(did, r.cfg.Now())
		}
	}()
}

// revalidateGrace is how long an expired entry serves while its refresh
// runs, before a lookup may start another.
const revalidateGrace = time.Minute

// Close stops the background refreshes and waits for them. Lookups after
// Close still work, without background refreshes.
func (r *Resolver) Close() {
	if r == nil {
		return
	}
	r.cancel()
	r.wg.Wait()
}

// durable reads the store's copy (row), its key parsed: nil when absent,
// or when the row marks the DID invalidated (forget); a key that does not
// parse is malformed (fail closed).
func (r *Resolver) durable(did string) (*Info, error) {
	info, err := r.row(did)
	if err != nil || info == nil || info.KeyMultibase == "" {
		return nil, err
	}
	if info.Key, err = k256.ParsePublicMultibase(info.KeyMultibase); err != nil {
		return nil, fmt.Errorf("ident: %s: stored key: %w: %w", did, archive.ErrMalformed, err)
	}
	return info, nil
}

// row reads did's ident/ row, dated, whatever its age, its key not parsed
// (Key nil; KeyMultibase "" when the row marks the DID invalidated): nil
// when absent; an unreadable or malformed row is an error (fail closed).
// While memoryOnly holds, a DID memory does not hold has no row: nothing
// is read.
func (r *Resolver) row(did string) (*Info, error) {
	if r.cfg.Store == nil || r.memoryOnly.Load() {
		return nil, nil
	}
	v, err := r.cfg.Store.Ident(did)
	switch {
	case errors.Is(err, archive.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("ident: %s: %w", did, err)
	}
	info := &Info{DID: did, PDS: v.PDS, Handle: v.Handle, FetchedAt: time.UnixMicro(v.FetchedUS)}
	info.KeyMultibase, info.exported = v.Key, v.Exported
	return r.dated(info, r.cfg.Now()), nil
}

// cached is memory's entry for did (cache.get), dated: one fetched ahead
// of now has expired.
func (r *Resolver) cached(did string, now time.Time) (info *Info, expired, ok bool) {
	info, expired, ok = r.cache.get(did, now)
	if !ok || !info.FetchedAt.After(now) {
		return info, expired, ok
	}
	return r.dated(info, now), true, true
}

// dated is info, or a copy fetched a TTL before now when info was fetched
// ahead of now: the wall clock ran ahead then and has been put right
// since, so when it was really fetched is unknown. Such a document has
// expired and is resolved since nothing recent; such an invalidation
// takes an answer requested from a TTL ago, so after the clock was put
// right. (A clock that carries Go's monotonic reading, as time.Now does,
// compares times it took in this process by that reading; ident/ rows
// read back have none.)
func (r *Resolver) dated(info *Info, now time.Time) *Info {
	if !info.FetchedAt.After(now) {
		return info
	}
	c := *info
	c.FetchedAt = now.Add(-r.cfg.TTL)
	return &c
}

// Refresh resolves did over the network (one flight per DID; concurrent
// callers share one that started after their call), replaces the cached
// entry and writes it back.
func (r *Resolver) Refresh(ctx context.Context, did string) (*Info, error) {
	return r.refreshSince(ctx, did, r.cfg.Now())
}

// refreshSince returns a document resolved at or after since (the zero
// since: any): one memory already holds (another flight resolved it
// meanwhile), else a flight's (one flight per DID), so one invalidation or
// expiry costs one resolution, whatever the interleaving of lookups and
// background refreshes. A flight that started before since is joined and
// then resolved again: its answer may predate what since stands for (an
// #identity announcing a rotation). A document from the directory's
// export counts too: one loaded before an #identity never answers it,
// because the invalidation replaces it in memory before this looks and
// the export does not load over an invalidation.
func (r *Resolver) refreshSince(ctx context.Context, did string, since time.Time) (*Info, error) {
	for {
		// A since ahead of now was taken while the wall clock ran ahead:
		// anything requested from now on is newer.
		if now := r.cfg.Now(); since.After(now) {
			since = now
		}
		v, err, _ := r.flight.Do(did, func() (any, error) {
			if info, _, ok := r.cached(did, r.cfg.Now()); ok && info.usable() && !info.FetchedAt.Before(since) {
				return info, nil
			}
			return r.resolve(ctx, did)
		})
		if err != nil {
			return nil, err
		}
		if info := r.dated(v.(*Info), r.cfg.Now()); !info.FetchedAt.Before(since) {
			return info, nil
		}
	}
}

// Reresolve is Refresh forced by a check that failed with a document that
// did not come from the network just now (counted as a re-resolution).
func (r *Resolver) Reresolve(ctx context.Context, did string) (*Info, error) {
	r.m.reresolved()
	return r.Refresh(ctx, did)
}

// Invalidate marks did's document stale (an #identity event), in memory
// and in the durable copy, and refreshes it in the background: the next
// Lookup finds the new document, or (the refresh not done yet, even after
// an eviction or a restart) resolves it over the network. Either way one
// resolution follows an invalidation, and no answer the directory gave
// before it is kept.
func (r *Resolver) Invalidate(did string) {
	now := r.cfg.Now()
	r.forget(did, now)
	r.m.invalidated()
	r.background(did, now)
}

// forget marks did invalidated at now: in memory, and in ident/ by a row
// without a key (submitted before anything the caller submits next, so it
// is durable no later than the event that caused it), which durable reads
// as absent.
func (r *Resolver) forget(did string, now time.Time) {
	r.hold(did, &Info{DID: did, FetchedAt: now}, now.Add(r.cfg.TTL))
	if r.cfg.Persist == nil {
		return
	}
	if err := r.cfg.Persist(r.ctx, did, archive.Ident{FetchedUS: max(now.UnixMicro(), 1)}); err != nil {
		r.m.persistFailed()
		r.logTrip("persist", "ident: an invalidation could not be submitted for ident/", "err", err)
	}
}

// resolve is one network resolution under the concurrency limit, with the
// retry budget.
func (r *Resolver) resolve(ctx context.Context, did string) (*Info, error) {
	d, err := syntax.ParseDID(did)
	if err != nil {
		r.m.resolution(resultNotFound)
		return nil, fmt.Errorf("%w: %s: %w", ErrUnresolvable, did, err)
	}
	var id *identity.Identity
	var started time.Time // the successful attempt's start: the answer is at least as new
	attempts, err := r.withRetries(ctx, did, func(ctx context.Context) error {
		if err := r.pace(ctx, d); err != nil {
			return err
		}
		t0 := time.Now()
		started = r.cfg.Now()
		var err error
		id, err = r.fetch(ctx, d)
		r.m.observe(time.Since(t0).Seconds())
		return err
	}, func(err error) bool {
		// A refused address is refused again: not worth a retry.
		return errors.Is(err, identity.ErrDIDNotFound) || errors.Is(err, upstream.ErrForbiddenRedirect)
	})
	switch {
	case err == nil:
		return r.accept(ctx, did, id, started)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("ident: %s: %w", did, ctx.Err())
	case errors.Is(err, identity.ErrDIDNotFound):
		r.m.resolution(resultNotFound)
		return nil, fmt.Errorf("%w: %s: %w", ErrUnresolvable, did, err)
	}
	r.m.resolution(resultFailed)
	r.logTrip("failed", "ident: DID resolution failed past its retries", "did", did, "attempts", attempts, "err", loglimit.Clip(err.Error(), 512))
	return nil, fmt.Errorf("%w: %s: after %d attempts: %w", ErrUnresolvable, did, attempts, err)
}

// withRetries runs try under one of the Concurrency slots (a wait for one
// counted), again after a backoff while it fails, up to the retry budget;
// an error that is permanent, or the end of ctx, stops it at once. It
// returns the attempts made and the last error.
func (r *Resolver) withRetries(ctx context.Context, what string, try func(context.Context) error, permanent func(error) bool) (int, error) {
	select {
	case r.slots <- struct{}{}:
	default:
		r.m.limited()
		r.logTrip("limited", "ident: resolutions waiting for a slot", "concurrency", r.cfg.Concurrency)
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return 0, fmt.Errorf("ident: %s: %w", what, ctx.Err())
		}
	}
	defer func() { <-r.slots }()
	policy := backoff.Policy{Base: r.cfg.BackoffBase, Max: r.cfg.BackoffMax}
	for attempt := 0; ; attempt++ {
		err := try(ctx)
		if err == nil || ctx.Err() != nil || permanent(err) || attempt >= r.cfg.Retries {
			return attempt + 1, err
		}
		r.m.retry()
		if err := r.cfg.Sleep(ctx, policy.Delay(attempt, r.cfg.Rand())); err != nil {
			return attempt + 1, fmt.Errorf("ident: %s: %w", what, err)
		}
	}
}

// pace waits for the PLC request rate (Config.Rate) before a did:plc
// request, counting and logging (once a minute) when it has to.
func (r *Resolver) pace(ctx context.Context, d syntax.DID) error {
	if d.Method() != "plc" {
		return nil
	}
	return r.pacePLC(ctx)
}

// pacePLC waits for the PLC request rate before any request to the
// directory (a resolution's or an export page's).
func (r *Resolver) pacePLC(ctx context.Context) error {
	if r.pacer == nil || r.pacer.Allow() {
		return nil
	}
	r.m.paced()
	r.logTrip("rate", "ident: PLC requests held to the request rate", "rate", r.cfg.Rate)
	return r.pacer.Wait(ctx)
}

func (r *Resolver) fetch(ctx context.Context, d syntax.DID) (*identity.Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	if d.Method() == "plc" {
		return r.fetchPLC(ctx, d)
	}
	if err := webHost(d); err != nil {
		return nil, err
	}
	doc, err := r.dir.ResolveDID(ctx, d) // LookupDID's request and outcomes; the handle is not checked here
	if err != nil {
		return nil, err
	}
	id := parseIdentity(doc)
	return &id, nil
}

// webHost refuses, as not found, a did:web whose identifier is not a bare
// hostname (a port or a path: atproto's did:web is a hostname only). No
// request is made, and the refusal is permanent: a retry would only hold
// a slot through its backoff.
func webHost(d syntax.DID) error {
	if d.Method() != "web" {
		return nil
	}
	if _, err := syntax.ParseHandle(d.Identifier()); err != nil {
		return fmt.Errorf("%w: %s: not a bare hostname (atproto's did:web has no port and no path)", identity.ErrDIDNotFound, d)
	}
	return nil
}

// accept turns an identity resolved by a request started at fetched into
// an Info, caches and persists it. A document without a usable signing key
// is ErrNoKey (not cached: a fixed document is seen at the next lookup).
// An answer requested before the DID was invalidated is returned to the
// flight's callers but not kept: the invalidation's own resolution
// replaces it.
func (r *Resolver) accept(ctx context.Context, did string, id *identity.Identity, fetched time.Time) (*Info, error) {
	info := &Info{DID: did, PDS: id.PDSEndpoint(), FetchedAt: fetched}
	if h, err := id.DeclaredHandle(); err == nil {
		info.declared = h.Normalize().String()
	}
	prev, _, ok := r.cached(did, r.cfg.Now())
	if ok && prev.usable() {
		info.Handle = prev.Handle // the last #identity verdict stands
	}
	k, err := atprotoKey(id)
	if err != nil {
		r.m.resolution(resultNoKey)
		return nil, fmt.Errorf("%w: %s: %w", ErrNoKey, did, err)
	}
	info.Key, info.KeyMultibase = k, storedKey(id, k)
	r.m.resolution(resultOK)
	if ok && !prev.usable() && fetched.Before(prev.FetchedAt) {
		return info, nil
	}
	r.keep(ctx, info)
	return info, nil
}

// atprotoKey is id.PublicKey() prepared for repeated checks: a Multikey
// (every did:plc key) parsed by k256.ParsePublicMultibase, which accepts
// exactly what atcrypto does without its pure-Go point decompression; a
// legacy key type parsed by indigo, then k256.Prepare.
func atprotoKey(id *identity.Identity) (atcrypto.PublicKey, error) {
	if vm, ok := id.Keys["atproto"]; ok && vm.Type == "Multikey" {
		return k256.ParsePublicMultibase(vm.PublicKeyMultibase)
	}
	k, err := id.PublicKey()
	return k256.Prepare(k), err // nil stays nil
}

// storedKey is the form of id's atproto key k kept in ident/: the
// document's own string when it is a Multikey (k was parsed from exactly
// it, and durable parses it the same way), so a resolution does not
// compress and base58-encode the point again; k.Multibase() for a legacy
// key type.
func storedKey(id *identity.Identity, k atcrypto.PublicKey) string {
	if vm, ok := id.Keys["atproto"]; ok && vm.Type == "Multikey" {
		return vm.PublicKeyMultibase
	}
	return k.Multibase()
}

// keep caches info until its TTL runs out and writes it back to ident/.
func (r *Resolver) keep(ctx context.Context, info *Info) {
	r.hold(info.DID, info, info.FetchedAt.Add(r.cfg.TTL))
	r.m.entries(r.cache.len())
	if r.cfg.Persist == nil {
		return
	}
	v := archive.Ident{Key: info.KeyMultibase, PDS: info.PDS, Handle: info.Handle, FetchedUS: max(info.FetchedAt.UnixMicro(), 1), Exported: info.exported}
	if err := r.cfg.Persist(ctx, info.DID, v); err != nil {
		r.m.persistFailed()
		r.logTrip("persist", "ident: a resolved document could not be submitted for ident/", "err", err)
	}
}

// VerifyCommit checks c's signature with did's current key (Lookup, then
// Verify).
func (r *Resolver) VerifyCommit(ctx context.Context, did string, c *repo.Commit) (*Info, error) {
	info, fresh, err := r.Lookup(ctx, did)
	if err != nil {
		return nil, err
	}
	return r.Verify(ctx, info, fresh, c)
}

// MaxRevAhead is how far ahead of the clock a commit's rev may be: the
// relay's own tolerance of clock skew. A commit further ahead, archived,
// would move its account's ratchet past every genuine commit until then.
const MaxRevAhead = 5 * time.Minute

// RevAhead reports whether rev is a TID of a time more than MaxRevAhead
// after now (false for a rev that is not a TID: the structural checks
// refuse it).
func RevAhead(rev string, now time.Time) bool {
	return upstream.ValidTID(rev) && syntax.TID(rev).Time().After(now.Add(MaxRevAhead))
}

// Verify checks c's signature with info's key. When it fails and info did
// not come from the network just now (fresh), the DID is resolved again
// once (a rotated key) and the check repeated. It returns the document the
// check used: ErrUnresolvable or ErrBadSignature otherwise.
func (r *Resolver) Verify(ctx context.Context, info *Info, fresh bool, c *repo.Commit) (*Info, error) {
	err := c.VerifySignature(info.Key)
	if err == nil {
		return info, nil
	}
	if !fresh {
		if info, err = r.Reresolve(ctx, info.DID); err != nil {
			return nil, err
		}
		if err = c.VerifySignature(info.Key); err == nil {
			return info, nil
		}
	}
	return info, fmt.Errorf("%w: %s rev %s: %w", ErrBadSignature, info.DID, c.Rev, err)
}

// UnknownDID reports whether err says the PLC directory has no document
// for the DID (a definite 404, not a failure to ask): the DID does not
// exist, or no longer does.
func UnknownDID(err error) bool {
	return errors.Is(err, ErrUnresolvable) && errors.Is(err, identity.ErrDIDNotFound)
}

// Class is the failure class of an error of this package ("" otherwise).
func Class(err error) string {
	switch {
	case errors.Is(err, ErrUnresolvable):
		return ClassIdentity
	case errors.Is(err, ErrBadSignature):
		return ClassSignature
	case errors.Is(err, ErrWrongAuthority):
		return ClassAuthority
	}
	return ""
}

// ErrWrongAuthority: a repository came from a host that is not the PDS its
// DID document names (a misattribution). Failure class "authority".
var ErrWrongAuthority = errors.New("repository served by a host that is not the DID's PDS")

// CheckAuthority refuses a repository of did fetched from host (host[:port],
// after redirects) unless host is the PDS info names, or one of trusted
// (the relay itself, which serves getRepo for any account). Hosts are
// compared in their canonical form (upstream.CanonicalHost; host and
// trusted, which name no scheme, under the endpoint's): a document naming
// https://pds.example.com:443 names a download from pds.example.com, and
// one naming https://pds.example.com names a download from
// pds.example.com:443.
func CheckAuthority(info *Info, host string, trusted ...string) error {
	if host == "" {
		return nil
	}
	var scheme string
	if u, err := url.Parse(info.PDS); err == nil {
		scheme = u.Scheme
	}
	host = upstream.CanonicalHost(scheme, host)
	for _, t := range trusted {
		if host == upstream.CanonicalHost(scheme, t) {
			return nil
		}
	}
	if want := info.PDSHost(); want == "" || host != want {
		return fmt.Errorf("%w: %s from %s, document names %q", ErrWrongAuthority, info.DID, host, info.PDS)
	}
	return nil
}
