package bootstrap

// roster.go owns the relay's listHosts roster: reading it (paged, retried,
// bounded, a cursor loop ended) and recording it in host/ rows. A fleet
// bootstrap reads it before its lanes start; discovery (package merge) and
// every hosts-mode repair pass (package repair) read it again before they
// list (RereadRoster), through the same two functions, so all of them
// validate, bound and count a roster alike.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/upstream"
)

// RosterSource reads the relay's listHosts roster (upstream.Client).
type RosterSource interface {
	ListHosts(ctx context.Context, cursor string, limit int) (upstream.HostsPage, error)
}

var _ RosterSource = (*upstream.Client)(nil)

// RosterLeft is the roster status recorded for a host whose host/ row
// holds a roster entry but that a whole roster read no longer names: a
// host that left the network (or that the relay no longer serves). It is
// not listable, so no listing asks it. It is backstream's own word, never
// the relay's: a relay status "left" is stored RosterOther (rosterStatus).
const RosterLeft = "left"

// RosterBanned is the roster status of a host the relay banned: the one
// status of listHosts whose host no listing asks.
const RosterBanned = "banned"

// listable reports whether a listing lists a roster host of status, a
// status as stored (rosterStatus of the relay's word, or RosterLeft):
// every host but a banned one and one that left the roster (RosterLeft).
// Idle (the relay dropped its subscription: the host answered
// FutureCursor, a PDS whose sequence was reset), offline (the relay
// cannot reach it) and throttled (the relay rate-limits it) are hosts the
// relay still indexes, whose accounts no other listing names in hosts mode
// (the firehose never names an idle host's accounts), as the reference
// relay's own listRepos and roster copy do. A word listHosts does not name (the lexicon's statuses are
// open; RosterOther as recorded) is listed too: a new word is more likely
// a state of a working host than a ban, and a host that cannot be listed
// only fails alone. Bootstrap, discovery, every repair pass and its
// foreign-host rule all go by it (ReadRoster, ListedFrom).
func listable(status string) bool {
	return status != RosterBanned && status != RosterLeft
}

// RosterOptions configures ReadRoster.
type RosterOptions struct {
	// PageLimit is the listHosts page size asked for.
	PageLimit int
	// Retries bounds the retries of one page's transient failures (429s
	// have backfill.DefaultRateLimitRetries); a 501 is not retried.
	Retries int
	// MaxHosts bounds the hosts, and the pages, read (0: 1,000,000).
	MaxHosts int
	// Sleep waits between retries (backoff.Sleep when nil).
	Sleep func(ctx context.Context, d time.Duration) error
	// Logger gets the retry, loop and cut lines (slog.Default when nil);
	// the caller's component names who read.
	Logger *slog.Logger
	// Loop and Cut count a roster ended by a repeating cursor, and one cut
	// at MaxHosts with a cursor pending (by reason); nil: not counted.
	Loop func()
	Cut  func(reason string)
}

// Roster is the roster as listHosts gave it.
type Roster struct {
	Listed  []string             // the hosts listed (listable: all but banned), deduplicated, in the order listings begin them (sorted)
	Entries []upstream.HostEntry // every entry (the first of a host listed twice), its status as stored (rosterStatus; "" read as active)
	Skipped int                  // hosts skipped for their status (banned)
	Cut     string               // why the read stopped with a cursor pending; "" when it did not
	Loop    bool                 // the read ended at a cursor that repeated
}

// Whole reports whether the read reached the roster's last page: no cut,
// no repeating cursor. Only a whole read says a host has left.
func (r Roster) Whole() bool { return r.Cut == "" && !r.Loop }

// Uncounted reports whether the roster has a host to list and gives none
// of the hosts it lists an account count (absent, or 0): a relay whose
// listHosts does not serve accountCount. Each host's listing would then
// be bounded at upstream.HostListingSlack entries whatever its size. The
// hosts listed are the ones asked, so their counts are the ones that
// matter: an idle host's count says the relay serves the field as well as
// an active one's, and a banned host's, never listed, bounds nothing.
func (r Roster) Uncounted() bool {
	for _, e := range r.Entries {
		if listable(e.Status) && e.Accounts > 0 {
			return false
		}
	}
	return len(r.Listed) > 0
}

