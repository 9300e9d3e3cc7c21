// client.go owns the Client: construction, options, the HTTP transport with
// its timeouts, and listRepos paging.

package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/bluesky-social/indigo/atproto/syntax"
)

// Defaults for Options.
const (
	DefaultConnectTimeout        = 10 * time.Second
	DefaultResponseHeaderTimeout = 60 * time.Second
	DefaultIdleBodyTimeout       = 60 * time.Second
	DefaultMaxCARBytes           = 4 << 30
	DefaultUserAgent             = "backstream (+https://github.com/backstream/backstream)"
	DefaultListReposLimit        = 1000

	// maxErrorBody bounds how much of a non-200 body is read for the XRPC
	// error name and message.
	maxErrorBody = 64 << 10
	// maxListReposBody bounds a listRepos page (1000 entries are ~200 KiB).
	maxListReposBody = 32 << 20
	// maxCursorLen bounds the cursor a listRepos page may hand back.
	maxCursorLen = 64 << 10
)

// Options configures a Client. Zero values take the defaults.
type Options struct {
	// ConnectTimeout covers name resolution, TCP connect (all addresses)
	// and the TLS handshake. Default 10 s.
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout is the wait for the first response byte
	// (headers) after the request is written. Default 60 s.
	ResponseHeaderTimeout time.Duration
	// IdleBodyTimeout fails a body read that sees no byte for this long
	// (ErrIdleTimeout, transient). Default 60 s.
	IdleBodyTimeout time.Duration
	// UserAgent is sent on every request (and kept across redirects).
	UserAgent string
	// ScratchDir receives getRepo bodies (created if missing). Default
	// os.TempDir(); production sets <data-dir>/scratch.
	ScratchDir string
	// MaxCARBytes caps one getRepo body; more is ErrTooLarge. Default 4 GiB.
	MaxCARBytes int64
	// MemoryBodyBytes keeps a getRepo body of at most this many bytes in
	// memory (Download.Body) instead of a scratch file; a larger body
	// spills to the scratch file as it arrives. 0 (the default) always uses
	// the scratch file. Creating and removing one file per small repo was
	// a third of bootstrap's CPU on small repos; serve sets 1 MiB.
	MemoryBodyBytes int64
	// Resolve maps host names to addresses for every dial (nil: system
	// resolver). Every resolved address of a non-relay host is checked
	// against the E14 policy.
	Resolve Resolver
	// LoopbackHosts are host:port addresses on loopback that a redirect may
	// reach besides the relay's own port, for a relay on loopback whose
	// PDS hosts listen on ports of their own. Only their ports count
	// (every loopback address reaches the same wildcard listeners). Empty:
	// a loopback relay may redirect only to its own port, so a redirect to
	// another local server (backstream's own listener) is refused. Not
	// allowed with a relay off loopback.
	LoopbackHosts []string
	// Metrics may be nil.
	Metrics *Metrics

	// Download limits (limits.go). ScratchBudget bounds the bytes of every
	// scratch file together (default half the scratch volume's space above
	// its floor, at most DefaultScratchBudgetMax); MinFree is the scratch
	// volume's free-space floor (diskspace.Floor: 0 the default, negative off); a body
	// (any read's, not only getRepo's) slower than MinBodyBytes per BodyWindow fails with ErrSlowBody
	// (defaults DefaultMinBodyBytes, DefaultBodyWindow; negative
	// MinBodyBytes: no minimum); HostWorkers caps concurrent downloads per
	// redirect target host (default DefaultHostWorkers).
	ScratchBudget int64
	MinFree       int64
	MinBodyBytes  int64
	BodyWindow    time.Duration
	HostWorkers   int
	// Logger receives the limits' log lines (at most one a minute per
	// limit); nil discards.
	Logger *slog.Logger
}

// RepoSource is what enumeration and backfill need from the network.
// Error contract: every error is an *Error; decide with Classify.
type RepoSource interface {
	ListRepos(ctx context.Context, cursor string, limit int) (Page, error)
	GetRepo(ctx context.Context, did string) (*Download, error)
}

var _ RepoSource = (*Client)(nil)

// Client talks to one relay and, through its redirects, to PDS hosts. It is
// safe for concurrent use. It never writes to the store.
type Client struct {
	relay     *url.URL
	relayAddr string // the relay's key (canonicalHostPort)
	policy    addrPolicy
	opts      Options
	metrics   *Metrics
	transport *http.Transport
	http      *http.Client
	bufs      sync.Pool
	trips     *trips
	dialer    *guardedDialer
	scratch   *scratchSpace
	hosts     *hostSlots
	pace      *pacer
	down      *breaker
}

