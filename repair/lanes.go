package repair

// lanes.go owns a pass's listings: the relay's listRepos (relay mode), or
// in hosts mode every roster host's own listRepos (all but banned and left
// ones: bootstrap.ListedHosts), each with its own
// durable position, so an account the relay's index misses is compared
// too and a host that cannot be listed fails alone.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/merge"
	"github.com/backstream/backstream/upstream"
)

// lane is one listing of a pass: the relay's (host "", its position the
// pass's own audit/<id>) or one roster host's (audit/<id>/<host>).
type lane struct {
	host string
	pos  *archive.Audit
	// roster is the pass's listed roster hosts (hosts mode; every one but
	// banned and left ones, bootstrap.ListedHosts): an entry about
	// an account whose recorded host is another of them is that host's to
	// tell, not this one's (compare).
	roster map[string]bool
	// mu guards the pass's own position, which every lane of the pass
	// counts into and commits with its own (the roster hosts' lanes run at
	// once).
	mu *sync.Mutex
}

// list walks the pass's listings from their durable positions. It reports
// false when some listing could not be fetched (retries spent): the next
// step resumes it from its durable cursor.
func (r *Runner) list(ctx context.Context, g archive.Gap, a *archive.Audit, seen *listedSet) (bool, error) {
	hosts, err := r.roster(g)
	if err != nil {
		return false, err
	}
	if len(hosts) > 0 {
		done, hostsListed, err := r.listHosts(ctx, g, a, hosts, seen)
		r.set(func(s *Status) { s.Host = "" })
		if err != nil || !done {
			return false, err
		}
		_, tooMany := seen.state()
		if hostsListed > 0 && tooMany == 0 && a.Cursor == "" {
			if err := r.checkAbsent(ctx, g, seen); err != nil {
				return false, err
			}
			a.Phase = archive.AuditDone
			return true, r.commit(ctx, g, a, nil, nil)
		}
		// No host listed anything (every one refused or failing for good):
		// the relay's listing, from the pass's own position, is all there
		// is. A host cut for naming more than its bound: only the relay
		// lists the accounts past the cut. A relay listing already begun
		// (its cursor, the pass's own) is resumed, and a cut made before a
		// restart is read from the host's durable position (cutEarlier).
		r.fallBackToRelay(g, tooMany)
	}
	if done, err := r.listLane(ctx, g, a, &lane{pos: a, mu: new(sync.Mutex)}, seen); err != nil || !done {
		return false, err
	}
	return true, r.checkAbsent(ctx, g, seen)
}

// listHosts walks the listing of each of hosts from its durable position,
// Config.ListWorkers at once: one after another, a roster of tens of
// thousands of hosts would cost as many round trips in a row each pass,
// and each unreachable host its whole retry budget on every step until it
// is cut. It reports whether every listing ended (false: some could not
// be fetched, and the next step resumes it) and the entries the hosts'
// listings named in the pass. The first store or writer failure, or ctx's
// end, stops the others and is returned.
func (r *Runner) listHosts(ctx context.Context, g archive.Gap, a *archive.Audit, hosts []string, seen *listedSet) (done bool, listed uint64, err error) {
	roster := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		roster[h] = true
	}
	var mu sync.Mutex // the pass's position, a
	positions := make([]archive.Audit, len(hosts))
	ended := make([]bool, len(hosts))
	err = merge.EachHost(ctx, hosts, r.cfg.ListWorkers, func(ctx context.Context, i int, h string) error {
		pos, err := r.cfg.Store.AuditHost(g.ID, h)
		switch {
		case errors.Is(err, archive.ErrNotFound):
			pos = archive.Audit{Phase: archive.AuditList}
		case err != nil:
			return err
		}
		ended[i] = true
		if pos.Phase == archive.AuditList {
			r.set(func(s *Status) { s.Host = h })
			ended[i], err = r.listLane(ctx, g, a, &lane{host: h, pos: &pos, roster: roster, mu: &mu}, seen)
		} else {
			err = r.cutEarlier(h, pos, seen)
		}
		positions[i] = pos
		return err
	})
	if err != nil {
		return false, 0, err
	}
	done = true
	for i := range hosts {
		done = done && ended[i]
		listed += positions[i].Listed
	}
	return done, listed, nil
}

