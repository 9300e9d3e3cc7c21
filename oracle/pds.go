package oracle

// pds.go owns the PDS host listeners: getRepo (prepared CAR bytes, atproto
// error names, CAR-shaped faults), listRepos for the host's accounts, and the
// per-DID / per-host request counters.

import (
	"errors"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/backstream/backstream/oracle/world"
)

// carContentType is the getRepo response type.
const carContentType = "application/vnd.ipld.car"

// pdsHost is one simulated PDS.
type pdsHost struct {
	*server
	idx      int
	n        *Network
	requests atomic.Int64 // getRepo requests received
	// active and peak are the getRepo requests being answered now and the
	// most ever answered at once: a client's concurrent downloads from the
	// host as the host sees them.
	active, peak atomic.Int64
}

// guard wraps the host's handlers: it meters getRepo concurrency and applies
// DownHost (503) and SlowHost (a delay, cut short when the client leaves).
func (h *pdsHost) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		download := strings.HasSuffix(r.URL.Path, ".getRepo")
		if download {
			now := h.active.Add(1)
			defer h.active.Add(-1)
			for p := h.peak.Load(); now > p && !h.peak.CompareAndSwap(p, now); p = h.peak.Load() {
			}
		}
		delay, down := h.n.faults.hostState(h.idx, download)
		if down {
			writeXRPCError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "host down (injected)")
			return
		}
		if delay > 0 {
			t := time.NewTimer(delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// PeakConcurrency is the most getRepo requests PDS host i ever answered at
// once.
func (n *Network) PeakConcurrency(i int) int64 { return n.hosts[i].peak.Load() }

// setRateHeaders announces host's window limit on a served answer, so a
// client can pace itself before it meets a 429.
func setRateHeaders(w http.ResponseWriter, rl rateLimit, remaining int) {
	hd := w.Header()
	hd.Set("ratelimit-limit", strconv.Itoa(rl.limit))
	hd.Set("ratelimit-remaining", strconv.Itoa(remaining))
	hd.Set("ratelimit-reset", strconv.FormatInt((rl.resetAt.UnixNano()+int64(time.Second)-1)/int64(time.Second), 10))
	hd.Set("ratelimit-policy", strconv.Itoa(rl.limit)+";w="+strconv.Itoa(int(max(rl.window/time.Second, 1))))
}

// hostname is host:port, the form listHosts reports.
func (h *pdsHost) hostname() string {
	u, err := url.Parse(h.url)
	if err != nil {
		return h.url
	}
	return u.Host
}

func (h *pdsHost) mux() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /xrpc/com.atproto.sync.getRepo", h.handleGetRepo)
	mux.HandleFunc("GET /xrpc/com.atproto.sync.listRepos", h.handleListRepos)
	mux.HandleFunc("GET /xrpc/_health", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"version": "backstream-oracle-pds"})
	})
	mux.HandleFunc("/xrpc/{method}", func(w http.ResponseWriter, r *http.Request) {
		writeXRPCError(w, http.StatusNotImplemented, "MethodNotImplemented", "method not implemented: "+r.PathValue("method"))
	})
	return h.guard(mux)
}

