package merge

// discovery.go owns post-bootstrap discovery (M6): list repos again from the
// last non-empty listRepos cursor and record every DID the store does not
// know as a failed repo due for a fetch (the retry runner's candidate).

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/internal/crashpoint"
	"github.com/backstream/backstream/upstream"
	"golang.org/x/sync/errgroup"
)

// discoveryRetries bounds the retries of one discovery page.
const discoveryRetries = 5

// HostLister lists one host's own repos (hosts-mode discovery);
// upstream.Client is one.
type HostLister interface {
	HostListRepos(ctx context.Context, host, cursor string, limit int) (upstream.Page, error)
}

var _ HostLister = (*upstream.Client)(nil)

// listFunc asks for one listRepos page, the relay's or one host's.
type listFunc func(ctx context.Context, cursor string, limit int) (upstream.Page, error)

// laneCut is a listing discovery could not finish: why, after how many
// pages, and the error.
type laneCut struct {
	reason string
	pages  int
	err    error
}

// Discover lists repos from the last non-empty listRepos cursor and records
// every DID the store does not know as a failed repo due now. It uses the
// bootstrap's mode: with a roster in the store (a hosts-mode bootstrap read
// listHosts) and cfg.Fleet set, the roster is read again (rereadRoster),
// every roster host but banned and left ones (bootstrap.ListedHosts) is
// listed again from its own last non-empty
// cursor, from the start when it has none (discoverHosts), and the relay's
// listRepos is not asked; else the relay's, also when the roster now gives
// no host it lists an account count (bootstrap.ListedHosts, in the default
// mode: bootstrap's rule), and always under cfg.Enumerate relay, which
// reads no roster (bootstrap.RereadRoster, ListedHosts). It never fails merge for
// upstream trouble: a cursor loop ends discovery with a warning,
// a page it cannot use (retries spent, a cursor over 64 KiB after the
// page's repos are recorded) with an error log and a count (M8). Only a store or writer failure is
// returned. A nil cfg.Source (and no roster) discovers nothing.
func Discover(ctx context.Context, cfg Config) error {
	cfg.defaults()
	if cfg.Fleet != nil {
		if err := rereadRoster(ctx, cfg); err != nil {
			return fmt.Errorf("merge: discovery: %w", err)
		}
		hosts, uncounted, err := bootstrap.ListedHosts(cfg.Store, cfg.Enumerate)
		if err != nil {
			return fmt.Errorf("merge: discovery: %w", err)
		}
		if uncounted {
			cfg.Logger.Warn("discovery: the relay's listHosts roster gives no host it lists an accountCount, so each host's listing could name at most 10,000 entries; the relay's listRepos is listed instead")
		}
		if len(hosts) > 0 {
			return discoverHosts(ctx, cfg, hosts)
		}
	}
	if cfg.Source == nil {
		return nil
	}
	d := newDiscovery(cfg)
	if err := d.relay(ctx); err != nil {
		return err
	}
	return d.finish(ctx)
}

// rereadRoster reads the relay's listHosts roster again when discovery
// begins after a hosts-mode bootstrap (cfg.Roster set, a roster in the
// store, cfg.Enumerate not relay), with bootstrap.RereadRoster, as every repair pass does: a
// bootstrap may run for days, and a host that joined the network since
// its read holds accounts no firehose event announced (those that existed
// before it joined). Listed now, they are fetched before steady state,
// not at the first audit a day later. A host grown since is bounded by
// its new count; one a whole read no longer names is marked left and not
// listed. A read that fails leaves the host/ rows as bootstrap recorded
// them (counted, one WARN) and discovery lists those.
func rereadRoster(ctx context.Context, cfg Config) error {
	if cfg.Roster == nil {
		return nil
	}
	rd, err := bootstrap.RereadRoster(ctx, cfg.Roster, cfg.Writer, cfg.Store, cfg.Enumerate, bootstrap.RosterOptions{
		PageLimit: bootstrap.RereadPageLimit, Retries: bootstrap.RereadRetries, Logger: cfg.Logger.With("component", "discovery"),
	})
	if err != nil || rd.Result == "" {
		return err
	}
	cfg.Metrics.discoveryRosterRead(rd.Result)
	if rd.Result == bootstrap.RosterFailed {
		cfg.Logger.Warn("discovery: the relay's listHosts roster could not be read; discovery lists the roster hosts as bootstrap recorded them",
			"hosts_recorded", rd.Recorded, "err", rd.Err)
		return nil
	}
	cfg.Logger.Info("discovery: the relay's listHosts roster read", "result", rd.Result,
		"listed", len(rd.Roster.Listed), "skipped_banned", rd.Roster.Skipped, "left", rd.Left)
	return nil
}

