package repair

// runner.go owns the Runner: its configuration, the loop over open gaps,
// the three phases of a pass (scan, list, done) and closing a gap.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/internal/loglimit"
	"github.com/backstream/backstream/merge"
	"github.com/backstream/backstream/upstream"
)

// Defaults.
const (
	// DefaultPeriod is the pause between two looks at the open gaps (and
	// at whether a done pass's replacements have finished).
	DefaultPeriod = 30 * time.Second
	// DefaultAuditInterval is how often a scheduled audit is recorded.
	DefaultAuditInterval = 24 * time.Hour
)

// Config configures a Runner.
type Config struct {
	Store  *archive.Store
	Writer *archive.Writer // the archive writer
	// Source pages the relay's listRepos.
	Source upstream.RepoSource
	// Fleet lists each roster host's own repos: with it and a roster in
	// the store (a hosts-mode bootstrap read listHosts), a pass lists every
	// active roster host, not the relay, so accounts the relay's index
	// misses are compared too.
	Fleet merge.HostLister
	// Roster reads the relay's listHosts roster (upstream.Client): with it
	// and Fleet, a pass in hosts mode reads the roster again when it
	// begins, before it lists (readRoster). Nil: the host/ rows as last
	// recorded.
	Roster bootstrap.RosterSource
	// Enumerate is the --enumerate mode asked ("" the default): in the
	// default mode a pass whose recorded roster gives no host it lists an
	// account count lists the relay, as bootstrap does
	// (bootstrap.ListedHosts); with bootstrap.EnumerateHosts it lists the
	// hosts anyway; with bootstrap.EnumerateRelay it lists the relay and
	// reads no roster, whatever roster the store records.
	Enumerate string
	// Status asks an account's status (the relay's getRepoStatus, or its
	// host's): after a complete pass, each active account no listing named
	// is asked, and what it says is archived. Nil: absences are not
	// checked.
	Status StatusSource
	// Identity, when verifying (not ident.ModeOff), names the host an
	// absent account's status is asked of when the relay does not know
	// it: the PDS its DID document names, not the host it was last
	// downloaded from, which it may have left (absent.go's statusHost).
	// Nil or off: the recorded host.
	Identity *ident.Resolver
	// Scheme is the relay's URL scheme, the one roster hosts are reached
	// with ("https" when empty): an account's recorded host is taken in
	// its canonical form under it (upstream.CanonicalHost) before it is
	// compared to the roster's names, as older builds recorded hosts as a
	// download named them (PDS.example:443, pds.example.).
	Scheme string
	// MaxAbsent: see DefaultMaxAbsent.
	MaxAbsent int
	// ListWorkers bounds the roster hosts a pass in hosts mode lists at
	// once (default merge.DefaultListWorkers, as discovery's).
	ListWorkers int
	// GapIDs allocates the ids of scheduled audits' gaps (shared with the
	// firehose consumers). Required when AuditInterval > 0.
	GapIDs *archive.GapIDs
	// Stream is the live consumer (firehose.Consumer): a pass starts only
	// once the stream has caught up past its gap (caughtUp). Nil: always.
	Stream Stream
	// Wake is called after a unit marked accounts (retry.Runner.Wake). It
	// must not block.
	Wake func()
	// Period: see DefaultPeriod. AuditInterval: a GapAudit gap is recorded
	// this long after the last gap of any kind was found (0: never).
	Period        time.Duration
	AuditInterval time.Duration
	Metrics       *Metrics
	Logger        *slog.Logger
	Now           func() time.Time
	// Sleep is the wait between a listRepos page's retries
	// (merge.ListPage); default backoff.Sleep, the real clock.
	Sleep func(ctx context.Context, d time.Duration) error
	// Crash, when armed (tests), kills the process right after a repair
	// unit is durable (crashpoint.RepairPage). Nil in production.
	Crash *crashpoint.Set
}

// Stream is the live consumer as a pass sees it (firehose.Consumer).
type Stream interface {
	// AcceptedSince reports whether a frame was accepted (submitted to the
	// writer) at or after us (unix µs).
	AcceptedSince(us int64) bool
	// Behind is now less the upstream time of the last accepted event (a
	// pong on a connection silent for a while counts as the tip).
	Behind() time.Duration
}