// New builds a Client for the relay at relayURL (http or https). Loopback
// redirect targets are allowed only when the relay's own host is loopback,
// and then only on its port or one of Options.LoopbackHosts'.
func New(relayURL string, opts Options) (*Client, error) {
	u, err := url.Parse(strings.TrimSpace(relayURL))
	if err != nil {
		return nil, fmt.Errorf("upstream: new: relay URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("upstream: new: relay URL %q: scheme must be http or https", relayURL)
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("upstream: new: relay URL %q: no host", relayURL)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("upstream: new: relay URL %q: must not carry credentials, query or fragment", relayURL)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	if opts.ConnectTimeout <= 0 {
		opts.ConnectTimeout = DefaultConnectTimeout
	}
	if opts.ResponseHeaderTimeout <= 0 {
		opts.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if opts.IdleBodyTimeout <= 0 {
		opts.IdleBodyTimeout = DefaultIdleBodyTimeout
	}
	if opts.UserAgent == "" {
		opts.UserAgent = DefaultUserAgent
	}
	if opts.MaxCARBytes <= 0 {
		opts.MaxCARBytes = DefaultMaxCARBytes
	}
	if opts.ScratchDir == "" {
		opts.ScratchDir = os.TempDir()
	}
	if opts.Resolve == nil {
		opts.Resolve = defaultResolve
	}
	policy, err := newAddrPolicy(u, opts.LoopbackHosts)
	if err != nil {
		return nil, fmt.Errorf("upstream: new: %w", err)
	}
	if opts.MinBodyBytes == 0 {
		opts.MinBodyBytes = DefaultMinBodyBytes
	}
	if opts.BodyWindow <= 0 {
		opts.BodyWindow = DefaultBodyWindow
	}
	if opts.HostWorkers <= 0 {
		opts.HostWorkers = DefaultHostWorkers
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(opts.ScratchDir, 0o755); err != nil {
		return nil, fmt.Errorf("upstream: new: scratch dir: %w", err)
	}
	c := &Client{
		relay:     u,
		relayAddr: canonicalHostPort(u),
		policy:    policy,
		opts:      opts,
		metrics:   opts.Metrics,
		trips:     newTrips(opts.Logger, opts.Metrics),
	}
	c.hosts = &hostSlots{max: opts.HostWorkers, trips: c.trips, n: map[string]int{}}
	c.pace = newPacer()
	c.down = newBreaker(c.relayAddr, opts.ConnectTimeout, c.trips)
	if c.scratch, err = newScratchSpace(opts.ScratchDir, opts.ScratchBudget, opts.MinFree, c.trips); err != nil {
		return nil, err
	}
	c.bufs.New = func() any { b := make([]byte, 128<<10); return &b }
	g := &guardedDialer{
		policy:    c.policy,
		relayAddr: c.relayAddr,
		resolve:   opts.Resolve,
		dialer:    net.Dialer{KeepAlive: 30 * time.Second},
		timeout:   opts.ConnectTimeout,
		metrics:   opts.Metrics,
	}
	c.dialer = g
	c.transport = &http.Transport{
		Proxy:                 nil, // a proxy would bypass the dial-time guard
		DialContext:           g.DialContext,
		TLSHandshakeTimeout:   opts.ConnectTimeout,
		ResponseHeaderTimeout: opts.ResponseHeaderTimeout,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   128,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	c.http = &http.Client{
		Transport:     c.transport,
		CheckRedirect: c.checkRedirect,
		// No Timeout: the caller's ctx covers the attempt, the transport
		// and the idle watch cover the phases.
	}
	return c, nil
}

// RelayURL returns the relay base URL the client was built with.
func (c *Client) RelayURL() string { return c.relay.String() }

// AllowLoopback reports whether any loopback redirect target is allowed,
// which is true exactly when the relay itself is on loopback (and then only
// on the relay's port or a declared loopback host's).
func (c *Client) AllowLoopback() bool { return len(c.policy.loopbackPorts) > 0 }

// Close releases idle connections.
func (c *Client) Close() { c.transport.CloseIdleConnections() }

// xrpcURL builds <relay>/xrpc/<nsid>?<q>.
func (c *Client) xrpcURL(nsid string, q url.Values) string { return xrpcURL(c.relay, nsid, q) }

// xrpcURL is base's XRPC endpoint nsid with query q.
func xrpcURL(base *url.URL, nsid string, q url.Values) string {
	u := *base
	u.Path = base.Path + "/xrpc/" + nsid
	u.RawQuery = q.Encode()
	return u.String()
}

// RepoEntry is one validated listRepos entry.
type RepoEntry struct {
	DID    string
	Head   string // commit CID as sent; not validated
	Rev    string // as sent; not validated
	Active bool   // absent in the response means true
	Status string // "" when absent; cut to MaxAccountStatus bytes
}

// MaxAccountStatus bounds an account status as the archive keeps it (an
// account event's, a repo state's): a longer one, listed or on the
// firehose, is cut there, at a UTF-8 character boundary (CutStatus).
const MaxAccountStatus = 64

// CutStatus is s cut to MaxAccountStatus bytes without splitting a
// character.
func CutStatus(s string) string {
	if len(s) <= MaxAccountStatus {
		return s
	}
	i := MaxAccountStatus
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

// Page is one listRepos page. Cursor "" means the listing is finished,
// unless CursorRefused says the relay handed back a cursor that could not
// be followed.
type Page struct {
	Repos  []RepoEntry
	Cursor string
	// Dropped counts entries refused by validation (also in metrics).
	Dropped int
	// CursorRefused is the length of a cursor longer than the 64 KiB a
	// cursor may have (a store key holds it): it is not followed, so Cursor
	// is "" and the listing cannot go past this page (CutCursorTooLong).
	// The page's repos are valid.
	CursorRefused int
}

type listReposWire struct {
	Cursor *string           `json:"cursor"`
	Repos  []json.RawMessage `json:"repos"`
}

type repoWire struct {
	Did    string  `json:"did"`
	Head   string  `json:"head"`
	Rev    string  `json:"rev"`
	Active *bool   `json:"active"`
	Status *string `json:"status"`
}

// ListRepos fetches one page of com.atproto.sync.listRepos from the relay.
// cursor "" starts at the beginning; any cursor string is passed through
// verbatim (query-escaped). limit <= 0 means 1000. Entries with an invalid
// DID or an undecodable shape are dropped and counted, never fatal; a cursor
// over 64 KiB is refused (Page.CursorRefused). Errors: *Error; decode with
// Classify, and CutReason when the error ends a listing.
func (c *Client) ListRepos(ctx context.Context, cursor string, limit int) (Page, error) {
	return c.listRepos(ctx, c.relay, cursor, limit)
}

// listRepos pages listRepos at base (the relay, or a PDS host).
func (c *Client) listRepos(ctx context.Context, base *url.URL, cursor string, limit int) (Page, error) {
	const op = "listRepos"
	if limit <= 0 {
		limit = DefaultListReposLimit
	}
	q := url.Values{}
	q.Set("limit", strconv.Itoa(limit))
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	body, host, err := c.fetchSmall(ctx, op, xrpcURL(base, "com.atproto.sync.listRepos", q), "application/json", maxListReposBody)
	if err != nil {
		c.metrics.request(op, Classify(err))
		return Page{}, err
	}
	page, err := c.parseListRepos(body)
	if err != nil {
		e := &Error{Op: op, Host: host, StatusCode: http.StatusOK, Err: err, kind: ErrMalformedResponse}
		c.metrics.request(op, ClassPermanent)
		return Page{}, e
	}
	c.metrics.request(op, ClassNone)
	return page, nil
}

func (c *Client) parseListRepos(body []byte) (Page, error) {
	var w listReposWire
	if err := json.Unmarshal(body, &w); err != nil {
		return Page{}, fmt.Errorf("%w: listRepos: %v", ErrMalformedResponse, err)
	}
	var p Page
	if w.Cursor != nil {
		if len(*w.Cursor) > maxCursorLen {
			p.CursorRefused = len(*w.Cursor)
		} else {
			p.Cursor = *w.Cursor
		}
	}
	p.Repos = make([]RepoEntry, 0, len(w.Repos))
	for _, raw := range w.Repos {
		var r repoWire
		if err := json.Unmarshal(raw, &r); err != nil {
			p.Dropped++
			c.metrics.listReposDropped("malformed")
			continue
		}
		if _, err := syntax.ParseDID(r.Did); err != nil {
			p.Dropped++
			c.metrics.listReposDropped("invalid_did")
			continue
		}
		e := RepoEntry{DID: r.Did, Head: r.Head, Rev: r.Rev, Active: true}
		if r.Active != nil {
			e.Active = *r.Active
		}
		if r.Status != nil {
			e.Status = CutStatus(*r.Status)
		}
		p.Repos = append(p.Repos, e)
	}
	return p, nil
}

// fetchSmall GETs a bounded body into memory. Non-200 responses become an
// *Error. It returns the final host:port.
func (c *Client) fetchSmall(ctx context.Context, op, rawURL, accept string, max int64) ([]byte, string, error) {
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, "", &Error{Op: op, Err: err, kind: ErrPermanent}
	}
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", c.opts.UserAgent)
	// The host's try, for the breaker (a redirect's target is not asked
	// of it: these calls are not redirected but by a misconfiguration).
	st := new(getRepoState)
	defer c.releaseSlot(st)
	if err := c.tryHost(st, canonicalHostPort(req.URL)); err != nil {
		host := CanonicalHost(req.URL.Scheme, req.URL.Host)
		return nil, host, &Error{Op: op, Host: host, Err: err, kind: ErrHostDown}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, hostOfURLError(err, req.URL), c.triedErr(ctx, st, c.transportError(ctx, reqCtx, op, hostOfURLError(err, req.URL), err), urlOfError(err, req.URL))
	}
	c.triedHost(st, canonicalHostPort(resp.Request.URL), tryAnswered)
	defer resp.Body.Close()
	host := CanonicalHost(resp.Request.URL.Scheme, resp.Request.URL.Host)
	c.pace.observe(canonicalHostPort(resp.Request.URL), resp.StatusCode, resp.Header)
	w := startIdleWatch(c.opts.IdleBodyTimeout, cancel)
	defer w.stop()
	body, stopRate := c.rated(&watchedReader{r: resp.Body, w: w}, cancel)
	defer stopRate()
	if resp.StatusCode != http.StatusOK {
		return nil, host, c.statusError(ctx, reqCtx, op, host, resp, body)
	}
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(body, max+1))
	if err != nil {
		return nil, host, c.transportError(ctx, reqCtx, op, host, err)
	}
	if n > max {
		return nil, host, &Error{Op: op, Host: host, StatusCode: resp.StatusCode, Err: fmt.Errorf("%w: more than %d bytes", ErrTooLarge, max), kind: ErrTooLarge}
	}
	return buf.Bytes(), host, nil
}

// statusError reads a bounded XRPC error body (body: resp's, under the
// request's idle and throughput watches) and builds the *Error for a
// non-200 response. A body cut under the minimum throughput is ErrSlowBody,
// whatever the status.
func (c *Client) statusError(ctx, reqCtx context.Context, op, host string, resp *http.Response, body io.Reader) error {
	now := time.Now()
	e := &Error{
		Op:         op,
		Host:       host,
		StatusCode: resp.StatusCode,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), now),
		Reset:      parseReset(resp.Header.Get("Ratelimit-Reset")),
	}
	msg, rerr := io.ReadAll(io.LimitReader(body, maxErrorBody))
	if rerr == nil || len(msg) > 0 {
		var xe struct {
			Error   any `json:"error"`
			Message any `json:"message"`
		}
		if json.Unmarshal(msg, &xe) == nil {
			e.Name = boundedString(xe.Error, 256)
			e.Message = boundedString(xe.Message, 1024)
		}
	}
	if cerr := callerDone(ctx); cerr != nil {
		// The caller gave up while we were reading the error body.
		e.Err = cerr
		e.kind = cerr
		return e
	}
	if rerr != nil && errors.Is(context.Cause(reqCtx), ErrSlowBody) {
		e.Err, e.kind = c.slowBody(op, host), ErrSlowBody
		return e
	}
	e.kind = statusKind(resp.StatusCode, e.Name, e.Message)
	return e
}

func boundedString(v any, max int) string {
	s, ok := v.(string)
	if !ok {
		return ""
	}
	if len(s) > max {
		s = s[:max]
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// transportError turns a failure without a usable response into an *Error:
// the caller's ctx ending wins (ClassCanceled), then the idle watch, then the
// network classification.
func (c *Client) transportError(ctx, reqCtx context.Context, op, host string, err error) error {
	var ue *Error
	if errors.As(err, &ue) && ue.Op == op {
		return err
	}
	e := &Error{Op: op, Host: host, Err: err}
	switch cerr := callerDone(ctx); {
	case cerr != nil:
		e.kind = cerr
		e.Err = fmt.Errorf("%w: %v", cerr, err)
	case errors.Is(context.Cause(reqCtx), ErrIdleTimeout):
		e.kind = ErrIdleTimeout
		e.Err = fmt.Errorf("%w: no byte for %s", ErrIdleTimeout, c.opts.IdleBodyTimeout)
	case errors.Is(context.Cause(reqCtx), ErrSlowBody):
		e.kind = ErrSlowBody
		e.Err = c.slowBody(op, host)
	default:
		e.kind = kindOf(err)
		if e.kind == context.Canceled || e.kind == context.DeadlineExceeded {
			// Our own derived context ended without the caller's ending:
			// never report that as the caller's cancellation.
			e.kind = ErrTransient
		}
	}
	return e
}

// slowBody counts and logs a body cut under the minimum throughput and
// returns the cause to report.
func (c *Client) slowBody(op, host string) error {
	c.trips.trip(slog.LevelInfo, limitMinBodyRate, "upstream: a body under the minimum throughput; cut",
		"op", op, "host", host, "min_bytes", c.opts.MinBodyBytes, "window", c.opts.BodyWindow)
	return fmt.Errorf("%w: under %d bytes in %s", ErrSlowBody, c.opts.MinBodyBytes, c.opts.BodyWindow)
}

// hostOfURLError returns the host of the URL a *url.Error names (the
// redirect target for redirect failures), else the request's host.
func hostOfURLError(err error, fallback *url.URL) string {
	if u := urlOfError(err, fallback); u != nil {
		return CanonicalHost(u.Scheme, u.Host)
	}
	return ""
}

// urlOfError returns the URL a *url.Error names (the redirect target for
// redirect failures), else fallback (the request's).
func urlOfError(err error, fallback *url.URL) *url.URL {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
			return u
		}
	}
	return fallback
}

// tryHost asks the breaker whether st's request may go to host (a
// canonicalHostPort key): an error matching ErrHostDown when the host is
// in its cool-off. The try's outcome goes to triedHost (or, when the
// request ends otherwise, releaseSlot).
func (c *Client) tryHost(st *getRepoState, host string) error {
	probe, err := c.down.allow(host)
	if err != nil {
		return err
	}
	st.tried, st.probe = host, probe
	return nil
}

// triedHost records how a request of st to host (a canonicalHostPort key,
// the last one the request reached) ended.
func (c *Client) triedHost(st *getRepoState, host string, o tryOutcome) {
	var probe uint64
	if host == st.tried {
		probe = st.probe
		st.tried, st.probe = "", 0
	}
	c.down.done(host, probe, o)
}

// triedErr records the outcome of st's request that failed with e (an
// *Error, built by transportError) at u, and returns e.
func (c *Client) triedErr(ctx context.Context, st *getRepoState, e error, u *url.URL) error {
	if u != nil {
		c.triedHost(st, canonicalHostPort(u), outcomeOf(ctx, e))
	}
	return e
}

// idleWatch cancels a request when its body makes no progress for idle.
// Progress is a timestamp, so reads cost one clock read, not a timer reset.
// The timestamp is the monotonic time since the watch began (time.Since
// of base), not wall nanoseconds: a step of the wall clock (NTP, a
// suspended VM) must neither cut every download in flight nor keep a
// stalled one.
type idleWatch struct {
	idle    time.Duration
	base    time.Time
	last    atomic.Int64 // time.Since(base) at the last progress
	stopped atomic.Bool
	cancel  context.CancelCauseFunc
	timer   *time.Timer
}

func startIdleWatch(idle time.Duration, cancel context.CancelCauseFunc) *idleWatch {
	w := &idleWatch{idle: idle, base: time.Now(), cancel: cancel}
	w.touch()
	w.timer = time.AfterFunc(idle, w.fire)
	return w
}

func (w *idleWatch) touch() { w.last.Store(int64(time.Since(w.base))) }

func (w *idleWatch) fire() {
	if w.stopped.Load() {
		return
	}
	since := time.Since(w.base) - time.Duration(w.last.Load())
	if since >= w.idle {
		w.cancel(ErrIdleTimeout)
		return
	}
	w.timer.Reset(w.idle - since)
}

func (w *idleWatch) stop() {
	w.stopped.Store(true)
	w.timer.Stop()
}

// watchedReader reports read progress to an idleWatch.
type watchedReader struct {
	r io.Reader
	w *idleWatch
}

func (r *watchedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.w.touch()
	}
	return n, err
}