func (h *pdsHost) handleListRepos(w http.ResponseWriter, r *http.Request) {
	limit := listReposDefaultLimit
	if l, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && l >= 1 && l <= listReposMaxLimit {
		limit = l
	}
	if accts, next, ok := h.n.faults.endlessPage(h.idx, r.URL.Query().Get("cursor"), limit); ok {
		writeJSON(w, http.StatusOK, listReposOutput(accts, next)) // EndlessListing
		return
	}
	p, ok := parsePage(w, r)
	if !ok {
		return
	}
	left := h.n.faults.staleRevs(h.idx) // FaultMigrating: accounts that left this host
	all := h.n.w.Accounts()
	fab := h.n.faults.fabricatedOn(h.idx) // FabricatedListing: DIDs this host claims
	fabricated := make(map[string]bool, len(fab))
	if len(fab) > 0 {
		all = append(slices.Clone(all), fab...)
		slices.SortFunc(all, func(a, b world.Account) int { return strings.Compare(a.DID, b.DID) })
		for _, a := range fab {
			fabricated[a.DID] = true
		}
	}
	accts, more := page(all, p, func(a world.Account) bool {
		if a.Host == -1 && fabricated[a.DID] {
			return true // FabricatedListing, ClaimAccount: the claim, not the world's account
		}
		_, stale := left[a.DID]
		return stale || (a.Host == h.idx && a.Status != world.StatusDeleted)
	})
	for i := range accts {
		if rev, stale := left[accts[i].DID]; stale {
			accts[i].Rev = rev
		}
	}
	var cursor string
	if more && len(accts) > 0 {
		cursor = encodeCursor(accts[len(accts)-1].DID, 0)
	}
	writeJSON(w, http.StatusOK, listReposOutput(accts, cursor))
}

// statusError maps an inactive account status to its getRepo error name.
func statusError(status string) (name, msg string) {
	switch status {
	case world.StatusDeactivated:
		return "RepoDeactivated", "repo has been deactivated"
	case world.StatusTakendown:
		return "RepoTakendown", "repo has been taken down"
	case world.StatusSuspended:
		return "RepoSuspended", "repo has been suspended"
	default: // deleted, or inactive with no stated reason
		return "RepoNotFound", "repo not found"
	}
}

// errorName is the XRPC error name a scripted status carries.
func errorName(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "InvalidRequest"
	case http.StatusNotFound:
		return "NotFound"
	case http.StatusTooManyRequests:
		return "RateLimitExceeded"
	case http.StatusBadGateway:
		return "BadGateway"
	case http.StatusServiceUnavailable:
		return "ServiceUnavailable"
	case http.StatusGatewayTimeout:
		return "GatewayTimeout"
	default:
		return "InternalServerError"
	}
}

// writeRateLimited answers 429 with ratelimit-* and Retry-After headers.
func writeRateLimited(w http.ResponseWriter, limit int, window time.Duration, resetAt time.Time) {
	hd := w.Header()
	resetUnix := resetAt.Unix()
	if resetAt.Nanosecond() > 0 {
		resetUnix++
	}
	retry := resetUnix - time.Now().Unix()
	if retry < 1 {
		retry = 1
	}
	hd.Set("ratelimit-limit", strconv.Itoa(limit))
	hd.Set("ratelimit-remaining", "0")
	hd.Set("ratelimit-reset", strconv.FormatInt(resetUnix, 10))
	hd.Set("ratelimit-policy", strconv.Itoa(limit)+";w="+strconv.Itoa(int(max(window/time.Second, 1))))
	hd.Set("Retry-After", strconv.FormatInt(retry, 10))
	writeXRPCError(w, http.StatusTooManyRequests, "RateLimitExceeded", "Rate Limit Exceeded")
}