// Status is the repair runner's part of the status report.
type Status struct {
	Gap         uint64 `json:"gap,omitempty"`   // the gap whose pass runs (0: none open)
	Phase       string `json:"phase,omitempty"` // waiting_for_stream, list, done
	Host        string `json:"host,omitempty"`  // hosts mode: the roster host whose listing began last (ListWorkers list at once)
	Listed      uint64 `json:"listed"`
	Marked      uint64 `json:"marked"`
	Outstanding int64  `json:"outstanding"` // marked accounts due now not yet replaced (phase done); 1 when only marks due later are left
	Closed      int64  `json:"closed"`      // gaps closed by this process
}

// Runner runs repair passes.
type Runner struct {
	cfg  Config
	log  *slog.Logger
	acks *archive.Acks
	// lines bounds the lines of roster hosts' failed steps and cuts: one
	// of each a minute across hosts (hostLogEvery).
	lines *loglimit.Every

	mu     sync.Mutex
	st     Status
	origin time.Time // the first step (scheduled audits' origin)
	// read holds, for each gap whose time was ahead of the clock when this
	// runner first read it, that moment (foundAt), until the gap is
	// neither open nor the newest (forgetReads).
	read map[uint64]int64
	// failing counts, for the pass of gap failingGap, the steps in a row
	// in which a host's listing failed transiently.
	failing    map[string]int
	failingGap uint64
	seen       *listedSet // the DIDs the pass in progress listed
	// absentFrom is the last account a pass checked for its absence when
	// more were absent than MaxAbsent; the next pass checks those after
	// it ("": from the first). Only the pass's goroutine uses it.
	absentFrom string
	// waiting is the gap whose pass last waited for the stream, since
	// waitingSince, when it was found at waitingFrom (unix µs); ended is
	// the last gap whose extension that wait ended (waitOn).
	waiting      uint64
	waitingSince time.Time
	waitingFrom  int64
	ended        uint64
	fellBack     uint64 // the gap whose pass last fell back to the relay's listing
	uncounted    uint64 // the gap whose pass last listed the relay for a roster without account counts
}

// New validates cfg; nothing runs until Run.
func New(cfg Config) (*Runner, error) {
	switch {
	case cfg.Store == nil || cfg.Writer == nil || cfg.Source == nil:
		return nil, errors.New("repair: Store, Writer and Source are required")
	case cfg.Period < 0 || cfg.AuditInterval < 0:
		return nil, errors.New("repair: negative period")
	case cfg.AuditInterval > 0 && cfg.GapIDs == nil:
		return nil, errors.New("repair: scheduled audits need GapIDs")
	}
	if cfg.MaxAbsent <= 0 {
		cfg.MaxAbsent = DefaultMaxAbsent
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "https"
	}
	if cfg.ListWorkers <= 0 {
		cfg.ListWorkers = merge.DefaultListWorkers
	}
	if cfg.Period == 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Sleep == nil {
		cfg.Sleep = backoff.Sleep
	}
	if cfg.Wake == nil {
		cfg.Wake = func() {}
	}
	return &Runner{cfg: cfg, log: cfg.Logger.With("component", "repair"), acks: archive.NewAcks(),
		lines: loglimit.New(hostLogEvery, cfg.Now)}, nil
}

// Status reports the pass in progress.
func (r *Runner) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.st
}

// Run heals open gaps until ctx is done (nil) or a store or writer failure
// (that error).
func (r *Runner) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.cfg.Writer.Done():
			return fmt.Errorf("repair: writer stopped: %w", errors.Join(r.cfg.Writer.Err(), archive.ErrClosed))
		case <-t.C:
		}
		if err := r.step(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("repair: %w", err)
		}
		t.Reset(r.cfg.Period)
	}
}

// step records a scheduled audit when one is due, then works on the open
// gaps in id order: a gap that closes lets the next one start at once.
func (r *Runner) step(ctx context.Context) error {
	gs, err := r.cfg.Store.Gaps()
	if err != nil {
		return err
	}
	r.forgetReads(gs)
	if err := r.schedule(ctx, gs); err != nil {
		return err
	}
	if gs, err = r.cfg.Store.Gaps(); err != nil {
		return err
	}
	for _, g := range gs {
		if !g.Open() {
			continue
		}
		closed, err := r.heal(ctx, g)
		if err != nil || !closed {
			return err
		}
	}
	r.set(func(s *Status) { s.Gap, s.Phase, s.Listed, s.Marked, s.Outstanding = 0, "", 0, 0, 0 })
	return nil
}

