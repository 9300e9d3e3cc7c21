package bootstrap

// enumerate.go owns enumeration: listRepos pages with limit 1000 from the
// last durable checkpoint (E1), each page's new DIDs made durable as
// not_started (inactive ones with active=false, never dispatched: E12) in
// one unit before any of them is dispatched (R7), the enumeration window,
// cursor-loop detection, the listing cut short by a page it cannot use, and
// the debug modes (E13).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/upstream"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// pageMsg is a page whose new repos are durable, handed to the coordinator.
type pageMsg struct {
	host       string // the PDS host listed (fleet mode); "" for the relay
	reqCursor  string
	next       string
	final      bool
	entries    int
	cut        bool // the listing ended early at this page (cutListing)
	weight     int64
	dispatch   []string // shuffled; each already in b.inflight
	fresh      []string // the dispatched repos the store does not know yet
	discovered int
}

// enumerate pages listRepos (the relay's, or r's host's own) from
// r.cursor until the listing ends, holding window credit (r.window) for
// every entry of every page not yet checkpointed. When the listing was cut
// short it returns why (upstream.CutReason), r.cursor left at the page it
// was cut at. A host's page that failed with retries left returns the wait
// before its next try instead (r.cursor at that page, r.tries its retries
// so far), and so does one of a host whose announced rate limit is spent
// (the wait before its reset, no try spent): the caller parks the lane
// rather than hold its runner, or a request slot, for it.
//
// r.left, when not nil, is what a host's listing may still name in this
// run (upstream.HostListingBound, each page counting at least one): the
// page that spends it is recorded and the listing is cut after it
// (upstream.CutTooManyEntries), so a host whose listing never ends cannot
// hold bootstrap for ever.
func (b *Bootstrap) enumerate(ctx context.Context, r *laneRun, out chan<- *pageMsg) (cutReason string, retryIn time.Duration, err error) {
	cfg := &b.cfg
	host, cursor, left, window := r.host, r.cursor, r.left, r.window
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5eed))
	r.seen.Repeats(cursor)
	listed := 0
	// Until a first page arrives, a listing that has never listed anything
	// waits for the relay rather than ending empty.
	// A host of the fleet is never waited for: it fails alone.
	patient := cursor == "" && host == ""
	for {
		r.cursor = cursor
		pg, wait, err := b.listPage(ctx, r, cursor, patient)
		switch {
		case err != nil && ctx.Err() != nil:
			return "", 0, ctx.Err()
		case err != nil:
			r.tries = pageTries{}
			reason := upstream.CutReason(err)
			return reason, 0, b.cutListing(ctx, host, cursor, reason, err, out)
		case wait > 0:
			return "", wait, nil
		}
		r.tries = pageTries{}
		b.hosts().listed(host)
		patient = false
		cfg.Metrics.page()
		next, final := pg.Cursor, pg.Cursor == ""
		cut := ""
		if left != nil {
			*left -= int64(max(len(pg.Repos), 1))
		}
		switch {
		case pg.CursorRefused > 0:
			final, cut = true, upstream.CutCursorTooLong
		case !final && left != nil && *left < 0:
			final, cut = true, upstream.CutTooManyEntries
		case !final && (next == cursor || r.seen.Repeats(next)):
			cfg.Metrics.loop()
			b.warnHost(host, "loop", loopLine, "host", host, "cursor_bytes", len(next))
			next, final = "", true
		}
		entries := pg.Repos
		if cfg.MaxRepos > 0 {
			if left := cfg.MaxRepos - listed; len(entries) >= left {
				entries = entries[:left]
				final = true
				next = ""
			}
			listed += len(entries)
		}
		weight, err := window.acquire(ctx, len(entries))
		if err != nil {
			return "", 0, err
		}
		msg, err := b.record(ctx, host, entries, true, rng)
		if err != nil {
			window.release(weight)
			return "", 0, err
		}
		msg.host, msg.reqCursor, msg.next, msg.final, msg.weight = host, cursor, next, final, weight
		switch cut {
		case upstream.CutCursorTooLong:
			msg.cut = true
			b.logCut(host, cursor, cut, fmt.Errorf("a cursor of %d bytes (at most %d)", pg.CursorRefused, archive.MaxListCursor))
		case upstream.CutTooManyEntries:
			msg.cut = true
			b.logCut(host, cursor, cut, errors.New("the host's listing names more entries than twice the accounts the relay's roster gives it, plus 10,000"))
		}
		select {
		case out <- msg:
		case <-ctx.Done():
			window.release(weight)
			return "", 0, ctx.Err()
		}
		if final {
			return cut, 0, nil
		}
		cursor = next
	}
}

