package oracle

// network.go owns the Network: startup order (world, preload, listeners,
// traffic), emission, ground-truth accessors and shutdown.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/oracle/world"
)

// Emitted is one event as it was appended to the firehose, with its seq set
// (also in the body's Seq field). Invalid is set on a one-off hostile
// #commit (HostileCommits) that the world did not apply.
type Emitted struct {
	Seq int64
	world.Event
}

// Status is the network's debug summary, also served at GET /_devnet/status.
type Status struct {
	Seq      int64 `json:"seq"`      // last firehose seq
	Events   int64 `json:"events"`   // events emitted (preload, traffic and Emit)
	Done     bool  `json:"done"`     // the traffic generator has finished (or never runs)
	Accounts int   `json:"accounts"` // accounts in the world
	// LiveRecords: records of accounts neither deleted nor taken down
	// (world.LiveRecords), at the time of the report.
	LiveRecords int64 `json:"live_records"`
	// DIDDocRequests and ExportRequests: GET /<did> requests for a did:plc
	// and GET /export pages answered so far.
	DIDDocRequests int64 `json:"did_doc_requests"`
	ExportRequests int64 `json:"export_requests"`
}

// netStats are the network's counters.
type netStats struct {
	emitted        atomic.Int64
	connections    atomic.Int64
	framesSent     atomic.Int64
	futureCursor   atomic.Int64
	outdatedCursor atomic.Int64
	tooSlow        atomic.Int64
	docRequests    atomic.Int64 // GET /<did> of a did:plc
	exportRequests atomic.Int64 // GET /export
}

// Network is a running simulated atproto network.
type Network struct {
	cfg     Config
	w       *world.World
	faults  *Faults
	log     *eventLog
	stats   netStats
	repos   *repoCounts
	hostile hostileCache
	plc     *plcLog // the PLC directory's operation log (GET /export)

	relay    *server
	hosts    []*pdsHost
	relayURL string

	emitMu      sync.Mutex // serializes world mutation + history append
	gapRand     *rand.Rand // SeqGaps draws; guarded by emitMu
	hostileRand *rand.Rand // HostileCommits draws; guarded by emitMu

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // traffic goroutine
	done   atomic.Bool
	trErr  atomic.Pointer[error]

	testSendBuffer atomic.Int64 // tests only: server socket send buffer for new subscribers

	mu       sync.Mutex
	closed   bool
	handlers sync.WaitGroup               // in-flight HTTP handlers
	conns    map[*websocket.Conn]struct{} // live subscribeRepos connections
}

// server is one HTTP listener.
type server struct {
	ln  net.Listener
	srv *http.Server
	url string // http://host:port
}

// Start builds the world, generates the preload, opens the relay and PDS
// listeners, applies the fault profile and starts traffic. ctx bounds the
// traffic goroutine as well as Close does.
func Start(ctx context.Context, cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	w, err := world.Build(world.Config{
		Seed: cfg.Seed, Accounts: cfg.Accounts, RecordsMean: cfg.RecordsMean, Hosts: cfg.Hosts, WebDIDs: cfg.WebDIDs,
	})
	if err != nil {
		return nil, fmt.Errorf("oracle: start: build world: %w", err)
	}
	n := &Network{
		cfg:         cfg,
		w:           w,
		log:         newEventLog(cfg.Retention),
		repos:       newRepoCounts(),
		plc:         newPLCLog(),
		gapRand:     rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5e9)),
		hostileRand: rand.New(rand.NewPCG(uint64(cfg.Seed), 0x4057)),
		conns:       make(map[*websocket.Conn]struct{}),
	}
	n.faults = newFaults(n)
	n.ctx, n.cancel = context.WithCancel(ctx)

	var traffic *world.Traffic
	if cfg.Traffic != TrafficNone {
		traffic = w.NewTraffic(world.TrafficMode(cfg.Traffic), cfg.Seed)
	}
	for i := 0; i < cfg.PreloadEvents; i++ {
		if err := ctx.Err(); err != nil {
			n.cancel()
			return nil, fmt.Errorf("oracle: start: preload: %w", err)
		}
		if _, err := n.Emit(func(*world.World) (world.Event, error) { return traffic.Next() }); err != nil {
			n.cancel()
			return nil, fmt.Errorf("oracle: start: preload event %d: %w", i+1, err)
		}
	}

	n.faults.SlowHost(cfg.SlowHost, cfg.SlowHostDelay)
	if err := n.faults.ApplyProfile(cfg.Faults); err != nil {
		n.cancel()
		return nil, err
	}
	if err := n.listen(); err != nil {
		n.Close()
		return nil, err
	}
	if traffic == nil {
		n.done.Store(true)
	} else {
		n.wg.Add(1)
		go n.runTraffic(traffic)
	}
	cfg.Logger.Info("oracle: network started", "relay", n.relayURL, "accounts", cfg.Accounts,
		"hosts", cfg.Hosts, "seed", cfg.Seed, "preload", cfg.PreloadEvents, "faults", cfg.Faults, "plan", n.faults.describe())
	return n, nil
}