// schedule records a GapAudit gap when AuditInterval has passed since the
// newest gap was found (or, with none, since the first step).
func (r *Runner) schedule(ctx context.Context, gs []archive.Gap) error {
	if r.cfg.AuditInterval <= 0 {
		return nil
	}
	now := r.cfg.Now()
	last := r.started(now)
	if len(gs) > 0 {
		last = time.UnixMicro(r.foundAt(gs[len(gs)-1], now))
	}
	if now.Sub(last) < r.cfg.AuditInterval {
		return nil
	}
	g := archive.Gap{ID: r.cfg.GapIDs.Next(), Kind: archive.GapAudit, FirstSeenUS: now.UnixMicro()}
	if cur, err := r.cfg.Store.RelayCursor(); err == nil {
		g.FromSeq, g.ToSeq = cur, cur
	}
	kv, err := archive.GapPut(g)
	if err != nil {
		return err
	}
	if err := r.submit(ctx, &archive.Unit{Puts: []archive.KV{kv}}); err != nil {
		return err
	}
	r.cfg.Metrics.audit()
	r.log.Info("scheduled audit recorded as a gap: its pass compares every account's listed rev with the archive", "gap", g.ID)
	return nil
}

// started is when this runner first looked (the scheduled audits' origin
// when the store has no gap).
func (r *Runner) started(now time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.origin.IsZero() {
		r.origin = now
	}
	return r.origin
}

// foundAt is when g was found, in unix µs, as this runner's clock can use
// it: its FirstSeenUS, unless that was ahead of the clock when this runner
// first read the gap — found while the wall clock ran ahead, read after it
// was put right — and then the moment of that first read, which the
// finding preceded. Otherwise the pass would wait for a frame accepted
// after that time, and the scheduled audits for an interval after it, as
// long as the clock was wrong.
func (r *Runner) foundAt(g archive.Gap, now time.Time) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.read[g.ID]
	if !ok {
		if g.FirstSeenUS <= now.UnixMicro() {
			return g.FirstSeenUS
		}
		if r.read == nil {
			r.read = make(map[uint64]int64)
		}
		at = now.UnixMicro()
		r.read[g.ID] = at
	}
	return min(at, g.FirstSeenUS)
}

// forgetReads lets go of the first reads (foundAt) of the gaps no longer
// asked about: foundAt is asked about an open gap (its pass waits on it)
// and the newest gap (the next scheduled audit counts from it), and gs,
// the gap/ rows oldest first, names the ones still so. A gap closed and
// followed by a newer one, or deleted, is never asked about again.
func (r *Runner) forgetReads(gs []archive.Gap) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := range r.read {
		i, ok := slices.BinarySearchFunc(gs, id, func(g archive.Gap, id uint64) int { return cmp.Compare(g.ID, id) })
		if !ok || (!gs[i].Open() && i != len(gs)-1) {
			delete(r.read, id)
		}
	}
}

// heal runs (or resumes) g's pass and closes g when it can; it reports
// whether g is closed.
func (r *Runner) heal(ctx context.Context, g archive.Gap) (bool, error) {
	a, err := r.cfg.Store.Audit(g.ID)
	begins := false
	switch {
	case errors.Is(err, archive.ErrNotFound):
		// A scheduled audit follows no outage: the stream is live already.
		if g.Kind != archive.GapAudit && !r.caughtUp(r.foundAt(g, r.cfg.Now())) {
			r.waitOn(g)
			r.set(func(s *Status) { s.Gap, s.Phase = g.ID, "waiting_for_stream" })
			return false, nil
		}
		ok, err := r.begin(ctx, g)
		if err != nil || !ok {
			return false, err
		}
		if err := r.readRoster(ctx, g); err != nil {
			return false, err
		}
		a, begins = archive.Audit{Phase: archive.AuditList}, true
	case err != nil:
		return false, err
	}
	r.show(g, a)
	if a.Phase == archive.AuditList {
		if done, err := r.list(ctx, g, &a, r.listed(g, begins)); err != nil || !done {
			return false, err
		}
	}
	return r.close(ctx, g, a)
}

