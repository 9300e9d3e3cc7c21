package bootstrap

// fleet.go owns the fleet bootstrap: the enumeration mode (hosts or relay),
// the relay's listHosts roster, each host's own listing and its state,
// attribution of a repo to the host that lists it (when two do, the one
// its DID document names, else the newer rev), and the dispatch scheduler: round-robin over the hosts with work,
// each under its concurrency cap.

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/loglimit"
	"github.com/backstream/backstream/upstream"
)

// Enumeration modes (Config.Enumerate).
const (
	// EnumerateHosts lists every active host of the relay's listHosts
	// roster on the host itself and downloads each repo from the host that
	// listed it.
	EnumerateHosts = "hosts"
	// EnumerateRelay lists the relay's own listRepos and downloads through
	// its redirect.
	EnumerateRelay = "relay"
)

// DefaultHostWorkers caps the concurrent jobs of one host in hosts mode.
const DefaultHostWorkers = 8

// DefaultHostRetries is how many times a host whose listing was cut is
// listed again in the same run (Config.HostRetries), after hostRetryBase
// doubling to hostRetryMax: about 15 minutes in all.
const DefaultHostRetries = 8

// The wait before a cut host is listed again.
const (
	hostRetryBase = 5 * time.Second
	hostRetryMax  = 5 * time.Minute
)

// maxRosterHosts bounds the roster read: the hosts listHosts names, and
// the listHosts pages asked for them (a relay may page its roster a host at
// a time). A roster still going on past it is cut there: its hosts read so
// far are listed, the cut counted (backstream_listrepos_cut_total
// {reason="too_large"}), logged once and on /status (hosts.roster_cut).
const maxRosterHosts = 1_000_000

// maxFailingShown bounds the failing hosts /status lists.
const maxFailingShown = 10

// hostCutLogEvery is how often a host's cut listing, and a host's failed
// page try, are each logged at most (the rest are counted in
// backstream_listrepos_cut_total, backstream_listrepos_errors_total and on
// /status).
const hostCutLogEvery = time.Minute

// FleetSource is what hosts mode needs from the network beyond a
// RepoSource (upstream.Client).
type FleetSource interface {
	RosterSource
	HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error)
}

var _ FleetSource = (*upstream.Client)(nil)

// hostPacer is what a FleetSource may also say (upstream.Client): how long
// a request of host would wait for the reset of a budget the host
// announced spent. A host's page that would wait is not asked on a request
// slot: its lane waits parked instead (listOnce).
type hostPacer interface {
	HostPaceWait(host string) time.Duration
}

var _ hostPacer = (*upstream.Client)(nil)

// Host states on /status.
const (
	HostEnumerating = "enumerating"
	HostDone        = "done"
	HostFailing     = "failing"
)

// HostsProgress is the fleet section of Progress: the mode, the roster and
// every host by state.
type HostsProgress struct {
	Mode string `json:"mode"`
	// Roster is the hosts listHosts named; Skipped those not listed for
	// their status (banned: listable).
	Roster  int `json:"roster"`
	Skipped int `json:"skipped"`
	// ByState counts the listed hosts by enumeration state.
	ByState map[string]int `json:"by_state"`
	// Failing are some hosts whose listing was cut (retried from their
	// checkpoint at the next start), by host name.
	Failing []FailingHost `json:"failing,omitempty"`
	// Reattributed counts repos listed by a second host and fetched from
	// that host instead (the host their DID document names, or with the
	// newer rev: AttributedByRev).
	Reattributed int64 `json:"reattributed"`
	// AttributedByRev counts DIDs listed by two hosts decided by the newer
	// listed rev, without their DID document (--verify off, or resolution
	// failed or named neither host).
	AttributedByRev int64 `json:"attributed_by_rev"`
	// RosterCut is why the roster read ended with a cursor still pending
	// (an upstream.CutReasons value: too_large past maxRosterHosts); ""
	// when the relay's whole roster was read.
	RosterCut string `json:"roster_cut,omitempty"`
	// FellBackToRelay: every roster host's listing failed, the roster has
	// no host to list (every one banned), or some host's listing was cut
	// for naming more entries than its bound (too_many_entries), and the
	// relay's listing was used too.
	FellBackToRelay bool `json:"fell_back_to_relay,omitempty"`
}