// ListsRelay reports whether a listing in mode enumerate (Config.Enumerate;
// "" the default) lists the relay's listRepos instead of the roster's
// hosts: always with --enumerate relay (the operator's choice, whatever
// roster an earlier hosts-mode run recorded); in the default mode when the
// roster is Uncounted, as each host's listing would be cut at
// upstream.HostListingSlack entries whatever its size; --enumerate hosts
// lists the hosts anyway, with that bound. Bootstrap goes by it on the
// roster it reads, discovery and every repair pass on the roster as last
// recorded (ListedHosts).
func (r Roster) ListsRelay(enumerate string) bool {
	switch enumerate {
	case EnumerateRelay:
		return true
	case EnumerateHosts:
		return false
	}
	return r.Uncounted()
}

// ListingBound is how many entries one listing of host may name
// (upstream.HostListingBound of the account count its host/ row holds; a
// host without a row has no count): bootstrap's lanes, discovery and the
// repair passes bound each host's listing by it.
func ListingBound(store *archive.Store, host string) (int64, error) {
	hs, err := store.HostState(host)
	if err != nil && !errors.Is(err, archive.ErrNotFound) {
		return 0, fmt.Errorf("read host/ row of %s: %w", host, err)
	}
	return upstream.HostListingBound(hs.Accounts), nil
}

// ListedHosts is the hosts a listing after bootstrap (discovery, a repair
// pass) lists: the store's roster hosts but banned and left ones
// (listable) as last recorded (the caller reads the roster again first:
// RereadRoster). None when no roster
// is recorded (relay mode), when enumerate is EnumerateRelay, or when the
// recorded roster gives none of them an account count in the default mode
// (ListsRelay): uncounted is then true, the rule's fallback the caller
// says once (not the operator's choice of EnumerateRelay). With no host,
// the caller lists the relay.
func ListedHosts(store *archive.Store, enumerate string) (hosts []string, uncounted bool, err error) {
	stored, err := store.RosterEntries()
	if err != nil {
		return nil, false, fmt.Errorf("read the roster: %w", err)
	}
	hosts, uncounted = ListedFrom(stored, enumerate)
	return hosts, uncounted, nil
}

// ListedFrom is ListedHosts over roster entries already read.
func ListedFrom(stored []archive.RosterHost, enumerate string) (hosts []string, uncounted bool) {
	rr := storedRoster(stored)
	if rr.ListsRelay(enumerate) {
		return nil, enumerate != EnumerateRelay
	}
	return rr.sorted().Listed, false
}

// storedRoster is the roster the host/ rows record, Listed not yet in the
// order listings begin it (sorted).
func storedRoster(stored []archive.RosterHost) Roster {
	var rr Roster
	for _, h := range stored {
		rr.Entries = append(rr.Entries, upstream.HostEntry{Host: h.Host, Status: h.Status, Accounts: int64(min(h.Accounts, 1<<40))})
		if listable(h.Status) {
			rr.Listed = append(rr.Listed, h.Host)
		}
	}
	return rr
}