// listen opens the relay listener and the PDS hosts. A PDS host listens on
// the relay's port at a loopback address of its own (127.0.0.2, 127.0.0.3,
// …): a client following a loopback relay may be redirected only to the
// relay's port, never to any other local port (backstream's own listener
// among them), and each host still has a host:port of its own. When the
// relay listens on every address (0.0.0.0:port), its listener already
// answers on those addresses and serves each host by the local address a
// request arrived on. When a host's address is taken on the relay's port
// and that port was drawn by the system (port 0), the relay draws another
// (up to portDraws times). A host address that still cannot be bound (a
// loopback interface carrying 127.0.0.1 only, or a port asked for) falls
// back to a port of its own on 127.0.0.1, which a client must be told of
// (LoopbackHosts; serve --devnet and every test's client are).
func (n *Network) listen() error {
	ln, hls, err := bindListeners(net.Listen, n.cfg.Listen, n.cfg.Hosts)
	if err != nil {
		return err
	}
	relayAddr, _ := netip.ParseAddrPort(ln.Addr().String())
	byAddr := map[netip.Addr]http.Handler{}
	for i, hl := range hls {
		h := &pdsHost{idx: i, n: n}
		at := netip.AddrPortFrom(hostAddr(i), relayAddr.Port())
		if hl == nil { // shared: the relay's listener answers on at
			byAddr[at.Addr()] = h.mux()
			h.server = &server{url: "http://" + at.String()}
			n.hosts = append(n.hosts, h)
			continue
		}
		if hl.Addr().String() != at.String() {
			n.cfg.Logger.Warn("oracle: a PDS host cannot listen on the relay's port at its own loopback address; it takes a port of its own",
				"host", i, "addr", at.String(), "port", hl.Addr().String())
		}
		h.server = n.serve(hl, h.mux())
		n.hosts = append(n.hosts, h)
	}
	n.relay = n.serve(ln, byLocalAddr(byAddr, n.relayMux()))
	n.relayURL = n.relay.url
	return nil
}

// portDraws bounds the relay ports drawn before a host falls back to a port
// of its own.
const portDraws = 8

// listenFunc is net.Listen's shape (tests stand in for it).
type listenFunc func(network, address string) (net.Listener, error)

// bindListeners binds the relay on addr and hosts PDS hosts (see listen),
// drawing another relay port while a host's address is taken on a drawn
// one.
func bindListeners(listen listenFunc, addr string, hosts int) (net.Listener, []net.Listener, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("oracle: listen relay %s: %w", addr, err)
	}
	for draw := 1; ; draw++ {
		ln, err := listen("tcp", addr)
		if err != nil {
			return nil, nil, fmt.Errorf("oracle: listen relay %s: %w", addr, err)
		}
		hls, taken, err := listenHosts(listen, ln, hosts)
		if err == nil && (!taken || port != "0" || draw == portDraws) {
			return ln, hls, nil
		}
		closeAll(ln, hls)
		if err != nil {
			return nil, nil, err
		}
	}
}

// listenHosts binds each PDS host's listener on the relay ln's port at the
// host's own address: nil for every host when ln listens on every address
// (its listener serves them), a port of its own on 127.0.0.1 for a host
// whose address is taken (taken is then true).
func listenHosts(listen listenFunc, ln net.Listener, hosts int) (hls []net.Listener, taken bool, err error) {
	relayAddr, _ := netip.ParseAddrPort(ln.Addr().String())
	hls = make([]net.Listener, hosts)
	if relayAddr.Addr().IsUnspecified() {
		return hls, false, nil
	}
	for i := range hls {
		at := netip.AddrPortFrom(hostAddr(i), relayAddr.Port())
		if hls[i], err = listen("tcp", at.String()); err == nil {
			continue
		}
		taken = true
		if hls[i], err = listen("tcp", "127.0.0.1:0"); err != nil {
			return hls, taken, fmt.Errorf("oracle: listen pds host %d: %w", i, err)
		}
	}
	return hls, taken, nil
}