// FailingHost is one failing host: why its listing was last cut, how
// many times it was listed again in this run, and when it is next; no
// next attempt once its retries are spent (left for discovery, which lists
// it again after bootstrap, and for a restart before merging).
type FailingHost struct {
	Host        string     `json:"host"`
	Reason      string     `json:"reason"`
	Retries     int        `json:"retries"`
	NextAttempt *time.Time `json:"next_attempt,omitempty"`
}

// attribution is the host a dispatched repo is fetched from and the rev
// that host listed ("" for the relay).
type attribution struct {
	host, rev string
}

// fleetState is the hosts' states for Progress; nil-safe (relay mode).
type fleetState struct {
	mu      sync.Mutex
	p       HostsProgress
	state   map[string]string
	failing map[string]FailingHost
	lines   *loglimit.Every
	tooMany int // hosts whose listing was cut for too many entries
}

func newFleetState(mode string) *fleetState {
	return &fleetState{p: HostsProgress{Mode: mode}, state: map[string]string{}, failing: map[string]FailingHost{},
		lines: loglimit.New(hostCutLogEvery, nil)}
}

func (f *fleetState) set(host, st string) {
	if f == nil || host == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state[host] = st
	if st != HostFailing {
		delete(f.failing, host)
	}
}

// listed: host answered a page.
func (f *fleetState) listed(host string) {
	if f == nil || host == "" {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state[host] != HostEnumerating {
		f.state[host] = HostEnumerating
		delete(f.failing, host)
	}
}

// cut: host's listing ended early; logged at most once a minute.
func (f *fleetState) cut(log *slog.Logger, host, reason string, err error) {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.state[host] = HostFailing
	fh := f.failing[host]
	fh.Host, fh.Reason, fh.NextAttempt = host, reason, nil
	f.failing[host] = fh
	if reason == upstream.CutTooManyEntries {
		f.tooMany++
	}
	f.mu.Unlock()
	f.lines.Log(log, slog.LevelWarn, "cut", "bootstrap: a host's listRepos cannot be used; that host alone stops listing, every other host goes on; one cut for failing is listed again from where it was cut after a backoff, any other is left to discovery",
		"host", host, "reason", reason, "err", err)
}

// retrying: host is listed again at next (its retries-th retry).
func (f *fleetState) retrying(host string, retries int, next time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	fh := f.failing[host]
	fh.Retries, fh.NextAttempt = retries, &next
	f.failing[host] = fh
}

// tryingAt: a failing host's lane waits for its page's next try at next
// (a host listed again after its cut, whose page failed again): that is
// its next attempt now. A host not failing is left as it is.
func (f *fleetState) tryingAt(host string, next time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if fh, ok := f.failing[host]; ok {
		fh.NextAttempt = &next
		f.failing[host] = fh
	}
}

func (f *fleetState) byRev() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.p.AttributedByRev++
	f.mu.Unlock()
}

func (f *fleetState) reattributed() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.p.Reattributed++
	f.mu.Unlock()
}

func (f *fleetState) snapshot() *HostsProgress {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p := f.p
	p.ByState = map[string]int{HostEnumerating: 0, HostDone: 0, HostFailing: 0}
	for _, st := range f.state {
		p.ByState[st]++
	}
	for _, fh := range f.failing {
		p.Failing = append(p.Failing, fh)
	}
	sort.Slice(p.Failing, func(i, j int) bool { return p.Failing[i].Host < p.Failing[j].Host })
	if len(p.Failing) > maxFailingShown {
		p.Failing = p.Failing[:maxFailingShown]
	}
	return &p
}

// relayNeeded says why hosts mode lists the relay's listRepos after its
// hosts' lanes ended, "" when it does not: the roster has no host to list
// (every one banned), every roster host's listing ended cut (refused,
// failing past its retries: hosts mode archived nothing), or some host's
// listing was cut for naming more entries than its bound
// (too_many_entries): the accounts it lists past the cut are listed by no
// other host.
func (b *Bootstrap) relayNeeded() string {
	f := b.hosts()
	p := f.snapshot()
	f.mu.Lock()
	tooMany := f.tooMany
	f.mu.Unlock()
	switch {
	case p.Roster == p.Skipped:
		return "the relay's roster has no host to list (every one banned)"
	case p.ByState[HostFailing] == p.Roster-p.Skipped:
		return "every roster host's listing failed (refused, or failing past its retries)"
	case tooMany > 0:
		return fmt.Sprintf("%d roster hosts' listings were cut for naming more entries than their bound (too_many_entries: twice the roster's account count plus 10,000), so the relay lists the accounts past the cut", tooMany)
	}
	return ""
}