// cutEarlier notes host's listing, done at pos, as cut for naming too
// many entries when it listed more than its bound allows: perhaps by a
// process before a restart, which knew of the cut only in memory. (The
// bound counts a page at least one entry, so a listing cut on empty pages
// alone is not seen here; its accounts are compared by the next pass.)
func (r *Runner) cutEarlier(host string, pos archive.Audit, seen *listedSet) error {
	bound, err := bootstrap.ListingBound(r.cfg.Store, host)
	if err != nil {
		return err
	}
	if pos.Listed > uint64(bound) {
		seen.cut(host, true)
	}
	return nil
}

// fallBackToRelay says, once a pass, that the relay's listing is walked
// after the hosts' (counted): no roster host listed anything, or tooMany
// hosts' listings were cut for naming more than their bound.
func (r *Runner) fallBackToRelay(g archive.Gap, tooMany int) {
	r.mu.Lock()
	first := r.fellBack != g.ID
	r.fellBack = g.ID
	r.mu.Unlock()
	if first {
		r.cfg.Metrics.relayFallback()
		r.log.Warn("repair pass: no roster host listed anything (refused, or failing for good), or some host's listing was cut for naming more entries than its bound; the relay's listRepos is compared too",
			"gap", g.ID, "cut_too_many_entries", tooMany)
	}
}

// readRoster reads the relay's listHosts roster when a pass begins in
// hosts mode (Fleet and Roster set, and a roster in the store: a
// hosts-mode bootstrap recorded one; not under Enumerate relay), with
// bootstrap's read and record
// (bootstrap.RereadRoster, as discovery does): the same validation,
// bounds and counting, every entry written to its host/ row through the
// writer (its status and account count, which bounds the host's
// listing), and, when the read was whole, each stored host it no longer
// names marked bootstrap.RosterLeft. So a host that joined the network
// since is listed, one grown is bounded by its new count, one gone or
// banned is not listed. A read that fails (its retries spent, a 501) leaves the rows
// as they were, counted and logged: the pass lists the roster as last
// recorded. Only a store or writer failure is returned.
//
// The roster is read only here, when the pass begins (no position of it
// is durable yet), and only one pass lists at a time, so the hosts a pass
// lists are fixed for the whole pass, across restarts: a pass resumed
// from its positions finds the host/ rows its beginning wrote. A host that
// joins the roster while a pass lists is listed by the next pass; one that
// leaves is still listed by this one (failing, it is cut after
// bootstrap.DefaultHostRetries periods, as any host).
func (r *Runner) readRoster(ctx context.Context, g archive.Gap) error {
	if r.cfg.Fleet == nil || r.cfg.Roster == nil {
		return nil
	}
	rd, err := bootstrap.RereadRoster(ctx, r.cfg.Roster, r.cfg.Writer, r.cfg.Store, r.cfg.Enumerate, bootstrap.RosterOptions{
		PageLimit: bootstrap.RereadPageLimit, Retries: bootstrap.RereadRetries, Logger: r.log,
	})
	if err != nil || rd.Result == "" {
		return err
	}
	r.cfg.Metrics.rosterRead(rd.Result)
	if rd.Result == bootstrap.RosterFailed {
		r.log.Warn("repair pass: the relay's listHosts roster could not be read; the pass lists the roster hosts as last recorded",
			"gap", g.ID, "hosts_recorded", rd.Recorded, "err", rd.Err)
		return nil
	}
	r.log.Info("repair pass: the relay's listHosts roster read", "gap", g.ID, "result", rd.Result,
		"listed", len(rd.Roster.Listed), "skipped_banned", rd.Roster.Skipped, "left", rd.Left)
	return nil
}

// roster is the hosts a pass lists in hosts mode: the store's roster hosts
// but banned and left ones (bootstrap.ListedHosts) when Fleet is set, as the pass's beginning recorded them
// (readRoster). None, and the pass lists the relay, in relay mode (no
// roster, or Enumerate relay) or when that roster gives no host it lists
// an account count in the default mode (bootstrap.ListedHosts: each host's
// listing would be cut at 10,000 entries), that last said once a pass.
func (r *Runner) roster(g archive.Gap) ([]string, error) {
	if r.cfg.Fleet == nil {
		return nil, nil
	}
	hosts, uncounted, err := bootstrap.ListedHosts(r.cfg.Store, r.cfg.Enumerate)
	if err != nil {
		return nil, err
	}
	if uncounted {
		r.listsRelay(g)
	}
	return hosts, nil
}