// closeAll closes the relay's listener and the hosts' (nil ones skipped).
func closeAll(ln net.Listener, hls []net.Listener) {
	for _, hl := range hls {
		if hl != nil {
			_ = hl.Close()
		}
	}
	_ = ln.Close()
}

// hostAddr is PDS host i's loopback address: 127.0.0.2 onwards.
func hostAddr(i int) netip.Addr {
	v := uint32(127)<<24 | uint32(i+2)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// byLocalAddr serves a request that arrived on one of hosts' addresses with
// that host's handler, and any other with relay.
func byLocalAddr(hosts map[netip.Addr]http.Handler, relay http.Handler) http.Handler {
	if len(hosts) == 0 {
		return relay
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if ap, err := netip.ParseAddrPort(a.String()); err == nil {
				if h := hosts[ap.Addr().Unmap()]; h != nil {
					h.ServeHTTP(w, r)
					return
				}
			}
		}
		relay.ServeHTTP(w, r)
	})
}

// serve starts an HTTP server on ln; Close stops it.
func (n *Network) serve(ln net.Listener, h http.Handler) *server {
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	s := &server{
		ln:  ln,
		srv: &http.Server{Handler: n.track(h), ReadHeaderTimeout: 10 * time.Second},
		url: "http://" + net.JoinHostPort(host, port),
	}
	n.wg.Add(1)
	go func() { // owned: Close closes the server, which ends Serve
		defer n.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return s
}

// track counts in-flight handlers so Close can wait for them.
func (n *Network) track(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			writeXRPCError(w, http.StatusServiceUnavailable, "ServiceUnavailable", "network is closing")
			return
		}
		n.handlers.Add(1)
		n.mu.Unlock()
		defer n.handlers.Done()
		h.ServeHTTP(w, r)
	})
}

// runTraffic emits live events at cfg.Rate with token pacing until
// cfg.Events are emitted (0 = forever) or the network closes.
func (n *Network) runTraffic(tr *world.Traffic) {
	defer n.wg.Done()
	defer n.done.Store(true)
	rate := n.cfg.Rate
	limit := int64(n.cfg.Events)
	t0 := time.Now()
	var base, emitted int64 // tokens are rate*(now-t0) + base
	timer := time.NewTimer(0)
	defer timer.Stop()
	for limit == 0 || emitted < limit {
		due := int64(rate*time.Since(t0).Seconds()) + 1 + base
		if due-emitted > int64(rate)+1 { // more than a second behind: drop the backlog
			base -= due - emitted - 1
			due = emitted + 1
		}
		for emitted < due && (limit == 0 || emitted < limit) {
			if n.ctx.Err() != nil {
				return
			}
			if _, err := n.Emit(func(*world.World) (world.Event, error) { return tr.Next() }); err != nil {
				if !errors.Is(err, ErrClosed) {
					n.trErr.Store(&err)
					n.cfg.Logger.Error("oracle: traffic stopped", "err", err)
				}
				return
			}
			emitted++
		}
		next := t0.Add(time.Duration(float64(emitted-base) / rate * float64(time.Second)))
		timer.Reset(time.Until(next))
		select {
		case <-n.ctx.Done():
			return
		case <-timer.C:
		}
	}
}

// Emit applies one world mutation and appends its event to the firehose,
// atomically with respect to every other emission (traffic included), so the
// firehose order is the mutation order. When HostileCommits is armed, a
// #commit may be followed (under the same lock) by a one-off invalid #commit
// for the same account; Emit returns the mutation's event. If that hostile
// commit cannot be built, the mutation's event is already emitted and Emit
// returns it together with the error.
func (n *Network) Emit(mutate func(w *world.World) (world.Event, error)) (Emitted, error) {
	n.emitMu.Lock()
	defer n.emitMu.Unlock()
	if n.ctx.Err() != nil {
		return Emitted{}, ErrClosed
	}
	ev, err := mutate(n.w)
	if err != nil {
		return Emitted{}, fmt.Errorf("oracle: emit: %w", err)
	}
	out, err := n.appendLocked(ev)
	if err != nil {
		return Emitted{}, err
	}
	if err := n.maybeHostileCommit(ev); err != nil {
		return out, err
	}
	if err := n.maybeForgedCommit(ev); err != nil {
		return out, err
	}
	if err := n.maybeBadHandle(ev); err != nil {
		return out, err
	}
	return out, nil
}