// fallBackToRelay says, once, that hosts mode lists the relay after all
// (counted, on /status), and why (relayNeeded).
func (b *Bootstrap) fallBackToRelay(why string) {
	b.cfg.Metrics.relayFallback()
	p := b.hosts()
	p.mu.Lock()
	p.p.FellBackToRelay = true
	roster, skipped := p.p.Roster, p.p.Skipped
	p.mu.Unlock()
	b.cfg.Logger.Warn("bootstrap: "+why+"; the relay's own listRepos is listed instead, downloads through its redirect",
		"hosts", roster, "skipped_banned", skipped)
}

// hosts is the fleet's state, nil in relay mode.
func (b *Bootstrap) hosts() *fleetState { return b.fleet.Load() }

// listOnce asks for one listRepos page: the relay's, or r's host's own.
// The hosts' listings share Workers request slots, so a roster of
// thousands of hosts is not asked all at once. A host that has answered a
// request in this run (r.answered) gets the next slot that frees before
// any host that has not: on the real network thousands of roster hosts
// the relay calls active are blackholed, each try holding its slot for
// the connect timeout, and their tries and retries would otherwise be
// ahead of each next page of a host that answers. No slot is held back
// while a request waits, so hosts not yet answered still have every slot
// the answered ones leave. The relay's own listing takes no slot.
//
// A host whose announced rate limit is spent (upstream.Client.HostPaceWait)
// is not asked: listOnce returns the wait before its reset (paced > 0,
// up to upstream.RetryAfterCeiling), and the lane waits parked, holding
// neither its slot nor a runner, and spending no try. Asked on the slot,
// the request would wait for the reset holding it: a few hosts announcing
// their budget spent (a hostile host does on every answer) would hold
// every slot for minutes a page, and every other host's listing with them.
func (b *Bootstrap) listOnce(ctx context.Context, r *laneRun, cursor string) (pg upstream.Page, paced time.Duration, err error) {
	if r.host == "" {
		pg, err = b.cfg.Source.ListRepos(ctx, cursor, b.cfg.PageLimit)
		return pg, 0, err
	}
	if err := b.listSlots.Acquire(ctx, r.answered); err != nil {
		return upstream.Page{}, 0, err
	}
	defer b.listSlots.Release()
	if p, ok := b.cfg.Fleet.(hostPacer); ok {
		if wait := p.HostPaceWait(r.host); wait > 0 {
			return upstream.Page{}, wait, nil
		}
	}
	pg, err = b.cfg.Fleet.HostListRepos(ctx, r.host, cursor, b.cfg.PageLimit)
	r.answered = r.answered || upstream.Answered(err)
	return pg, 0, err
}

// listedAgain handles an entry whose DID is already dispatched in this run
// (true: skip it). Listed by another host (a migration in flight), the repo
// is fetched from the host attribute picks, if it has not been handed to a
// worker yet (the scheduler reads the attribution at dispatch). An active
// entry not in flight is reserved for host in the same critical section as
// the check, so two lanes listing one DID at once never both dispatch it;
// the caller releases the reservation when it does not dispatch the repo.
func (b *Bootstrap) listedAgain(ctx context.Context, host string, e upstream.RepoEntry) bool {
	b.mu.Lock()
	a, busy := b.inflight[e.DID]
	if !busy && e.Active {
		b.inflight[e.DID] = attribution{host: host, rev: e.Rev}
	}
	b.mu.Unlock()
	if !busy {
		return false
	}
	if host == "" || host == a.host {
		return true
	}
	to := b.attribute(ctx, e.DID, a, attribution{host: host, rev: e.Rev})
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur, ok := b.inflight[e.DID]; ok && cur == a && to != a {
		b.inflight[e.DID] = to
		b.hosts().reattributed()
	}
	return true
}

