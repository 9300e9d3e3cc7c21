package upstream

// hosts.go owns the fleet side of the client: the relay's listHosts roster,
// listRepos and getRepo asked of a PDS host directly (the relay's own index
// and redirect bypassed), and the per-host pacing that keeps a host's
// announced ratelimit-* budget from being spent before it resets.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/backstream/backstream/internal/backoff"
)

// maxListHostsBody bounds a listHosts page (1000 hosts are ~150 KiB).
const maxListHostsBody = 8 << 20

// maxHostname bounds a roster hostname (DNS names are at most 253 bytes,
// plus a port).
const maxHostname = 260

// HostEntry is one validated listHosts entry.
type HostEntry struct {
	Host     string // host[:port], canonical (CanonicalHost)
	Status   string // "active", "idle", "offline", "throttled", "banned", …; "" when absent
	Accounts int64
	Seq      int64
}

// HostsPage is one listHosts page; Cursor "" means the roster is finished.
// Dropped counts entries refused by validation.
type HostsPage struct {
	Hosts   []HostEntry
	Cursor  string
	Dropped int
}

type listHostsWire struct {
	Cursor *string           `json:"cursor"`
	Hosts  []json.RawMessage `json:"hosts"`
}

type hostWire struct {
	Hostname     string  `json:"hostname"`
	Status       *string `json:"status"`
	AccountCount *int64  `json:"accountCount"`
	Seq          *int64  `json:"seq"`
}

// ListHosts fetches one page of the relay's com.atproto.sync.listHosts.
// Entries whose hostname is not a bare host[:port] are dropped and
// counted. Errors: *Error (Classify); a relay without the method answers
// a 4xx (ClassPermanent).
func (c *Client) ListHosts(ctx context.Context, cursor string, limit int) (HostsPage, error) {
	const op = "listHosts"
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	body, host, err := c.fetchSmall(ctx, op, c.xrpcURL("com.atproto.sync.listHosts", q), "application/json", maxListHostsBody)
	if err != nil {
		return HostsPage{}, err
	}
	var w listHostsWire
	if err := json.Unmarshal(body, &w); err != nil {
		return HostsPage{}, &Error{Op: op, Host: host, StatusCode: http.StatusOK, Err: fmt.Errorf("%w: listHosts: %v", ErrMalformedResponse, err), kind: ErrMalformedResponse}
	}
	var p HostsPage
	if w.Cursor != nil && len(*w.Cursor) <= maxCursorLen {
		p.Cursor = *w.Cursor
	}
	for _, raw := range w.Hosts {
		var h hostWire
		if json.Unmarshal(raw, &h) != nil {
			p.Dropped++
			continue
		}
		name, ok := hostName(c.relay.Scheme, h.Hostname)
		if !ok {
			p.Dropped++
			continue
		}
		e := HostEntry{Host: name}
		if h.Status != nil {
			e.Status = *h.Status
		}
		if h.AccountCount != nil {
			e.Accounts = *h.AccountCount
		}
		if h.Seq != nil {
			e.Seq = *h.Seq
		}
		p.Hosts = append(p.Hosts, e)
	}
	return p, nil
}

// hostName validates a roster hostname: host[:port] with no scheme, path,
// user or query, in its canonical form (CanonicalHost) under scheme, the
// scheme it is reached with.
func hostName(scheme, s string) (string, bool) {
	if s == "" || len(s) > maxHostname || strings.ContainsAny(s, "/?#@ \\") {
		return "", false
	}
	u, err := url.Parse("https://" + s)
	if err != nil || u.Host != s || u.Hostname() == "" {
		return "", false
	}
	return CanonicalHost(scheme, s), true
}

// CanonicalHost is the one form in which backstream names and compares a
// host: host, a URL's host[:port] (url.URL.Host) reached with scheme,
// lower-cased (host names are case-insensitive), the name's trailing dot
// dropped (a fully qualified name names the same host), and the port
// dropped when it is scheme's default (80 for http and ws, 443 for https
// and wss; an empty or zero-padded port read as the number it is). An IPv6
// address keeps its brackets. So a DID document's endpoint written
// https://PDS.example.com.:443 and a download from https://pds.example.com
// name the same host, pds.example.com; https://pds.example.com:8443 stays
// another. Download.FinalHost and the hosts of Error, a roster's hostnames
// (ListHosts) and ident's PDS host (ident.Info.PDSHost) are in this form.
func CanonicalHost(scheme, host string) string {
	u := url.URL{Host: host}
	name, port := strings.TrimSuffix(strings.ToLower(u.Hostname()), "."), u.Port()
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		port = strconv.FormatUint(n, 10)
	}
	if port == defaultPort(scheme) {
		port = ""
	}
	if strings.Contains(name, ":") {
		name = "[" + name + "]"
	}
	if port == "" {
		return name
	}
	return name + ":" + port
}