// appendLocked appends ev to the history (skipping a seq when SeqGaps
// fires), as the relay sends it (HideDeletes, LegacyCommits). The caller
// holds emitMu.
func (n *Network) appendLocked(ev world.Event) (Emitted, error) {
	var skip int64
	if rate := n.faults.seqGapRate(); rate > 0 && n.gapRand.Float64() < rate {
		skip = 1
		n.faults.fire(FaultSeqGap)
	}
	ev = n.faults.legacyCommit(n.faults.hideDeletes(ev))
	f, err := n.log.append(ev, skip)
	if err != nil {
		return Emitted{}, err
	}
	n.stats.emitted.Add(1)
	return Emitted{Seq: f.seq, Event: ev}, nil
}

// maybeForgedCommit follows a valid #commit with a one-off forged or
// non-inverting one for the same account when the ForgedCommits draw says
// so. The caller holds emitMu.
func (n *Network) maybeForgedCommit(ev world.Event) error {
	_, _, _, err := n.oneOffAfter(ev, n.faults.forgedCommitRate(),
		oneOff{FaultForgedCommit, n.w.ForgedSignatureCommit}, oneOff{FaultNonInverting, n.w.NonInvertingCommit})
	return err
}

// oneOff is a kind of one-off commit and its world builder.
type oneOff struct {
	kind  FaultKind
	build func(did string) (world.Event, error)
}

// oneOffAfter draws rate after a valid #commit ev and, on a hit, appends
// one of a or b (even odds) for the same account. ok is false when nothing
// was appended. The caller holds emitMu.
func (n *Network) oneOffAfter(ev world.Event, rate float64, a, b oneOff) (kind FaultKind, hev world.Event, ok bool, err error) {
	if ev.Commit == nil || ev.Invalid != "" || rate == 0 || n.hostileRand.Float64() >= rate {
		return "", world.Event{}, false, nil
	}
	pick := a
	if n.hostileRand.IntN(2) == 1 {
		pick = b
	}
	hev, err = pick.build(ev.DID)
	if errors.Is(err, world.ErrAccountInactive) || errors.Is(err, world.ErrAccountDeleted) {
		return "", world.Event{}, false, nil // changed by a direct world call since the commit: nothing to attack
	}
	if err != nil {
		return "", world.Event{}, false, fmt.Errorf("oracle: emit: %s: %w", pick.kind, err)
	}
	if _, err := n.appendLocked(hev); err != nil {
		return "", world.Event{}, false, err
	}
	n.faults.fire(pick.kind)
	return pick.kind, hev, true, nil
}

// maybeHostileCommit follows a valid #commit with a one-off invalid one for
// the same account when the HostileCommits draw says so. The caller holds
// emitMu.
func (n *Network) maybeHostileCommit(ev world.Event) error {
	kind, hev, ok, err := n.oneOffAfter(ev, n.faults.hostileCommitRate(),
		oneOff{FaultInvalidRevCommit, n.w.InvalidRevCommit}, oneOff{FaultInvalidPathCommit, n.w.InvalidPathCommit})
	if err != nil || !ok || kind != FaultInvalidPathCommit {
		return err
	}
	// The PDS retries the write without its bad record: a lenient consumer
	// (drops the invalid op) and a strict one (drops the commit) then agree
	// with the world.
	rev, err := n.w.RetryValidOps(hev)
	if err != nil {
		return fmt.Errorf("oracle: emit: retry of %s: %w", kind, err)
	}
	_, err = n.appendLocked(rev)
	return err
}

// RelayURL is the relay's base URL, e.g. http://127.0.0.1:7777.
func (n *Network) RelayURL() string { return n.relayURL }

// HostURLs are the PDS hosts' base URLs, indexed like world.Account.Host.
func (n *Network) HostURLs() []string {
	out := make([]string, len(n.hosts))
	for i, h := range n.hosts {
		out[i] = h.url
	}
	return out
}

// LoopbackHosts is the host:port of every PDS host, for
// upstream.Options.LoopbackHosts: the redirect targets a client following
// this network's relay must be allowed. Each host listens on the relay's
// port at an address of its own, unless that address could not be bound
// and it took a port of its own on 127.0.0.1, which a client told only of
// the relay would refuse.
func (n *Network) LoopbackHosts() []string {
	out := make([]string, 0, len(n.hosts))
	for _, h := range n.hosts {
		if u, err := url.Parse(h.url); err == nil {
			out = append(out, u.Host)
		}
	}
	return out
}