// ReadRoster pages listHosts until its last page, a cursor that repeats
// any of the read (a loop: counted, the roster ends there as on its last
// page), or MaxHosts hosts or pages read with a cursor still pending (a
// cut: counted, logged; the hosts read are kept). A page that fails past
// its retries fails the read.
func ReadRoster(ctx context.Context, src RosterSource, o RosterOptions) (Roster, error) {
	if o.MaxHosts <= 0 {
		o.MaxHosts = maxRosterHosts
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Sleep == nil {
		o.Sleep = backoff.Sleep
	}
	var rr Roster
	seen := map[string]bool{}
	var cursors upstream.CursorSet
	cursor := ""
	for pages := 1; ; pages++ {
		pg, err := rosterPage(ctx, src, o, cursor)
		if err != nil {
			return Roster{}, err
		}
		full := false // hosts left on this page past MaxHosts
		for _, h := range pg.Hosts {
			if seen[h.Host] {
				continue
			}
			if full = len(seen) >= o.MaxHosts; full {
				break
			}
			seen[h.Host] = true
			if h.Status == "" {
				h.Status = "active" // listHosts without a status
			}
			h.Status = rosterStatus(h.Status)
			rr.Entries = append(rr.Entries, h)
			if !listable(h.Status) {
				rr.Skipped++
				continue
			}
			rr.Listed = append(rr.Listed, h.Host)
		}
		switch {
		case !full && pg.Cursor == "":
			return rr.sorted(), nil
		case !full && (pg.Cursor == cursor || cursors.Repeats(pg.Cursor)):
			rr.Loop = true
			if o.Loop != nil {
				o.Loop()
			}
			o.Logger.Warn("listHosts returned a cursor it had already returned; the roster ends here as if this were its last page",
				"hosts", len(seen), "pages", pages)
			return rr.sorted(), nil
		case full || len(seen) >= o.MaxHosts || pages >= o.MaxHosts:
			rr.Cut = upstream.CutTooLarge
			if o.Cut != nil {
				o.Cut(rr.Cut)
			}
			o.Logger.Error("the relay's listHosts roster goes on past the hosts read; the hosts read so far are listed, the rest are not",
				"reason", rr.Cut, "hosts", len(seen), "pages", pages, "max_hosts", o.MaxHosts)
			return rr.sorted(), nil
		}
		cursor = pg.Cursor
	}
}

// sorted puts Listed in the order listings begin the hosts: by beginRank
// of their status, by name within a rank.
func (rr Roster) sorted() Roster {
	rank := make(map[string]int, len(rr.Entries))
	for _, e := range rr.Entries {
		rank[e.Host] = beginRank(e.Status)
	}
	slices.Sort(rr.Listed)
	var ranks [3][]string // by name within each rank
	for _, h := range rr.Listed {
		ranks[rank[h]] = append(ranks[rank[h]], h)
	}
	rr.Listed = slices.Concat(ranks[:]...)
	return rr
}

// beginRank orders the hosts a listing begins with: those the relay says
// are active first, those it says are offline last, every other status
// between. On the real network most offline hosts are gone for good and
// many are blackholed, each first try holding one of the Workers request
// slots for the connect timeout: thousands of them begun first would hold
// back every healthy host's first page by as many timeouts over Workers.
func beginRank(status string) int {
	switch status {
	case "active":
		return 0
	case "offline":
		return 2
	}
	return 1
}

// rosterPage reads one listHosts page, retrying transient failures and
// 429s on the listRepos budgets (o.Retries, and the 429 budget); a 501 (a
// relay without the method) is not retried.
func rosterPage(ctx context.Context, src RosterSource, o RosterOptions, cursor string) (upstream.HostsPage, error) {
	bo := backoff.Policy{Base: backfill.DefaultBackoffBase, Max: backfill.DefaultBackoffMax}
	for tries := 0; ; tries++ {
		pg, err := src.ListHosts(ctx, cursor, o.PageLimit)
		if err == nil {
			return pg, nil
		}
		class := upstream.Classify(err)
		wait := upstream.RetryAfter(err)
		var ue *upstream.Error
		switch {
		case ctx.Err() != nil:
			return pg, ctx.Err()
		case errors.As(err, &ue) && ue.StatusCode == http.StatusNotImplemented:
			return pg, err // a relay without listHosts: no use asking again
		case class == upstream.ClassRateLimited && tries < backfill.DefaultRateLimitRetries:
		case class == upstream.ClassTransient && tries < o.Retries:
			wait = 0
		default:
			return pg, err
		}
		if wait <= 0 {
			wait = bo.Draw(tries, nil)
		}
		o.Logger.Warn("listHosts failed; retrying", "class", class.String(), "wait", wait, "err", err)
		if err := o.Sleep(ctx, wait); err != nil {
			return pg, err
		}
	}
}

// RosterOther is the roster status recorded for a relay's status that is
// not a short word, or that is a word of backstream's own (RosterLeft),
// and the count of every status RosterStatuses does not name.
const RosterOther = "other"

// RosterStatuses are the roster statuses counted apart (CountRoster, the
// backstream_roster_hosts gauge): listHosts's active, idle, offline,
// throttled and banned, RosterLeft, and RosterOther for any other word, so
// a relay's own words cannot grow the label set.
func RosterStatuses() []string {
	return []string{"active", "idle", "offline", "throttled", RosterBanned, RosterLeft, RosterOther}
}

// rosterStatus is a roster status as stored, from the relay's word
// (upstream data, never trusted): the word in lower case when it is a
// short word of letters and underscores (the relay's words are read
// case-insensitively: "BANNED" is banned), else RosterOther. The relay's
// words and backstream's own are kept apart: a relay word that is one of
// backstream's own (RosterLeft) is stored RosterOther, a word listHosts
// does not name, so a stored RosterLeft is always backstream's. It is
// idempotent on what it returns, so an entry already read (Roster.Entries)
// is stored as it is.
func rosterStatus(s string) string {
	if s == "" || len(s) > 32 {
		return RosterOther
	}
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && c != '_' {
			return RosterOther
		}
	}
	s = strings.ToLower(s)
	if s == RosterLeft {
		return RosterOther
	}
	return s
}