// release drops the reservation listedAgain made for a DID its page does
// not dispatch.
func (b *Bootstrap) release(did string) {
	b.mu.Lock()
	delete(b.inflight, did)
	b.mu.Unlock()
}

// Attribution rules of a DID listed by two hosts
// (backstream_bootstrap_double_listed_total{by}).
const (
	AttributedByDocument = "document" // the host its DID document names as its PDS
	AttributedByRev      = "rev"      // the newer listed rev: resolution off, failed, or naming neither host
	AttributedForeign    = "foreign"  // already fetched from another roster host: the entry is ignored (Foreign)
)

// Foreign reports whether lister's entry about an account is a roster
// host's word on another roster host's account: the account's repo/ row
// records it fetched from recorded, another host of roster (the hosts
// listed). Such an entry changes nothing (bootstrap, every repair pass):
// a host that does not hold the account (a hostile one, or its old PDS
// after a migration, listing it deactivated) would otherwise mark it
// inactive, and the merge drops every captured commit of an account the
// archive holds taken down. The account's own host, the relay and the
// firehose speak for it. recorded is in canonical form (the caller's).
func Foreign(roster map[string]bool, lister, recorded string) bool {
	return lister != "" && recorded != "" && recorded != lister && roster[recorded]
}

// attributionRule says how a DID listed by two hosts is attributed.
func (b *Bootstrap) attributionRule() string {
	if r := b.cfg.Identity; r != nil && r.Mode() != ident.ModeOff {
		return "fetched from the PDS its DID document names (the newer listed rev when resolution fails)"
	}
	return "fetched from the host listing the newer rev (identity resolution is off: --verify off)"
}

// attribute picks the host of a DID listed by two (cur, then other): the
// one its DID document names as its PDS (Config.Identity); the one whose
// listing has the newer rev when identity resolution is off (--verify off)
// or fails, or the document names neither host.
func (b *Bootstrap) attribute(ctx context.Context, did string, cur, other attribution) attribution {
	if r := b.cfg.Identity; r != nil && r.Mode() != ident.ModeOff {
		if info, _, err := r.Lookup(ctx, did); err == nil {
			switch {
			case ident.CheckAuthority(info, other.host) == nil:
				b.cfg.Metrics.doubleListed(AttributedByDocument)
				return other
			case ident.CheckAuthority(info, cur.host) == nil:
				b.cfg.Metrics.doubleListed(AttributedByDocument)
				return cur
			}
		}
	}
	b.cfg.Metrics.doubleListed(AttributedByRev)
	b.hosts().byRev()
	if other.rev > cur.rev {
		return other
	}
	return cur
}

// hostFor is the host a dispatched repo is fetched from now.
func (b *Bootstrap) hostFor(did string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight[did].host
}

// Why bootstrap enumerates as it does (Progress.EnumerationReason).
const (
	ModeAsked           = "asked"             // --enumerate named the mode
	ModeNoFleet         = "no_fleet"          // default mode, no fleet source: relay
	ModeNoListHosts     = "no_listhosts"      // default mode, the relay does not answer listHosts: relay
	ModeNoAccountCounts = "no_account_counts" // default mode, no active roster host has an accountCount: relay
	ModeListHosts       = "listhosts"         // default mode, the relay answers listHosts with counts: hosts
)

// reasonAsked is ModeAsked when --enumerate named a mode, else why.
func reasonAsked(mode, why string) string {
	if mode != "" {
		return ModeAsked
	}
	return why
}

// enumeration says on /status the mode this run enumerates in, and why.
func (b *Bootstrap) enumeration(mode, why string) {
	b.prog.set(func(p *Progress) { p.Enumeration, p.EnumerationReason = mode, why })
}

// lane is one listing: the relay's (host "") or one host's.
type lane struct {
	host    string
	start   checkpoint
	listing bool
	bound   int64 // entries a host's listing may name (upstream.HostListingBound); 0: none (the relay's)
}