// caughtUp reports whether the live stream has caught up past a gap found
// at us: it accepted a frame after it, and then either an event the relay
// stamped at or after us (every frame the relay held when the gap was
// found, its replayed backlog included, came before that event), or no
// frame for a whole Period (the backlog is drained and the stream quiet).
// A pass that compared before would mark every account whose replayed
// commit is still on its way: a needless whole-repo fetch each, up to the
// relay's whole retention window after an outage. The stamps are the
// relay's clock: one ahead of ours can only start a pass early (needless
// fetches, as before), one behind only late.
func (r *Runner) caughtUp(us int64) bool {
	s := r.cfg.Stream
	if s == nil {
		return true
	}
	if !s.AcceptedSince(us) {
		return false
	}
	now := r.cfg.Now()
	return now.Add(-s.Behind()).UnixMicro() >= us || !s.AcceptedSince(now.Add(-r.cfg.Period).UnixMicro())
}

// waitExtended is how many Periods a pass waits for the stream to catch
// up past its gap before the gap stops being extended by later holes.
const waitExtended = 10

// waitOn notes that g's pass waits for the stream, and once it has waited
// waitExtended Periods, g extended by a later hole meanwhile, ends g's
// extension by later holes (archive.GapIDs.Begin), as its pass's
// beginning would: a relay that
// breaks its stream again and again, more often than its events take to
// reach us (a seq skip on every frame, say), extends g to each later hole,
// no event is ever stamped after the latest, and the stream is never
// quiet, so the pass would wait for as long as the relay breaks. Ended,
// g's time is its last hole's, the stream catches up past it, and the
// later holes make the next gap. A long wait with no later hole (a relay
// replaying hours of backlog) ends nothing: a hole after it still extends
// g, and costs no pass of its own.
func (r *Runner) waitOn(g archive.Gap) {
	now := r.cfg.Now()
	r.mu.Lock()
	if r.waiting != g.ID {
		r.waiting, r.waitingSince, r.waitingFrom = g.ID, now, g.FirstSeenUS
	}
	end := now.Sub(r.waitingSince) >= waitExtended*r.cfg.Period && g.FirstSeenUS != r.waitingFrom && r.ended != g.ID
	if end {
		r.ended = g.ID
	}
	r.mu.Unlock()
	if end {
		r.cfg.GapIDs.Begin(g.ID)
		r.log.Warn("repair pass: the stream has not caught up past its gap for a while, later holes extending it; the gap is no longer extended, later holes make the next gap",
			"gap", g.ID, "kind", g.Kind.String(), "waited", now.Sub(r.waitingSince).String())
	}
}

// begin is a new pass's start: the listing from its beginning. It first
// ends the gap's extension by later holes (archive.GapIDs.Begin), then
// waits until a unit of its own is durable: the writer applies units in
// order, so every frame the stream accepted before (the replayed backlog
// caughtUp saw), and every extension of the gap, is in the store. A gap a
// later hole extended after g was read is found later than g says: the
// pass waits for the stream to catch up past that hole (false).
func (r *Runner) begin(ctx context.Context, g archive.Gap) (bool, error) {
	r.cfg.GapIDs.Begin(g.ID)
	if err := r.submit(ctx, &archive.Unit{}); err != nil {
		return false, fmt.Errorf("wait for the stream's accepted frames: %w", err)
	}
	now, err := r.cfg.Store.Gap(g.ID)
	if err != nil {
		return false, err
	}
	if now.FirstSeenUS != g.FirstSeenUS {
		return false, nil
	}
	r.log.Info("repair pass starts", "gap", g.ID, "kind", g.Kind.String())
	return true, nil
}

// foreign reports whether an account recorded on host is another roster
// host's than l's (bootstrap.Foreign), the host taken in its canonical
// form.
func (r *Runner) foreign(l *lane, host string) bool {
	h := upstream.CanonicalHost(r.cfg.Scheme, host)
	return bootstrap.Foreign(l.roster, l.host, h)
}