// RosterView is what the roster gauge and the status report show of the
// roster the store records: the hosts by status (CountRoster) and whether
// a listing after bootstrap lists hosts (ListedFrom). It reads the host/
// rows again only after a writer committed a change to a roster entry
// (archive.Store.RosterGeneration: a roster recorded by bootstrap,
// discovery or a repair pass), not at every scrape or status build: a
// roster may name 1,000,000 hosts (a quarter to a third of a CPU-second
// a read, BenchmarkRosterScrape), and every host a failed repo was last fetched
// from has a row. Safe for concurrent use; a failed read is not kept.
type RosterView struct {
	store *archive.Store

	mu   sync.Mutex
	have bool
	gen  uint64 // the store's RosterGeneration before the read of sum
	sum  RosterSummary
}

// RosterSummary is a RosterView's reading.
type RosterSummary struct {
	// ByStatus counts the hosts by status (CountRoster): every
	// RosterStatuses value, 0 included.
	ByStatus map[string]int64
	// lists says whether a listing lists hosts (ListedFrom names some) in
	// the default mode, and under EnumerateHosts.
	lists, listsForced bool
}

// NewRosterView is a view of store's roster; it reads nothing until asked.
func NewRosterView(store *archive.Store) *RosterView { return &RosterView{store: store} }

// Read returns the roster's summary, read from host/ only when a roster
// entry changed since the last read (or at the first).
func (v *RosterView) Read() (RosterSummary, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	gen := v.store.RosterGeneration() // before the read: a change during it is read again
	if !v.have || v.gen != gen {
		stored, err := v.store.RosterEntries()
		if err != nil {
			v.have = false
			return RosterSummary{}, fmt.Errorf("read the roster: %w", err)
		}
		rr := storedRoster(stored) // what ListedFrom lists, unsorted: only whether it lists any
		listed := len(rr.Listed) > 0
		v.sum = RosterSummary{ByStatus: CountRoster(stored), lists: listed && !rr.ListsRelay(""), listsForced: listed && !rr.ListsRelay(EnumerateHosts)}
		v.have, v.gen = true, gen
	}
	sum := v.sum
	sum.ByStatus = maps.Clone(v.sum.ByStatus)
	return sum, nil
}

// ListsHosts reports whether a listing after bootstrap in mode enumerate
// (Config.Enumerate; "" the default) lists the roster's hosts, as
// ListedHosts would name some; else it lists the relay.
func (s RosterSummary) ListsHosts(enumerate string) bool {
	switch enumerate {
	case EnumerateRelay:
		return false
	case EnumerateHosts:
		return s.listsForced
	}
	return s.lists
}

// CountRoster counts roster entries by status: every RosterStatuses value
// (0 included), a status it does not name counted as RosterOther.
func CountRoster(hosts []archive.RosterHost) map[string]int64 {
	counts := make(map[string]int64, len(RosterStatuses()))
	for _, st := range RosterStatuses() {
		counts[st] = 0
	}
	for _, h := range hosts {
		if _, known := counts[h.Status]; known {
			counts[h.Status]++
		} else {
			counts[RosterOther]++
		}
	}
	return counts
}

// rosterUnit bounds the host rows of one roster unit.
const rosterUnit = 1024