// fleetLanes decides the mode and, in hosts mode, reads the roster and
// the checkpoint of each host it lists (every one but banned ones:
// listable). It returns nil lanes in relay mode; in hosts mode a lane per
// listed host, none (not nil) when the roster has no host to list.
func (b *Bootstrap) fleetLanes(ctx context.Context) ([]lane, error) {
	cfg := &b.cfg
	log := cfg.Logger
	mode := cfg.Enumerate
	if mode == EnumerateRelay || (mode == "" && cfg.Fleet == nil) {
		b.enumeration(EnumerateRelay, reasonAsked(mode, ModeNoFleet))
		log.Info("bootstrap: enumeration mode relay: the relay's listRepos, downloads through its redirect", "asked", cfg.Enumerate)
		return nil, nil
	}
	if cfg.Fleet == nil {
		return nil, errors.New("bootstrap: --enumerate hosts needs a fleet source")
	}
	rr, err := b.roster(ctx, maxRosterHosts)
	roster, skipped := rr.Listed, rr.Skipped
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if mode == EnumerateHosts {
			return nil, fmt.Errorf("bootstrap: --enumerate hosts: the relay's listHosts: %w", err)
		}
		b.enumeration(EnumerateRelay, ModeNoListHosts)
		log.Info("bootstrap: enumeration mode relay: the relay does not answer listHosts", "err", err)
		return nil, nil
	}
	if rr.ListsRelay(mode) {
		// The roster is not recorded: discovery and the repair passes
		// list the relay too (they list hosts only after a roster).
		b.enumeration(EnumerateRelay, ModeNoAccountCounts)
		log.Warn("bootstrap: enumeration mode relay: the relay's listHosts gives no host it lists an accountCount, so each host's listing could name at most 10,000 entries; the relay's listRepos is listed instead, downloads through its redirect (--enumerate hosts lists the hosts anyway, with that bound)",
			"hosts", len(roster), "skipped_banned", skipped)
		return nil, nil
	}
	if _, err := RecordRoster(ctx, cfg.Writer, cfg.Store, rr); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	b.enumeration(EnumerateHosts, reasonAsked(mode, ModeListHosts))
	log.Info("bootstrap: enumeration mode hosts: every host of the relay's roster but banned ones (active, idle, offline, throttled) lists its own repos and serves them",
		"asked", cfg.Enumerate, "hosts", len(roster), "skipped_banned", skipped, "listed_by_two_hosts", b.attributionRule())
	b.listSlots = newPrioritySlots(cfg.Workers)
	fs := newFleetState(EnumerateHosts)
	fs.p.Roster, fs.p.Skipped, fs.p.RosterCut = len(roster)+skipped, skipped, rr.Cut
	b.fleet.Store(fs)
	cfg.Metrics.hostsSkipped(skipped)
	lanes := make([]lane, 0, len(roster))
	b.rosterSet = make(map[string]bool, len(roster))
	for _, h := range roster {
		b.rosterSet[h] = true
		bound, err := ListingBound(cfg.Store, h)
		if err != nil {
			return nil, fmt.Errorf("bootstrap: %w", err)
		}
		l := lane{host: h, listing: true, bound: bound}
		c, err := cfg.Store.HostListCursor(h)
		switch {
		case errors.Is(err, archive.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("bootstrap: read checkpoint of host %s: %w", h, err)
		default:
			l.start.cursor = c
			l.listing = !c.Finished
		}
		if l.listing {
			b.hosts().set(h, HostEnumerating)
		} else {
			b.hosts().set(h, HostDone)
		}
		lanes = append(lanes, l)
	}
	return lanes, nil
}

// job is a repo handed to a worker and the host it is fetched from.
type job struct {
	did, host string
}

// scheduler holds the repos ready for a worker, one queue per host, and
// hands them out round-robin over the hosts that have work and are under
// their cap, so a slow host holds at most its cap of workers.
//
// Only hosts with ready repos are in the round-robin: a host leaves it when
// its queue empties and joins it again when pushed. peek scans from where
// it left off past the hosts at their cap (at most Workers/cap of them), so
// a dispatch costs the same whether a handful of hosts or 30,000 have had
// work in the run.
//
// A host parked until a time (its announced rate limit spent: park) keeps
// its queue but leaves the round-robin until wake finds that time passed,
// so peek never scans it and no worker is handed a repo that would wait
// for the host's reset.
type scheduler struct {
	cap     int
	queues  map[string][]string // the hosts with ready repos, parked ones too
	order   []string            // those not parked, in round-robin order
	next    int                 // where peek starts: the host after the last served
	busy    map[string]int
	n       int                  // ready repos, parked ones too
	parked  map[string]time.Time // parked hosts, until when
	wakes   wakeHeap             // the same hosts, by when
	parkedN int                  // the repos queued on parked hosts
}