// loopLine says a listing's cursor repeated: the listing ends there.
const loopLine = "bootstrap: listRepos returned a cursor it had already returned; the listing ends here as if this were the last page"

// cutListing ends the listing at the page requested with cursor, which
// could not be used (reason, err): an empty last page marked cut, so the
// checkpoint stays at cursor (watermark.advance) and bootstrap goes on with
// what it listed. Upstream data is never fatal.
func (b *Bootstrap) cutListing(ctx context.Context, host, cursor, reason string, err error, out chan<- *pageMsg) error {
	b.logCut(host, cursor, reason, err)
	select {
	case out <- &pageMsg{host: host, reqCursor: cursor, final: true, cut: true}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// logRetry says a page try failed and will be retried. The relay's each
// time; a fleet host's at most once a minute across hosts (hostCutLogEvery),
// with the occurrences the line stands for: on the real network thousands of
// hosts are down, and each fails every try (every one is counted in
// backstream_listrepos_errors_total).
func (b *Bootstrap) logRetry(host, class string, wait time.Duration, err error) {
	b.warnHost(host, "page_retry", "bootstrap: listRepos failed; retrying", "host", host, "class", class, "wait", wait, "err", err)
}

// warnHost logs msg at WARN about host's listing: the relay's each time, a
// fleet host's at most once a minute per key across hosts
// (hostCutLogEvery), with the occurrences the line stands for. On the
// real network thousands of hosts are down or broken; every occurrence is
// counted in a metric.
func (b *Bootstrap) warnHost(host, key, msg string, args ...any) {
	f := b.hosts()
	if host == "" || f == nil {
		b.cfg.Logger.Warn(msg, args...)
		return
	}
	f.lines.Log(b.cfg.Logger, slog.LevelWarn, key, msg, args...)
}

// logCut counts a listing cut short and says so, once per listing (a
// fleet host's: fleet.go).
func (b *Bootstrap) logCut(host, cursor, reason string, err error) {
	b.cfg.Metrics.cut(reason)
	if host != "" {
		b.hosts().cut(b.cfg.Logger, host, reason, err)
		return
	}
	b.prog.set(func(p *Progress) { p.ListingCut = reason })
	b.cfg.Logger.Error("bootstrap: the listing ends early: a listRepos page cannot be used; bootstrap goes on with the repos listed so far, "+
		"and discovery lists again from this page after bootstrap",
		"reason", reason, "cursor_bytes", len(cursor), "err", err)
}

// listed is the --repos mode: exactly the named DIDs, in order, as one page
// that ends the listing. No cursor is read or written.
func (b *Bootstrap) listed(ctx context.Context, out chan<- *pageMsg) error {
	entries := make([]upstream.RepoEntry, 0, len(b.cfg.Repos))
	for _, d := range b.cfg.Repos {
		if _, err := syntax.ParseDID(d); err != nil {
			return fmt.Errorf("bootstrap: --repos: %q: %w", d, err)
		}
		entries = append(entries, upstream.RepoEntry{DID: d, Active: true})
	}
	msg, err := b.record(ctx, "", entries, false, nil)
	if err != nil {
		return err
	}
	msg.final = true
	select {
	case out <- msg:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// record decides every entry of a page against the store, makes the new
// and flipped states durable in one unit, and returns the repos to
// dispatch (shuffled when rng is set, else in page order).
func (b *Bootstrap) record(ctx context.Context, host string, entries []upstream.RepoEntry, shuffle bool, rng *rand.Rand) (*pageMsg, error) {
	msg := &pageMsg{entries: len(entries)}
	// An active entry listedAgain lets through is reserved in the in-flight
	// set for this page: released at once when it is not dispatched, and
	// with the dispatched ones when the page fails.
	recorded := false
	defer func() {
		for i := 0; !recorded && i < len(msg.dispatch); i++ {
			b.release(msg.dispatch[i])
		}
	}()
	var ups []archive.RepoUpdate
	inPage := make(map[string]struct{}, len(entries))
	newInactive := 0
	for _, e := range entries {
		if _, dup := inPage[e.DID]; dup {
			continue
		}
		inPage[e.DID] = struct{}{}
		// In flight first, then the store: a job removes its DID from the
		// in-flight set only after its terminal state is durable, so a DID
		// absent from the set is either new or visible as terminal below.
		// An active one is now reserved for this page (listedAgain).
		if b.listedAgain(ctx, host, e) {
			continue
		}
		st, err := b.cfg.Store.RepoState(e.DID)
		switch {
		case errors.Is(err, archive.ErrNotFound):
			if e.Active {
				// Made durable as not_started just before dispatch (the
				// coordinator's recorder): until then a crash simply
				// lists it again, since its page is not checkpointed.
				msg.dispatch = append(msg.dispatch, e.DID)
				msg.fresh = append(msg.fresh, e.DID)
			} else {
				ups = append(ups, archive.RepoUpdate{DID: e.DID, Func: discovered(false, e.Status)})
				newInactive++
			}
		case err != nil:
			if e.Active {
				b.release(e.DID)
			}
			return nil, fmt.Errorf("bootstrap: read %s: %w", e.DID, err)
		case Foreign(b.rosterSet, host, st.Host):
			// Fetched from another roster host: this host's word on it
			// (taken down, deactivated) is not the account's.
			if e.Active {
				b.release(e.DID)
			}
			b.cfg.Metrics.doubleListed(AttributedForeign)
		default:
			if st.Active != e.Active {
				// E12: a flip preserves the row; only activity changes.
				ups = append(ups, archive.RepoUpdate{DID: e.DID, Func: flipped(e.Active, e.Status)})
			}
			// An inactive not_started repo was never dispatched; active
			// now, it has no rows and can be fetched in this run.
			switch {
			case st.Status == archive.StatusNotStarted && e.Active:
				msg.dispatch = append(msg.dispatch, e.DID)
			case e.Active:
				b.release(e.DID) // known, not to be fetched again
			}
		}
	}
	if len(ups) > 0 {
		if err := applyUnit(ctx, b.cfg.Writer, &archive.Unit{Repos: ups}); err != nil {
			return nil, fmt.Errorf("bootstrap: record page: %w", err)
		}
		b.cfg.Crash.Hit(crashpoint.BootstrapEnqueued)
	}
	b.cfg.Metrics.discover(0, newInactive)
	msg.discovered = newInactive
	if shuffle && rng != nil {
		Shuffle(msg.dispatch, rng)
	}
	recorded = true
	return msg, nil
}

// writeNotStarted makes a batch of active repos durable as not_started
// (those already known are left alone) before any of them is dispatched.
func (b *Bootstrap) writeNotStarted(ctx context.Context, dids []string) error {
	ups := make([]archive.RepoUpdate, len(dids))
	for i, d := range dids {
		ups[i] = archive.RepoUpdate{DID: d, Func: discovered(true, "")}
	}
	if err := applyUnit(ctx, b.cfg.Writer, &archive.Unit{Repos: ups}); err != nil {
		return fmt.Errorf("bootstrap: record repos: %w", err)
	}
	b.cfg.Crash.Hit(crashpoint.BootstrapEnqueued)
	return nil
}

// discovered is the writer-side mutation recording a new repo; it writes
// nothing if the repo appeared meanwhile.
func discovered(active bool, status string) func(archive.RepoState, bool) (archive.RepoState, bool) {
	return func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		if exists {
			return cur, false
		}
		st := archive.RepoState{Status: archive.StatusNotStarted, Active: active}
		if !active {
			st.AccountStatus = status // cut by upstream
		}
		return st, true
	}
}

// flipped changes only a repo's activity (and its upstream status).
func flipped(active bool, status string) func(archive.RepoState, bool) (archive.RepoState, bool) {
	return func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		if !exists || cur.Active == active {
			return cur, false
		}
		cur.Active = active
		cur.AccountStatus = ""
		if !active {
			cur.AccountStatus = status
		}
		return cur, true
	}
}

// pageTries is what a page's listPage calls have retried so far: the
// ordinary and the 429 budgets spent, and whether the patient listing has
// said it keeps retrying past them. A lane keeps it while parked between
// tries; a page listed or given up on starts the next at zero.
type pageTries struct {
	ordinary, limited int
	overtime          bool
}

// listPage fetches one page of r's lane, from cursor, with retries:
// transient errors get ListRetries retries with getRepo's ordinary backoff
// (1 s doubling to 30 s, the internal/backoff jitter), 429s the getRepo
// 429 budget and its server-directed waits. It returns the error it gives up on: at once for
// one that retrying will not change (a malformed or oversized page, a 4xx),
// else when the budget is spent — the caller cuts the listing there. A
// patient call (nothing listed yet) never gives up on a transient failure
// or a 429: it keeps retrying at the longest wait, since ending a listing
// that has listed nothing would archive nothing.
//
// The relay's listing (host "") sleeps between its tries here; a host's
// returns after one failed try with the wait before the next (never 0;
// r.tries counts the tries across calls), so its lane waits parked,
// holding no runner (lanes.go): with many hosts down, their waits would
// otherwise hold every runner while healthy hosts wait to be begun. A
// host whose announced rate limit is spent returns the wait before its
// reset before it is asked (listOnce), counting no try.
func (b *Bootstrap) listPage(ctx context.Context, r *laneRun, cursor string, patient bool) (upstream.Page, time.Duration, error) {
	cfg := &b.cfg
	host, t := r.host, &r.tries
	bo := backoff.Policy{Base: backfill.DefaultBackoffBase, Max: backfill.DefaultBackoffMax}
	for {
		pg, paced, err := b.listOnce(ctx, r, cursor)
		switch {
		case paced > 0:
			return upstream.Page{}, paced, nil // the host's reset: no try spent
		case err == nil:
			return pg, 0, nil
		}
		if ctx.Err() != nil {
			return upstream.Page{}, 0, ctx.Err()
		}
		class := upstream.Classify(err)
		cfg.Metrics.listError(class.String())
		var wait time.Duration
		switch class {
		case upstream.ClassRateLimited:
			wait = upstream.RetryAfter(err)
			if wait <= 0 {
				wait = bo.Draw(t.limited, nil)
			}
			t.limited++
		case upstream.ClassTransient:
			wait = bo.Draw(t.ordinary, nil)
			t.ordinary++
		default:
			return upstream.Page{}, 0, fmt.Errorf("bootstrap: listRepos: %w", err)
		}
		switch {
		case t.ordinary <= cfg.ListRetries && t.limited <= backfill.DefaultRateLimitRetries:
			b.logRetry(host, class.String(), wait, err)
		case !patient:
			return upstream.Page{}, 0, fmt.Errorf("bootstrap: listRepos: retries spent: %w", err)
		case !t.overtime:
			t.overtime = true
			cfg.Logger.Error("bootstrap: listRepos keeps failing before anything was listed; retrying until the relay answers (not logged again)",
				"class", class.String(), "wait", wait, "err", err)
		}
		if host != "" {
			return upstream.Page{}, wait, nil
		}
		if err := cfg.Sleep(ctx, wait); err != nil {
			return upstream.Page{}, 0, err
		}
	}
}