// relay lists the relay's listRepos from its last non-empty cursor.
func (d *discovery) relay(ctx context.Context) error {
	cfg := d.cfg
	cursor, err := resumeAt(cfg.Store.ListCursor(true))
	if err != nil {
		return err
	}
	relay := func(ctx context.Context, c string, _ int) (upstream.Page, error) {
		return ListPage(ctx, cfg.Sleep, cfg.Source, c)
	}
	lc, err := d.lane(ctx, cursor, 0, relay)
	if err != nil {
		return err
	}
	switch {
	case lc == nil:
	case lc.reason == cutLoop:
		cfg.Logger.Warn("discovery: the relay's listRepos cursor repeats; discovery ends here", "pages", lc.pages)
	default:
		cut(cfg, lc.reason, lc.pages, lc.err)
	}
	return nil
}

// resumeAt is where a listing is resumed from its last non-empty cursor:
// the start when there is none.
func resumeAt(last archive.ListCursor, err error) (string, error) {
	if errors.Is(err, archive.ErrNotFound) {
		return "", nil
	}
	return last.Cursor, err
}

// cutLoop is the laneCut reason of a repeating cursor.
const cutLoop = "cursor_loop"

// discoverHosts lists every host of the roster again from its own last
// non-empty cursor (cursor/hostlist_last/<host>; from the start when it has
// none), cfg.ListWorkers hosts at once: one at a time, a roster of tens of
// thousands of hosts would cost as many round trips in a row, and each
// unreachable host its whole retry budget, before merge completes. A host
// whose listing cannot be used fails alone: counted by reason in
// backstream_discovery_cut_total, the others go on, and one warning names
// how many failed and the first of them in roster order. The relay's
// listRepos is listed after them (the relay fallback, counted) when every
// host failed, or when some host's listing was cut for naming more entries
// than its bound (too_many_entries): the accounts it lists past the cut
// are listed by no other host.
func discoverHosts(ctx context.Context, cfg Config, hosts []string) error {
	d := newDiscovery(cfg)
	cuts, err := d.hosts(ctx, hosts)
	if err != nil {
		return err
	}
	var failed []laneCut
	var failedHosts []string
	tooMany := 0
	for i, lc := range cuts {
		if lc == nil {
			continue
		}
		cfg.Metrics.discoveryCut(lc.reason)
		failed = append(failed, *lc)
		failedHosts = append(failedHosts, hosts[i])
		if lc.reason == upstream.CutTooManyEntries {
			tooMany++
		}
	}
	if len(failed) > 0 {
		cfg.Logger.Warn("discovery: some hosts' listRepos could not be used; each failed alone, every other host was listed, merge completes; accounts those hosts list after their last page are not recorded",
			"failed_hosts", len(failed), "hosts", len(hosts), "first", failedHosts[0], "reason", failed[0].reason, "pages", failed[0].pages, "err", failed[0].err)
	}
	if (len(failed) == len(hosts) || tooMany > 0) && cfg.Source != nil {
		// Every host refused or failing: the relay's listing is all there
		// is; a host cut for too many entries: only the relay lists the
		// rest of it.
		cfg.Metrics.discoveryRelayFallback()
		cfg.Logger.Warn("discovery: no roster host could be listed, or some host's listing was cut for naming more entries than its bound; the relay's listRepos is listed too",
			"hosts", len(hosts), "failed_hosts", len(failed), "cut_too_many_entries", tooMany)
		if err := d.relay(ctx); err != nil {
			return err
		}
	}
	return d.finish(ctx)
}