// listsRelay says, once a pass, that the roster gives no host it lists an
// account count and the relay's listing is compared instead.
func (r *Runner) listsRelay(g archive.Gap) {
	r.mu.Lock()
	first := r.uncounted != g.ID
	r.uncounted = g.ID
	r.mu.Unlock()
	if first {
		r.log.Warn("repair pass: the relay's listHosts roster gives no host it lists an accountCount, so each host's listing could name at most 10,000 entries; the relay's listRepos is compared instead", "gap", g.ID)
	}
}

// listLane compares l's listRepos pages with the ratchet from its
// position on, a unit per page holding the marks, the pass's counts and
// l's position. It reports false when a page could not be fetched and l
// is to be tried again next Period. A host that fails so
// bootstrap.DefaultHostRetries steps in a row is cut like a page that
// cannot be used: it fails alone, counted and logged. So is a listing
// whose cursor repeats one it has been at in this pass (a cycle, which
// would list the same pages forever and hold the gap open). A roster
// host's listing cut so before it listed any entry in the pass (a host
// down, refusing, or whose first page cannot be used) is as a host not
// listed: the pass stays complete (listedSet), and the accounts recorded
// on that host, absent from its listings, are asked of the relay like any
// other absent account. A roster always has hosts down (the relay's
// offline ones among them); were every such cut to make the pass
// incomplete, no pass would check an absent account again.
//
// A roster host's listing names at most upstream.HostListingBound entries
// in a pass (twice the accounts its host/ row says the relay gives it,
// plus 10,000; a page counting at least one): the page that goes past is
// compared and the listing cut after it (upstream.CutTooManyEntries), so
// a listing that never ends, with fresh cursors, cannot hold a gap open;
// the relay's listing is then compared after the hosts' (list).
func (r *Runner) listLane(ctx context.Context, g archive.Gap, a *archive.Audit, l *lane, seen *listedSet) (bool, error) {
	seen.repeats(l.host, l.pos.Cursor) // where it starts (again, after a failed step)
	bound := int64(0)
	if l.host != "" {
		var err error
		if bound, err = bootstrap.ListingBound(r.cfg.Store, l.host); err != nil {
			return false, err
		}
	}
	for l.pos.Phase == archive.AuditList {
		page, err := r.page(ctx, l.host, l.pos.Cursor)
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			if c := upstream.Classify(err); (c == upstream.ClassTransient || c == upstream.ClassRateLimited) && !r.failedAgain(g, l.host) {
				r.logHost(slog.LevelWarn, retryLine, g, l.host, err)
				return false, nil
			}
			r.cutListing(g, l.host, err)
			l.mu.Lock()
			defer l.mu.Unlock()
			if l.host == "" || l.pos.Listed > 0 {
				seen.cut(l.host, false)
			}
			l.pos.Phase = archive.AuditDone
			return true, r.commit(ctx, g, a, l, nil)
		}
		r.listedOK(l.host)
		durable := l.pos.Listed
		seen.add(page.Repos)
		u, err := r.compare(page.Repos, l)
		if err != nil {
			return false, err
		}
		r.cfg.Metrics.page()
		if err := r.record(ctx, g, a, l, seen, page, u, durable, bound); err != nil {
			return false, err
		}
	}
	return true, nil
}