func newScheduler(hostCap int) *scheduler {
	return &scheduler{cap: hostCap, queues: map[string][]string{}, busy: map[string]int{}, parked: map[string]time.Time{}}
}

func (s *scheduler) push(host, did string) {
	q, ok := s.queues[host]
	if !ok {
		s.order = append(s.order, host)
	}
	s.queues[host] = append(q, did)
	s.n++
	if _, ok := s.parked[host]; ok {
		s.parkedN++
	}
}

// peek is the next repo to hand out, without taking it.
func (s *scheduler) peek() (job, bool) {
	for i := range len(s.order) {
		k := (s.next + i) % len(s.order)
		if h := s.order[k]; s.busy[h] < s.cap {
			s.next = k
			return job{did: s.queues[h][0], host: h}, true
		}
	}
	return job{}, false
}

// take removes the job peek returned and counts it busy.
func (s *scheduler) take(j job) {
	if !s.pop(j.host) {
		s.next++ // the host stays in the round, served again after the others
	}
	s.busy[j.host]++
}

// move re-queues the head of from's queue under host to (reattributed).
func (s *scheduler) move(j job, to string) {
	s.pop(j.host)
	s.push(to, j.did)
}

// pop removes the head of host's queue, and the host from the round-robin
// when that was its last repo (true).
func (s *scheduler) pop(host string) (emptied bool) {
	q := s.queues[host]
	q[0] = ""
	s.n--
	if len(q) > 1 {
		s.queues[host] = q[1:]
		return false
	}
	delete(s.queues, host)
	s.leave(host)
	return true
}

// leave takes host out of the round-robin. take, move and park pass the
// host peek has just returned, so it sits at next, and the host after it
// takes its place there.
func (s *scheduler) leave(host string) {
	k := s.next
	if k >= len(s.order) || s.order[k] != host {
		k = slices.Index(s.order, host) // not from peek: found, never left behind
	}
	s.order = slices.Delete(s.order, k, k+1)
	if s.next >= len(s.order) {
		s.next = 0
	}
}

// park takes host, which peek has just returned, out of the round-robin
// until until; its queue stays, and grows as it is pushed.
func (s *scheduler) park(host string, until time.Time) {
	s.leave(host)
	s.parked[host] = until
	heap.Push(&s.wakes, parkedHost{host: host, until: until})
	s.parkedN += len(s.queues[host])
}

// wake puts back in the round-robin every parked host whose time has come
// by now.
func (s *scheduler) wake(now time.Time) {
	for len(s.wakes) > 0 && !s.wakes[0].until.After(now) {
		h := heap.Pop(&s.wakes).(parkedHost).host
		delete(s.parked, h)
		s.parkedN -= len(s.queues[h])
		s.order = append(s.order, h)
	}
}

// nextWake is when the first parked host rejoins the round-robin; false
// when none is parked.
func (s *scheduler) nextWake() (time.Time, bool) {
	if len(s.wakes) == 0 {
		return time.Time{}, false
	}
	return s.wakes[0].until, true
}

// dispatchable is how many ready repos are not on a parked host.
func (s *scheduler) dispatchable() int { return s.n - s.parkedN }

// parkedHost is a parked host and when it rejoins the round-robin.
type parkedHost struct {
	host  string
	until time.Time
}

// wakeHeap orders parked hosts by when they rejoin (container/heap).
type wakeHeap []parkedHost

func (h wakeHeap) Len() int           { return len(h) }
func (h wakeHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h wakeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *wakeHeap) Push(x any)        { *h = append(*h, x.(parkedHost)) }
func (h *wakeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

func (s *scheduler) done(host string) {
	if s.busy[host]--; s.busy[host] <= 0 {
		delete(s.busy, host)
	}
}

func (s *scheduler) len() int { return s.n }