// hosts lists each of hosts (host), cfg.ListWorkers at once, and returns
// why each listing ended early, by the host's index (nil: it ended). The
// first store or writer failure, or ctx's end, stops the others and is
// returned.
func (d *discovery) hosts(ctx context.Context, hosts []string) ([]*laneCut, error) {
	cuts := make([]*laneCut, len(hosts))
	err := EachHost(ctx, hosts, d.cfg.ListWorkers, func(ctx context.Context, i int, h string) error {
		lc, err := d.host(ctx, h)
		cuts[i] = lc
		return err
	})
	return cuts, err
}

// EachHost calls fn for each of hosts with its index, workers at once: how
// discovery and a repair pass list the roster hosts (one after another, a
// roster of tens of thousands of hosts would cost as many round trips in
// a row). The first error fn returns ends the ctx of the others and is
// returned; so is ctx's end.
func EachHost(ctx context.Context, hosts []string, workers int, fn func(ctx context.Context, i int, host string) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(workers)
	for i, h := range hosts {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return fn(gctx, i, h) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// host lists one roster host from its last non-empty cursor, bounded by
// the account count its host/ row holds (lane).
func (d *discovery) host(ctx context.Context, h string) (*laneCut, error) {
	cfg := d.cfg
	cursor, err := resumeAt(cfg.Store.HostListLast(h))
	if err != nil {
		return nil, fmt.Errorf("merge: discovery: %w", err)
	}
	bound, err := bootstrap.ListingBound(cfg.Store, h)
	if err != nil {
		return nil, fmt.Errorf("merge: discovery: %w", err)
	}
	list := func(ctx context.Context, c string, _ int) (upstream.Page, error) {
		return HostListPage(ctx, cfg.Sleep, cfg.Fleet, h, c)
	}
	return d.lane(ctx, cursor, bound, list)
}

// discovery is one discovery pass: the units it submitted and what it
// found, counted by every listing it runs at once.
type discovery struct {
	cfg  Config
	acks *archive.Acks

	mu             sync.Mutex
	pending, found int
}

func newDiscovery(cfg Config) *discovery { return &discovery{cfg: cfg, acks: archive.NewAcks()} }

// lane pages one listing from cursor and records the DIDs the store does
// not know. It returns why the listing ended early (nil: it ended), and
// only a writer failure or the context's end as an error. A host's
// listing names at most bound entries (upstream.HostListingBound, a page
// counting at least one; 0, the relay's: no bound), then is cut after the
// page that spent it (upstream.CutTooManyEntries).
func (d *discovery) lane(ctx context.Context, cursor string, bound int64, list listFunc) (*laneCut, error) {
	cfg := d.cfg
	var seen upstream.CursorSet // 16 bytes a cursor, however long
	var named int64
	for pages := 0; ; pages++ {
		if seen.Repeats(cursor) {
			return &laneCut{reason: cutLoop, pages: pages, err: errors.New("the listRepos cursor repeats")}, nil
		}
		page, err := list(ctx, cursor, 1000)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return &laneCut{reason: upstream.CutReason(err), pages: pages, err: err}, nil
		}
		var ups []archive.RepoUpdate
		now := cfg.Now().UnixMicro()
		for _, e := range page.Repos {
			active, status := e.Active, e.Status // the status cut by upstream
			ups = append(ups, archive.RepoUpdate{DID: e.DID, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
				if exists {
					return cur, false
				}
				return archive.RepoState{
					Status: archive.StatusFailed, Active: active, AccountStatus: status,
					Refetch: archive.RefetchDiscovered, NextAttemptUS: now, ErrClass: "discovered",
				}, true
			}})
		}
		if len(ups) > 0 {
			if err := cfg.Writer.Submit(ctx, &archive.Unit{Repos: ups, Acks: d.acks}); err != nil {
				return nil, err
			}
			d.mu.Lock()
			d.pending++
			d.found += len(ups)
			d.mu.Unlock()
		}
		if page.CursorRefused > 0 {
			return &laneCut{reason: upstream.CutCursorTooLong, pages: pages + 1, err: fmt.Errorf("a cursor of %d bytes", page.CursorRefused)}, nil
		}
		if page.Cursor == "" || page.Cursor == cursor {
			return nil, nil
		}
		if named += int64(max(len(page.Repos), 1)); bound > 0 && named > bound {
			return &laneCut{reason: upstream.CutTooManyEntries, pages: pages + 1,
				err: fmt.Errorf("the host's listing named %d entries, more than its bound of %d", named, bound)}, nil
		}
		cursor = page.Cursor
	}
}