// compare decides each listed account against the store: the repo updates
// of those that changed (or whose account state did). l is the listing
// (nil: a status answer): a roster host's entry about an account whose
// recorded host is another active roster host is counted and ignored
// (ReasonForeign); that host's listing, the relay's answers and the
// firehose speak for it.
func (r *Runner) compare(repos []upstream.RepoEntry, l *lane) (*archive.Unit, error) {
	now := r.cfg.Now().UnixMicro()
	u := &archive.Unit{}
	for _, e := range repos {
		rev, err := r.cfg.Store.Rev(e.DID)
		if err != nil && !errors.Is(err, archive.ErrNotFound) {
			return nil, err
		}
		st, err := r.cfg.Store.RepoState(e.DID)
		exists := err == nil
		if err != nil && !errors.Is(err, archive.ErrNotFound) {
			return nil, err
		}
		if exists && st.BackfillRev > rev {
			rev = st.BackfillRev // a snapshot without records moves no ratchet
		}
		newer := upstream.ValidTID(e.Rev) && e.Rev > rev
		var reason string
		switch {
		case l != nil && l.host != "" && exists && st.Host != "" && r.foreign(l, st.Host):
			// Another roster host's account: this host's word on it (a
			// takedown, a newer rev) would archive what it does not hold.
			r.cfg.Metrics.account(ReasonForeign, 1)
			continue
		case e.Active && exists && st.UnknownDID():
			// The directory said the DID does not exist: a listing's word
			// never makes it worth a fetch again (only the firehose does).
			r.cfg.Metrics.account(ReasonUnknownDID, 1)
			continue
		case !e.Active:
			if exists && (st.Active || st.AccountStatus != e.Status) {
				reason = ReasonInactive
			}
		case !exists:
			if newer {
				reason = ReasonUnknown
			}
		case !st.Active:
			reason = ReasonReactivated
		case newer:
			reason = ReasonNewerRev
		}
		switch reason {
		case "":
			continue
		case ReasonInactive:
			addAccountRow(u, e.DID, e.Status, now)
		default:
			u.Repos = append(u.Repos, archive.RepoUpdate{DID: e.DID, Func: markFunc(now)})
		}
		r.cfg.Metrics.account(reason, 1)
	}
	return u, nil
}

// markFunc marks an active account's repo for an audit replacement, due
// at nowUS; an unknown one is created pending.
func markFunc(nowUS int64) func(archive.RepoState, bool) (archive.RepoState, bool) {
	return func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		if !exists {
			return archive.RepoState{Status: archive.StatusPending, Active: true, Refetch: archive.RefetchAudit, NextAttemptUS: nowUS}, true
		}
		next := cur
		next.Active, next.AccountStatus = true, ""
		next.Refetch, next.NextAttemptUS = archive.RefetchAudit, nowUS
		return next, next != cur
	}
}

// addAccountRow adds to u the row a live #account event saying did is
// inactive with status would have archived, with the same effect on its
// repo (firehose.Effects): a deletion or takedown the stream lost is
// served and folded like one it carried. status is a listed one, cut to
// upstream.MaxAccountStatus.
func addAccountRow(u *archive.Unit, did, status string, nowUS int64) {
	ev := archive.Event{Kind: archive.KindAccount, DID: did, Status: status, Source: archive.SourceRetry}
	u.Events = append(u.Events, ev)
	u.Repos = append(u.Repos, *firehose.Effects(&ev, nowUS))
}

// commit submits u (nil: nothing but positions) with the pass's position
// (and l's, a host's) and waits until durable.
func (r *Runner) commit(ctx context.Context, g archive.Gap, a *archive.Audit, l *lane, u *archive.Unit) error {
	kv, err := archive.AuditPut(g.ID, *a)
	if err != nil {
		return err
	}
	puts := []archive.KV{kv}
	if l != nil && l.host != "" {
		hkv, err := archive.AuditHostPut(g.ID, l.host, *l.pos)
		if err != nil {
			return err
		}
		puts = append(puts, hkv)
	}
	if u == nil {
		u = &archive.Unit{}
	}
	marked := len(u.Repos) > 0
	u.Puts = puts
	if err := r.submit(ctx, u); err != nil {
		return err
	}
	r.cfg.Crash.Hit(crashpoint.RepairPage)
	if marked {
		r.cfg.Wake()
	}
	r.show(g, *a)
	return nil
}

// close closes g when its pass is done and no active, not failed account
// still carries the audit mark; it reports whether g closed. It looks
// every Period while the marked accounts are fetched (outstanding).
func (r *Runner) close(ctx context.Context, g archive.Gap, a archive.Audit) (bool, error) {
	outstanding, _, err := r.outstanding(r.cfg.Now().UnixMicro())
	if err != nil {
		return false, err
	}
	r.set(func(s *Status) { s.Outstanding = outstanding })
	if outstanding > 0 {
		return false, nil
	}
	if err := r.dropHostPositions(ctx, g); err != nil {
		return false, err
	}
	g.ClosedUS = max(r.cfg.Now().UnixMicro(), g.FirstSeenUS)
	kv, err := archive.GapPut(g)
	if err != nil {
		return false, err
	}
	puts := []archive.KV{kv, {Key: archive.AuditKey(g.ID)}}
	if puts, err = r.dropOldGaps(g, puts); err != nil {
		return false, err
	}
	if err := r.submit(ctx, &archive.Unit{Puts: puts}); err != nil {
		return false, err
	}
	r.cfg.Metrics.gapClosed()
	r.set(func(s *Status) { s.Closed++ })
	r.log.Info("gap closed: its repair pass and every replacement it scheduled have finished",
		"gap", g.ID, "kind", g.Kind.String(), "listed", a.Listed, "marked", a.Marked)
	return true, nil
}