// defaultPort is the port a URL of scheme reaches when it names none; ""
// for a scheme of no known default.
func defaultPort(scheme string) string {
	switch strings.ToLower(scheme) {
	case "http", "ws":
		return "80"
	case "https", "wss":
		return "443"
	}
	return ""
}

// hostURL is the base URL of a PDS host: the relay's scheme (http only
// when the relay itself is plain http, as on a devnet).
func (c *Client) hostURL(host string) (*url.URL, error) {
	name, ok := hostName(c.relay.Scheme, host)
	if !ok {
		return nil, &Error{Op: "host", Host: host, Err: fmt.Errorf("invalid host name %q", host), kind: ErrPermanent}
	}
	return &url.URL{Scheme: c.relay.Scheme, Host: name}, nil
}

// HostListRepos pages listRepos on PDS host directly, paced to its
// announced rate limit. Same contract as ListRepos.
func (c *Client) HostListRepos(ctx context.Context, host, cursor string, limit int) (Page, error) {
	base, err := c.hostURL(host)
	if err != nil {
		return Page{}, err
	}
	if err := c.pace.acquire(ctx, canonicalHostPort(base), c.trips); err != nil {
		return Page{}, &Error{Op: "listRepos", Host: host, Err: err, kind: err}
	}
	defer c.pace.release(canonicalHostPort(base))
	return c.listRepos(ctx, base, cursor, limit)
}

// HostPaceWait is how long a request of PDS host would wait now for the
// reset of the budget the host announced spent (ratelimit-remaining), 0
// when it would not wait. A caller holding a resource others share (a
// fleet listing's request slot) waits elsewhere instead: the request
// itself would wait holding it.
func (c *Client) HostPaceWait(host string) time.Duration {
	base, err := c.hostURL(host)
	if err != nil {
		return 0
	}
	name := canonicalHostPort(base)
	wait := c.pace.wait(name)
	if wait > 0 {
		c.trips.trip(slog.LevelInfo, limitRatePace, paceLine, "host", name, "wait", wait)
	}
	return wait
}

// HostGetRepo downloads did from PDS host directly (no relay redirect),
// within the host's download slots and its announced rate limit: while
// the host's budget is spent (an answer's ratelimit-remaining 0, or a
// 429's Retry-After, until the reset) it fails at once, ClassRateLimited
// with RetryAfter the wait, the host not asked. Same contract as GetRepo
// otherwise; Download.FinalHost is host (or where it redirected).
func (c *Client) HostGetRepo(ctx context.Context, host, did string) (*Download, error) {
	const op = "getRepo"
	base, err := c.hostURL(host)
	var d *Download
	if err == nil {
		d, err = c.getRepo(ctx, base, did)
	}
	c.metrics.request(op, Classify(err))
	if err == nil {
		c.metrics.downloaded(d.Size)
	}
	return d, err
}

// direct prepares a getRepo asked of host itself: it fails at once when
// the host is found not answering (ErrHostDown, breaker.go), takes the
// host's download slot (ErrHostBusy at the cap, as for a redirect) and
// counts the request against the host's announced budget. While that
// budget is spent it fails at once too, rate limited (ErrRateLimited,
// RetryAfter the wait for the reset), the host not asked: waiting for
// the reset here would wait inside the caller's deadline (a backfill
// attempt's 5 minutes, shorter than the 330 s a reset may be ahead), and
// hold the caller's worker, for a budget announced spent after the caller
// checked it (HostPaceWait). The caller's releaseSlot frees the slot; the
// pace is released when the answer's headers are observed.
func (c *Client) direct(op string, st *getRepoState, host *url.URL) error {
	name := canonicalHostPort(host)
	if err := c.tryHost(st, name); err != nil {
		return &Error{Op: op, Host: CanonicalHost(host.Scheme, host.Host), Err: err, kind: ErrHostDown}
	}
	if err := c.takeSlot(st, name); err != nil {
		return &Error{Op: op, Host: CanonicalHost(host.Scheme, host.Host), Err: err, kind: ErrHostBusy}
	}
	if wait := c.pace.tryAcquire(name); wait > 0 {
		c.trips.trip(slog.LevelInfo, limitRatePace, paceLine, "host", name, "wait", wait)
		return &Error{Op: op, Host: CanonicalHost(host.Scheme, host.Host), RetryAfter: wait,
			Err: fmt.Errorf("not asked: the host's announced rate limit is spent, reset in %v", wait.Round(time.Second)), kind: ErrRateLimited}
	}
	st.paced = name
	return nil
}