// finish waits until every submitted unit is durable.
func (d *discovery) finish(ctx context.Context) error {
	cfg := d.cfg
	rc, err := d.acks.Wait(ctx, cfg.Writer, d.pending)
	for _, r := range rc {
		if r.Refused != nil {
			return fmt.Errorf("merge: discovery: unit refused: %w", r.Refused)
		}
		cfg.Crash.Hit(crashpoint.DiscoveryPage)
	}
	if err != nil {
		return fmt.Errorf("merge: discovery: %w", err)
	}
	cfg.Logger.Info("discovery finished", "listed", d.found)
	return nil
}

// cut ends discovery at a page it cannot use, once: counted by reason and
// logged. Merge completes; the accounts the relay would list after that
// page are not recorded (the live firehose still archives their events).
func cut(cfg Config, reason string, pages int, err error) {
	cfg.Metrics.discoveryCut(reason)
	cfg.Logger.Error("discovery: a listRepos page cannot be used; discovery ends here, merge completes; accounts listed after it are not recorded",
		"reason", reason, "pages", pages, "err", err)
}

// ListPage fetches one listRepos page (discovery, the repair pass), retrying a transient or rate-limited failure
// discoveryRetries times, 0.5 s doubling (internal/backoff's jitter, capped
// at 16 s; a longer Retry-After wins), each wait taken with sleep
// (backoff.Sleep, or a test's). It returns the last error once they
// are spent, with no wait after the last attempt, and any other error at
// once: a malformed or oversized page or a 4xx is the same bytes again.
func ListPage(ctx context.Context, sleep func(ctx context.Context, d time.Duration) error, src upstream.RepoSource, cursor string) (upstream.Page, error) {
	return listWithRetries(ctx, sleep, src.ListRepos, cursor)
}

// HostListPage is ListPage over host's own listRepos (hosts mode).
func HostListPage(ctx context.Context, sleep func(ctx context.Context, d time.Duration) error, fleet HostLister, host, cursor string) (upstream.Page, error) {
	return listWithRetries(ctx, sleep, func(ctx context.Context, c string, n int) (upstream.Page, error) {
		return fleet.HostListRepos(ctx, host, c, n)
	}, cursor)
}

// listWithRetries is ListPage over any listing (the relay's, a host's).
func listWithRetries(ctx context.Context, sleep func(ctx context.Context, d time.Duration) error, list listFunc, cursor string) (upstream.Page, error) {
	bo := backoff.Policy{Base: 500 * time.Millisecond, Max: 16 * time.Second}
	for retry := 0; ; retry++ {
		p, err := list(ctx, cursor, 1000)
		if err == nil || retry == discoveryRetries || !retryable(err) {
			return p, err
		}
		wait := max(bo.Draw(retry, nil), upstream.RetryAfter(err))
		if err := sleep(ctx, wait); err != nil {
			return p, err
		}
	}
}

// retryable says whether the same listRepos request may answer differently
// soon: a transient failure or a 429.
func retryable(err error) bool {
	c := upstream.Classify(err)
	return c == upstream.ClassTransient || c == upstream.ClassRateLimited
}