func (h *pdsHost) handleGetRepo(w http.ResponseWriter, r *http.Request) {
	n := h.n
	did, ok := parseDIDParam(w, r)
	if !ok {
		return
	}
	h.requests.Add(1)
	n.repos.hit(did, h.idx)
	if rl, ok := n.faults.hostLimited(h.idx); ok {
		writeRateLimited(w, rl.limit, rl.window, rl.resetAt)
		return
	}
	if rl, left, ok := n.faults.announce(h.idx); ok {
		setRateHeaders(w, rl, left)
	}
	if c, stale := n.faults.staleOn(did, h.idx); stale {
		writeCAR(w, c.car) // the copy the account left behind
		return
	}
	acct, known := n.w.Account(did)
	// A misattributed request (FaultMisattributed) reaches a host that is
	// not the account's, which serves the account's repo anyway.
	known = known && (acct.Host == h.idx || n.faults.misattributedHost(did))
	st, faulted := n.faults.nextGetRepo(did, known && acct.Active)
	if faulted && st.kind == FaultGetRepoStatus {
		if st.status == http.StatusTooManyRequests {
			writeRateLimited(w, 1, time.Second, time.Now().Add(time.Second))
			return
		}
		writeXRPCError(w, st.status, errorName(st.status), "injected fault")
		return
	}
	if !known {
		writeXRPCError(w, http.StatusBadRequest, "RepoNotFound", "repo not found: "+did)
		return
	}
	if !acct.Active {
		name, msg := statusError(acct.Status)
		writeXRPCError(w, http.StatusBadRequest, name, msg)
		return
	}
	car, acct, err := n.w.RepoCAR(did)
	if errors.Is(err, world.ErrAccountInactive) || errors.Is(err, world.ErrAccountDeleted) {
		// The status changed since the lookup above.
		acct, _ = n.w.Account(did)
		name, msg := statusError(acct.Status)
		writeXRPCError(w, http.StatusBadRequest, name, msg)
		return
	}
	if errors.Is(err, world.ErrUnknownDID) {
		writeXRPCError(w, http.StatusBadRequest, "RepoNotFound", "repo not found: "+did)
		return
	}
	if err != nil {
		writeXRPCError(w, http.StatusInternalServerError, "InternalServerError", err.Error())
		return
	}
	if !acct.Active {
		name, msg := statusError(acct.Status)
		writeXRPCError(w, http.StatusBadRequest, name, msg)
		return
	}
	if faulted {
		n.serveFaultedCAR(w, r, did, car, acct, st)
		return
	}
	if writeCAR(w, car) {
		n.repos.completed(did)
	}
}

// writeCAR writes a whole CAR body; true when every byte was written.
func writeCAR(w http.ResponseWriter, car []byte) bool {
	w.Header().Set("Content-Type", carContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(car)))
	w.WriteHeader(http.StatusOK)
	_, err := w.Write(car)
	return err == nil
}

// repoCounts are the per-DID getRepo counters.
type repoCounts struct {
	mu     sync.Mutex
	m      map[string]*RepoCount
	byHost map[string]map[int]int // DID → PDS host → getRepo requests
}

// RepoCount is what the network served for one DID.
type RepoCount struct {
	RelayRequests int // getRepo requests the relay redirected
	Requests      int // getRepo requests that reached the PDS host
	Complete      int // complete, unfaulted CARs written in full
}

func newRepoCounts() *repoCounts {
	return &repoCounts{m: make(map[string]*RepoCount), byHost: make(map[string]map[int]int)}
}

func (c *repoCounts) entry(did string) *RepoCount {
	e := c.m[did]
	if e == nil {
		e = new(RepoCount)
		c.m[did] = e
	}
	return e
}

func (c *repoCounts) relayHit(did string) {
	c.mu.Lock()
	c.entry(did).RelayRequests++
	c.mu.Unlock()
}

func (c *repoCounts) hit(did string, host int) {
	c.mu.Lock()
	c.entry(did).Requests++
	if c.byHost[did] == nil {
		c.byHost[did] = make(map[int]int)
	}
	c.byHost[did][host]++
	c.mu.Unlock()
}

// hosts is did's getRepo requests by PDS host.
func (c *repoCounts) hosts(did string) map[int]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byHost[did])
}

func (c *repoCounts) completed(did string) {
	c.mu.Lock()
	c.entry(did).Complete++
	c.mu.Unlock()
}

func (c *repoCounts) get(did string) RepoCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[did]; e != nil {
		return *e
	}
	return RepoCount{}
}

func (c *repoCounts) all() map[string]RepoCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]RepoCount, len(c.m))
	for k, v := range c.m {
		out[k] = *v
	}
	return out
}

// resetConn closes a hijacked connection with a TCP RST.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