// RecordRoster makes rr durable in host/<host> rows (status, account
// count, seq), a unit of at most rosterUnit hosts at a time; the rest of
// each row (parking, failures) is left as it is. When rr is whole, every
// host whose row holds a roster entry that rr does not name gets status
// RosterLeft (its count and seq kept); it returns how many. A read that
// was cut or ended at a loop changes no host it did not name.
func RecordRoster(ctx context.Context, w backfill.Writer, store *archive.Store, rr Roster) (left int, err error) {
	ups := make([]archive.HostUpdate, 0, len(rr.Entries))
	named := make(map[string]bool, len(rr.Entries))
	for _, e := range rr.Entries {
		named[e.Host] = true
		status := rosterStatus(e.Status)
		accounts, seq := uint64(max(e.Accounts, 0)), uint64(max(e.Seq, 0))
		ups = append(ups, archive.HostUpdate{Host: e.Host, Func: func(cur archive.HostState) archive.HostState {
			cur.Status, cur.Accounts, cur.Seq = status, accounts, seq
			return cur
		}})
	}
	if rr.Whole() {
		stored, err := store.RosterEntries()
		if err != nil {
			return 0, fmt.Errorf("read the stored roster: %w", err)
		}
		for _, h := range stored {
			if named[h.Host] || h.Status == RosterLeft {
				continue
			}
			left++
			ups = append(ups, archive.HostUpdate{Host: h.Host, Func: func(cur archive.HostState) archive.HostState {
				if cur.Status != "" {
					cur.Status = RosterLeft
				}
				return cur
			}})
		}
	}
	for chunk := range slices.Chunk(ups, rosterUnit) {
		if err := applyUnit(ctx, w, &archive.Unit{Hosts: chunk}); err != nil {
			return 0, fmt.Errorf("record the roster: %w", err)
		}
	}
	return left, nil
}

// A reread's listHosts page size, and the retries of one page's
// transient failures (RereadRoster's callers): fewer than bootstrap's, as
// a failed reread only leaves the roster as last recorded.
const (
	RereadPageLimit = 1000
	RereadRetries   = 3
)

// Results of RereadRoster.
const (
	RosterWhole   = "whole"   // read to its last page, recorded; hosts it no longer names marked RosterLeft
	RosterPartial = "partial" // ended at a repeating cursor or cut at MaxHosts: the hosts read recorded, none marked left
	RosterFailed  = "failed"  // a page failed past its retries (or a 501): the host/ rows as last recorded
)

// RosterResults are RereadRoster's results, for a metric's label values.
func RosterResults() []string { return []string{RosterWhole, RosterPartial, RosterFailed} }

// Reread is what RereadRoster did.
type Reread struct {
	Result   string // RosterWhole, RosterPartial or RosterFailed; "" when nothing was read (no roster, or EnumerateRelay)
	Recorded int    // hosts whose host/ row held a roster entry before the read
	Roster   Roster // the roster read (RosterWhole, RosterPartial)
	Left     int    // hosts marked RosterLeft
	Err      error  // why the read failed (RosterFailed)
}

// RereadRoster reads the relay's roster again after a hosts-mode bootstrap
// recorded one (a store with no roster entry, relay mode, reads nothing,
// and so does enumerate EnumerateRelay: its listings name no host, and the
// host/ rows are left as recorded for a later run in another mode) and
// records it (ReadRoster, RecordRoster), so the caller lists the
// hosts of the network as it is now: one that joined since, one grown
// bounded by its new count, none that left. A read that fails leaves the
// host/ rows as they were (Result RosterFailed, Err why): the caller
// lists the hosts as last recorded, and counts and logs it. Only a store
// or writer failure, or ctx's end, is returned as an error.
func RereadRoster(ctx context.Context, src RosterSource, w backfill.Writer, store *archive.Store, enumerate string, o RosterOptions) (Reread, error) {
	stored, err := store.RosterEntries()
	if err != nil {
		return Reread{}, fmt.Errorf("read the roster: %w", err)
	}
	rd := Reread{Recorded: len(stored)}
	if len(stored) == 0 || enumerate == EnumerateRelay {
		return rd, nil
	}
	rr, err := ReadRoster(ctx, src, o)
	if err != nil {
		if ctx.Err() != nil {
			return rd, ctx.Err()
		}
		rd.Result, rd.Err = RosterFailed, err
		return rd, nil
	}
	if rd.Left, err = RecordRoster(ctx, w, store, rr); err != nil {
		return rd, err
	}
	rd.Roster, rd.Result = rr, RosterWhole
	if !rr.Whole() {
		rd.Result = RosterPartial
	}
	return rd, nil
}

// roster is bootstrap's read of the roster (at most maxHosts hosts),
// counted in bootstrap's metrics.
func (b *Bootstrap) roster(ctx context.Context, maxHosts int) (Roster, error) {
	cfg := &b.cfg
	return ReadRoster(ctx, cfg.Fleet, RosterOptions{
		PageLimit: cfg.PageLimit, Retries: cfg.ListRetries, MaxHosts: maxHosts, Sleep: cfg.Sleep,
		Logger: cfg.Logger.With("component", "bootstrap"), Loop: cfg.Metrics.loop, Cut: cfg.Metrics.cut,
	})
}