// World is the world being served. Mutate it through Emit so its events reach
// the firehose.
func (n *Network) World() *world.World { return n.w }

// Faults is the network's fault plan.
func (n *Network) Faults() *Faults { return n.faults }

// Config is the effective configuration (defaults applied).
func (n *Network) Config() Config { return n.cfg }

// Status reports the firehose head, emitted count and traffic state.
func (n *Network) Status() Status {
	return Status{
		Seq:         n.log.headSeq(),
		Events:      n.stats.emitted.Load(),
		Done:        n.done.Load(),
		Accounts:    n.cfg.Accounts,
		LiveRecords: n.w.LiveRecords(),

		DIDDocRequests: n.stats.docRequests.Load(),
		ExportRequests: n.stats.exportRequests.Load(),
	}
}

// TrafficErr is the error that stopped the traffic generator, if any.
func (n *Network) TrafficErr() error {
	if p := n.trErr.Load(); p != nil {
		return *p
	}
	return nil
}

// Events decodes the retained firehose history, oldest first. Every event
// ever emitted is there unless Config.Retention trimmed it.
func (n *Network) Events() ([]Emitted, error) {
	fs := n.log.snapshot()
	out := make([]Emitted, 0, len(fs))
	for _, f := range fs {
		e, err := decodeEvent(f)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// RepoCounts is what the network served for did's getRepo so far.
func (n *Network) RepoCounts(did string) RepoCount { return n.repos.get(did) }

// AllRepoCounts is RepoCounts for every DID that was requested.
func (n *Network) AllRepoCounts() map[string]RepoCount { return n.repos.all() }

// HostGetRepoRequests is how many getRepo requests reached PDS host i.
func (n *Network) HostGetRepoRequests(i int) int64 {
	if i < 0 || i >= len(n.hosts) {
		return 0
	}
	return n.hosts[i].requests.Load()
}

// FetchedSince is, per DID, the getRepo requests that reached a PDS host
// (directly or redirected by the relay) since before (AllRepoCounts taken
// earlier); DIDs not fetched since are absent.
func (n *Network) FetchedSince(before map[string]RepoCount) map[string]int {
	out := map[string]int{}
	for did, c := range n.AllRepoCounts() {
		if d := c.Requests - before[did].Requests; d > 0 {
			out[did] = d
		}
	}
	return out
}

// FetchedFrom is did's getRepo requests by the PDS host index that
// received them (directly or redirected by the relay).
func (n *Network) FetchedFrom(did string) map[int]int { return n.repos.hosts(did) }

// FirehoseConnections is how many subscribeRepos connections were served
// (FutureCursor refusals excluded).
func (n *Network) FirehoseConnections() int64 { return n.stats.connections.Load() }

// Close stops traffic, every listener, handler and websocket, and waits.
// It is idempotent.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	conns := make([]*websocket.Conn, 0, len(n.conns))
	for c := range n.conns {
		conns = append(conns, c)
	}
	n.mu.Unlock()
	n.cancel()
	if n.relay != nil {
		_ = n.relay.srv.Close()
	}
	for _, h := range n.hosts {
		if h.srv != nil { // nil: served by the relay's listener
			_ = h.srv.Close()
		}
	}
	for _, c := range conns {
		_ = c.NetConn().Close()
	}
	n.handlers.Wait()
	n.wg.Wait()
	return nil
}

// Run starts a network, writes the relay URL (first line) and the PDS host
// URLs to out, and serves until ctx is done.
func Run(ctx context.Context, cfg Config, out io.Writer) error {
	n, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer n.Close()
	fmt.Fprintln(out, n.RelayURL())
	for i, u := range n.HostURLs() {
		fmt.Fprintf(out, "pds %d %s\n", i, u)
	}
	c := n.Config()
	fmt.Fprintf(out, "accounts=%d records=%d hosts=%d seed=%d rate=%s events=%d traffic=%s faults=%s preload=%d\n",
		c.Accounts, c.RecordsMean, c.Hosts, c.Seed, strconv.FormatFloat(c.Rate, 'g', -1, 64),
		c.Events, c.Traffic, c.Faults, c.PreloadEvents)
	<-ctx.Done()
	return nil
}