// pacer keeps, per host, the request budget its last answer announced
// (ratelimit-remaining until ratelimit-reset, or none left until a 429's
// server-directed wait has passed) and the requests started since; a
// request that would overspend it waits for the reset instead of meeting
// a 429 (a listRepos), or fails at once without asking (a getRepo asked
// directly: direct). A host's pace lives while it has a request in flight or
// a reset ahead (at most RetryAfterCeiling): an idle one whose reset has
// passed is forgotten, by its last release or, when its reset was still
// ahead then, by the sweep acquire runs whenever the map has doubled.
type pacer struct {
	mu    sync.Mutex
	hosts map[string]*pace
	now   func() time.Time
	sweep int // the size at which acquire next sweeps
}

type pace struct {
	inflight  int
	remaining int
	reset     time.Time
	known     bool
}

func newPacer() *pacer { return &pacer{hosts: map[string]*pace{}, now: time.Now} }

// acquire waits until host's announced budget has room for one more
// request, then counts it in flight.
func (p *pacer) acquire(ctx context.Context, host string, t *trips) error {
	for {
		wait := p.tryAcquire(host)
		if wait == 0 {
			return nil
		}
		t.trip(slog.LevelInfo, limitRatePace, paceLine, "host", host, "wait", wait)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// tryAcquire counts one more request of host in flight and returns 0 when
// its announced budget has room; otherwise it counts nothing and returns
// how long the request would wait for the reset.
func (p *pacer) tryAcquire(host string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	h := p.hosts[host]
	if h == nil {
		p.sweepLocked(now)
		h = &pace{}
		p.hosts[host] = h
	}
	wait := h.wait(now)
	if wait == 0 {
		h.inflight++
	}
	return wait
}

// wait is how long acquire would wait for host's reset now, 0 when it
// would not.
func (p *pacer) wait(host string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[host]
	if h == nil {
		return 0
	}
	return h.wait(p.now())
}

// wait is how long one more request must wait at now for the reset of a
// budget announced spent, 0 when the budget has room (or none is known,
// or its reset has passed).
func (h *pace) wait(now time.Time) time.Duration {
	if !h.known || !now.Before(h.reset) || h.remaining-h.inflight > 0 {
		return 0
	}
	return h.reset.Sub(now)
}

// paceLine says a host's requests wait for its announced reset.
const paceLine = "upstream: a host's announced rate limit is spent; its requests wait for the reset instead of meeting a 429"

// minPaceSweep is the smallest map the pacer sweeps.
const minPaceSweep = 64

// sweepLocked forgets the idle paces whose reset has passed, once the map
// has reached its sweep size; the next sweep waits for twice what is left,
// so the cost stays constant per host added.
func (p *pacer) sweepLocked(now time.Time) {
	if len(p.hosts) < max(p.sweep, minPaceSweep) {
		return
	}
	for name, h := range p.hosts {
		if h.inflight <= 0 && (!h.known || !now.Before(h.reset)) {
			delete(p.hosts, name)
		}
	}
	p.sweep = 2 * len(p.hosts)
}

// observe records the budget an answer of host (its HTTP status and
// headers) announced. A 429 with a server-directed wait (Retry-After, else
// ratelimit-reset: RetryAfter's rule) is the budget spent until that wait
// has passed, whatever ratelimit-remaining says or whether it is there: a
// host answering every request 429 with only a Retry-After would
// otherwise be asked again at once by every caller that checks its pace
// (a fleet bootstrap's dispatcher). A reset further than
// RetryAfterCeiling is taken at the ceiling, as a Retry-After is: a host
// announcing a reset years ahead would otherwise hold every request of it
// (a fleet listing's for good).
func (p *pacer) observe(host string, status int, hd http.Header) {
	now := p.now()
	rem, err := strconv.Atoi(strings.TrimSpace(hd.Get("Ratelimit-Remaining")))
	reset := parseReset(hd.Get("Ratelimit-Reset"))
	if status == http.StatusTooManyRequests {
		if wait := serverWait(parseRetryAfter(hd.Get("Retry-After"), now), reset, now); wait > 0 {
			rem, err, reset = 0, nil, now.Add(wait)
		}
	}
	if err != nil || rem < 0 || reset.IsZero() {
		return
	}
	if ceiling := now.Add(RetryAfterCeiling); reset.After(ceiling) {
		reset = ceiling
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.hosts[host]; h != nil {
		h.remaining, h.reset, h.known = rem, reset, true
	}
}

// release ends a request started by acquire.
func (p *pacer) release(host string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[host]
	if h == nil {
		return
	}
	if h.inflight--; h.inflight <= 0 && (!h.known || !p.now().Before(h.reset)) {
		delete(p.hosts, host)
	}
}