// keptClosedGaps is how many closed gaps the store keeps, the newest: the
// history /status counts, and the newest gap, which the next gap id and
// the next scheduled audit follow. An older closed gap matters to nothing,
// and every /readyz probe, scrape and step reads every gap/ row: kept, a
// scheduled audit a day and every outage would be read for ever.
const keptClosedGaps = 100

// dropOldGaps adds to puts, the unit closing g, the deletion of the closed
// gaps older than the newest keptClosedGaps (g among them), at most
// hostDropUnit a unit (a store from a build that kept them all sheds the
// rest as later gaps close). A closed gap's repair is durably done (its
// audit/ rows went in the unit that closed it), so its row can go in any
// later unit; the newest gap is never dropped.
func (r *Runner) dropOldGaps(g archive.Gap, puts []archive.KV) ([]archive.KV, error) {
	gs, err := r.cfg.Store.Gaps()
	if err != nil {
		return nil, err
	}
	var closed []uint64 // oldest first, g not among them
	for _, o := range gs {
		if !o.Open() && o.ID != g.ID {
			closed = append(closed, o.ID)
		}
	}
	over := len(closed) - (keptClosedGaps - 1)
	for _, id := range closed[:max(0, min(over, hostDropUnit))] {
		puts = append(puts, archive.KV{Key: archive.GapKey(id)})
	}
	return puts, nil
}

// errMarkFound stops the look past now at the first outstanding mark.
var errMarkFound = errors.New("an outstanding mark")

// outstanding counts the active, not failed accounts that carry the audit
// mark. Such an account is retryable (active, marked), so the due index's
// repos are the ones to count, and its next attempt is the time of its
// mark: it is due now. So a look counts the repos due now, not the failed
// ones waiting for a later attempt (up to MaxDelay ahead, however many).
// Only when none is due now does it read on past now, stopping at the
// first mark it finds (n is then 1): a mark can lie ahead when a 429
// moved its next attempt to the park's end, or when the clock stepped
// back since it was stamped, and the gap must not close before it is
// fetched. read is the due/ keys the look read.
func (r *Runner) outstanding(nowUS int64) (n int64, read int, err error) {
	marked := func(st archive.RepoState) bool {
		return st.Refetch == archive.RefetchAudit && st.Active && st.Status != archive.StatusFailed
	}
	read, err = r.cfg.Store.ScanRetryable(0, nowUS, func(_ string, st archive.RepoState) error {
		if marked(st) {
			n++
		}
		return nil
	})
	if err != nil || n > 0 {
		return n, read, err
	}
	ahead, err := r.cfg.Store.ScanRetryable(nowUS+1, math.MaxInt64, func(_ string, st archive.RepoState) error {
		if marked(st) {
			return errMarkFound
		}
		return nil
	})
	read += ahead
	if errors.Is(err, errMarkFound) {
		return 1, read, nil
	}
	return 0, read, err
}

// submit applies u through the writer and waits until it is durable; a
// refused unit is a bug, and fatal.
func (r *Runner) submit(ctx context.Context, u *archive.Unit) error {
	u.Acks = r.acks
	if err := r.cfg.Writer.Submit(ctx, u); err != nil {
		return err
	}
	rc, err := r.acks.Wait(ctx, r.cfg.Writer, 1)
	if err != nil {
		return err
	}
	if rc[0].Refused != nil {
		return fmt.Errorf("unit refused: %w", rc[0].Refused)
	}
	return nil
}

func (r *Runner) show(g archive.Gap, a archive.Audit) {
	r.set(func(s *Status) {
		s.Gap, s.Listed, s.Marked = g.ID, a.Listed, a.Marked
		s.Phase = a.Phase.String()
	})
}

func (r *Runner) set(f func(*Status)) {
	r.mu.Lock()
	f(&r.st)
	r.mu.Unlock()
}