// record counts page, which l listed and whose marks are u, into the
// pass's position and l's, ends l when the page is its last or cuts it
// (a refused cursor, past its bound, a cursor it has been at), and commits
// them with u, under l.mu: the lanes of a pass count into its one position.
func (r *Runner) record(ctx context.Context, g archive.Gap, a *archive.Audit, l *lane, seen *listedSet, page upstream.Page, u *archive.Unit, durable uint64, bound int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	a.Listed += uint64(len(page.Repos))
	a.Marked += uint64(len(u.Repos))
	if l.pos != a {
		l.pos.Listed += uint64(len(page.Repos))
		l.pos.Marked += uint64(len(u.Repos))
	}
	switch {
	case page.CursorRefused > 0:
		r.cutListing(g, l.host, fmt.Errorf("a cursor of %d bytes", page.CursorRefused))
		seen.cut(l.host, false)
		l.pos.Phase = archive.AuditDone
	case page.Cursor == "":
		l.pos.Phase = archive.AuditDone
	case bound > 0 && seen.overBound(l.host, durable, len(page.Repos), bound):
		r.cutListing(g, l.host, fmt.Errorf("the host's listing names more than its bound of %d entries (%s)", bound, upstream.CutTooManyEntries))
		seen.cut(l.host, true)
		l.pos.Phase = archive.AuditDone
	case page.Cursor == l.pos.Cursor || seen.repeats(l.host, page.Cursor):
		r.cutListing(g, l.host, errors.New("the listRepos cursor repeats"))
		seen.cut(l.host, false)
		l.pos.Phase = archive.AuditDone
	default:
		l.pos.Cursor = page.Cursor
	}
	return r.commit(ctx, g, a, l, u)
}

// page is one listRepos page of the relay or of host, with discovery's
// retries (merge.ListPage, merge.HostListPage).
func (r *Runner) page(ctx context.Context, host, cursor string) (upstream.Page, error) {
	if host == "" {
		return merge.ListPage(ctx, r.cfg.Sleep, r.cfg.Source, cursor)
	}
	return merge.HostListPage(ctx, r.cfg.Sleep, r.cfg.Fleet, host, cursor)
}

// failedAgain counts a step in which host's listing failed transiently
// and reports whether it has now failed bootstrap.DefaultHostRetries steps
// in a row (the relay's listing is never given up: it is the only one).
func (r *Runner) failedAgain(g archive.Gap, host string) bool {
	if host == "" {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing == nil || r.failingGap != g.ID {
		r.failing, r.failingGap = map[string]int{}, g.ID
	}
	r.failing[host]++
	return r.failing[host] > bootstrap.DefaultHostRetries
}

// listedOK forgets host's failed steps.
func (r *Runner) listedOK(host string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.failing, host)
}

// The lines of a listing's failed step and of its cut.
const (
	retryLine = "repair pass: listRepos failed; trying again later from the same page"
	cutLine   = "repair pass: a listRepos page cannot be used; that listing ends here and accounts it lists after it are not compared"
)

func (r *Runner) cutListing(g archive.Gap, host string, err error) {
	r.cfg.Metrics.cut()
	r.logHost(slog.LevelError, cutLine, g, host, err)
}

// hostLogEvery bounds the lines of roster hosts' failed steps and cuts:
// on the real network thousands of hosts are down, and every pass lists
// every one (each failure is counted: the cut in
// backstream_repair_listing_cut_total, a failed try in
// backstream_upstream_requests_total).
const hostLogEvery = time.Minute

// logHost logs msg about host's listing in g's pass at level: the relay's
// listing ("") each time, a roster host's at most once a minute per msg
// across hosts, with how many occurrences the line stands for.
func (r *Runner) logHost(level slog.Level, msg string, g archive.Gap, host string, err error) {
	args := []any{"gap", g.ID, "host", host, "err", err}
	if host == "" {
		r.log.Log(context.Background(), level, msg, args...)
		return
	}
	r.lines.Log(r.log, level, msg, msg, args...)
}

// hostDropUnit bounds the audit/<id>/<host> deletions of one unit, and the
// closed gaps' gap/ rows one gap's closing deletes (dropOldGaps).
const hostDropUnit = 1024

// dropHostPositions deletes g's per-host positions before g closes (its
// own position goes in the closing unit): a crash in between leaves the
// pass done, and closing again finds fewer rows to drop.
func (r *Runner) dropHostPositions(ctx context.Context, g archive.Gap) error {
	keys, err := r.cfg.Store.AuditHostKeys(g.ID)
	if err != nil {
		return err
	}
	for chunk := range slices.Chunk(keys, hostDropUnit) {
		puts := make([]archive.KV, len(chunk))
		for i, k := range chunk {
			puts[i] = archive.KV{Key: k}
		}
		if err := r.submit(ctx, &archive.Unit{Puts: puts}); err != nil {
			return err
		}
	}
	return nil
}
