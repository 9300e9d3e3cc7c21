package repair

// absent.go owns the accounts a pass's listings left out: active in the
// archive, or inactive with their records kept (deactivated, suspended),
// listed by no listing of a complete pass. listRepos does not list a
// deleted account, so a #account deletion (or takedown) the stream lost in
// the gap shows only as an absence, also for an account deactivated before
// it was deleted; each such account's status is asked
// of the relay (and of its own host when the relay does not know it) and
// decided as a listing entry saying the same would be (compare): gone or
// inactive, its account row is archived (the live path's effects); active
// at a newer rev, it is marked for a replacement.

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/upstream"
)

// DefaultMaxAbsent bounds the accounts one pass checks for being absent
// from its listings. More absent than that is a listing that went wrong (a
// relay answering short pages), a host that left the roster with its
// accounts, or a relay index that lost some: the pass checks that many,
// the ones after those the last pass of this process checked (in DID
// order, wrapping round), so each is checked in turn, counted and logged
// once a pass.
const DefaultMaxAbsent = 10_000

// StatusSource asks an account's hosting status (upstream.Client).
type StatusSource interface {
	GetRepoStatus(ctx context.Context, host, did string) (upstream.RepoStatus, error)
}

var _ StatusSource = (*upstream.Client)(nil)

// listedSet is the DIDs a pass listed, as 64-bit hashes (8 bytes an
// account and the slack of a growing slice: about 320 MiB for 40 million
// accounts, where a map took 24 to 36 bytes an entry), sorted once the
// first time one is looked up, and the cursors each of its listings has
// been at in this process. Whole only when this process listed the pass from its start
// and no listing was cut after it listed an entry (a roster host's cut
// before that is as a host not listed: listLane): a pass resumed after a
// restart has no set, and checks no absence (the next audit does). The lanes of a pass that list
// at once share it (mu).
type listedSet struct {
	gap  uint64
	seed maphash.Seed

	mu      sync.Mutex
	whole   bool
	dids    []uint64 // in listing order until sorted
	sorted  bool
	cursors map[string]*upstream.CursorSet // by lane host ("" the relay's)
	named   map[string]int64               // by roster host: entries its listing named in the pass (a page at least one)
	tooMany map[string]bool                // roster hosts whose listing was cut for naming more than their bound
}

func newListedSet(gap uint64, whole bool) *listedSet {
	return &listedSet{gap: gap, whole: whole, seed: maphash.MakeSeed(),
		cursors: map[string]*upstream.CursorSet{}, named: map[string]int64{}, tooMany: map[string]bool{}}
}

// overBound adds a page of n entries (counted at least one) to host's
// listing, which had named durable entries before this process took the
// pass up, and reports whether it now names more than bound.
func (l *listedSet) overBound(host string, durable uint64, n int, bound int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, ok := l.named[host]
	if !ok {
		c = int64(min(durable, 1<<40))
	}
	c += int64(max(n, 1))
	l.named[host] = c
	return c > bound
}

// repeats adds cursor to host's listing's cursors and reports whether it
// was there already: the listing is on a cursor cycle.
func (l *listedSet) repeats(host, cursor string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.cursors[host]
	if c == nil {
		c = new(upstream.CursorSet)
		l.cursors[host] = c
	}
	return c.Repeats(cursor)
}

func (l *listedSet) add(repos []upstream.RepoEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.whole {
		return
	}
	for _, e := range repos {
		l.dids = append(l.dids, maphash.String(l.seed, e.DID))
	}
	l.sorted = false
}

func (l *listedSet) has(did string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.sorted {
		slices.Sort(l.dids)
		l.dids = slices.Compact(l.dids) // a DID two hosts listed
		l.sorted = true
	}
	_, ok := slices.BinarySearch(l.dids, maphash.String(l.seed, did))
	return ok
}

// release drops the DIDs once the pass has checked its absent accounts:
// nothing looks them up again, and the set is no longer whole (a step
// that finds the pass's listings done again checks no absence).
func (l *listedSet) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.dids, l.whole = nil, false
}

// cut notes that host's listing (the relay's: "") was cut, for naming
// more entries than its bound when tooMany: the set is no longer whole.
func (l *listedSet) cut(host string, tooMany bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.whole = false
	if tooMany {
		l.tooMany[host] = true
	}
}

// state reports whether the set is whole, and how many roster hosts'
// listings were cut for naming more than their bound.
func (l *listedSet) state() (whole bool, tooMany int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.whole, len(l.tooMany)
}

// listed is g's set: a new one, whole, when the pass begins in this
// process; an empty, not whole one when it was resumed.
func (r *Runner) listed(g archive.Gap, begins bool) *listedSet {
	r.mu.Lock()
	defer r.mu.Unlock()
	if begins || r.seen == nil || r.seen.gap != g.ID {
		r.seen = newListedSet(g.ID, begins)
	}
	return r.seen
}

// absentRepo is an account a pass checks: its DID and recorded host.
type absentRepo struct{ did, host string }

// checkAbsent checks the accounts of the archive that keep their records
// (keepsRecords) and that no listing of g's complete pass named, at most
// MaxAbsent of them (absentAccounts). Upstream trouble is counted, never
// fatal.
func (r *Runner) checkAbsent(ctx context.Context, g archive.Gap, seen *listedSet) error {
	defer seen.release()
	if r.cfg.Status == nil {
		return nil
	}
	if whole, _ := seen.state(); !whole {
		r.log.Info("repair pass: accounts absent from its listings are not checked in this pass (resumed after a restart, or a listing was cut); the next audit checks them",
			"gap", g.ID)
		return nil
	}
	absent, total, err := r.absentAccounts(seen)
	if err != nil {
		return err
	}
	if total > len(absent) {
		r.cfg.Metrics.absentResult(absentPartial)
		r.log.Warn("repair pass: more accounts are absent from its listings than --repair-max-absent; it checks that many, after those the last pass checked, and the next passes the rest (a listing that went wrong, a host that left, or a relay index missing accounts, more than accounts deleted in a gap)",
			"gap", g.ID, "absent", total, "max_absent", r.cfg.MaxAbsent, "from", absent[0].did)
	}
	failed := 0
	for _, a := range absent {
		ok, err := r.checkOne(ctx, a.did, a.host)
		if err != nil {
			return err
		}
		if !ok {
			failed++
		}
	}
	r.absentFrom = ""
	if total > len(absent) {
		r.absentFrom = absent[len(absent)-1].did
	}
	if len(absent) > 0 {
		r.log.Info("repair pass: accounts absent from every listing checked", "gap", g.ID, "absent", len(absent), "unanswered", failed)
	}
	return nil
}

// absentAccounts returns the accounts a pass checks and how many are
// absent in all: every one absent from seen's listings, or, when more than
// MaxAbsent are, the MaxAbsent that follow (in DID order, wrapping round)
// the last one the previous pass of this process checked (absentFrom). It
// holds at most twice MaxAbsent.
func (r *Runner) absentAccounts(seen *listedSet) (absent []absentRepo, total int, err error) {
	var after, before []absentRepo // after absentFrom; at or before it
	err = r.cfg.Store.ScanRepos(func(did string, st archive.RepoState) error {
		if !keepsRecords(st) || seen.has(did) {
			return nil
		}
		total++
		if did > r.absentFrom && len(after) < r.cfg.MaxAbsent {
			after = append(after, absentRepo{did, st.Host})
		} else if did <= r.absentFrom && len(before) < r.cfg.MaxAbsent {
			before = append(before, absentRepo{did, st.Host})
		}
		return nil
	})
	absent = append(after, before...)
	return absent[:min(len(absent), r.cfg.MaxAbsent)], total, err
}

// keepsRecords reports whether the archive holds st's account as one whose
// records it keeps: active, or inactive with a status that erases nothing
// (deactivated, suspended). Such an account no listing names may have been
// deleted or taken down in a gap. One erased already (deleted, takendown)
// has nothing left to lose, and one whose DID the directory does not know
// is never checked on a listing's word (archive.ClassUnknownDID).
func keepsRecords(st archive.RepoState) bool {
	if st.Active {
		return true
	}
	return !archive.AccountStatusPurges(st.AccountStatus) && !st.UnknownDID()
}

// statusHost is the host whose word on did's status is taken when the
// relay does not know it. Without verification, host, where it was last
// downloaded from. With it, the PDS its DID document names, as a download
// from any other host would be refused (ident.CheckAuthority): an account
// that moved since its last download is no longer held by its recorded
// host, whose RepoNotFound would be archived as a deletion of an account
// alive at its new PDS. A document read from memory that names another
// host is resolved again once first. A DID the directory has no document
// for names no PDS, and its recorded host is asked as before; a document
// that could not be read (the directory failing past its retries) or
// names no usable PDS or key leaves no host to ask (""): the account is
// left unanswered, for the next pass. An error only
// when ctx ended or the identity store could not be read.
func (r *Runner) statusHost(ctx context.Context, did, host string) (string, error) {
	id := r.cfg.Identity
	if host == "" || id.Mode() == ident.ModeOff {
		return host, nil
	}
	info, fresh, err := id.Lookup(ctx, did)
	if err == nil && ident.CheckAuthority(info, host) != nil && !fresh {
		info, err = id.Reresolve(ctx, did)
	}
	switch {
	case err == nil:
	case ident.UnknownDID(err):
		return host, nil
	case ident.Class(err) != "":
		// The directory failing, or a document without a key: which
		// PDS holds the account is unknown, and it may have moved.
		return "", nil
	default:
		return "", fmt.Errorf("repair: the PDS of absent account %s: %w", did, err)
	}
	if ident.CheckAuthority(info, host) == nil {
		return host, nil
	}
	return info.PDSHost(), nil
}

// checkOne asks did's status and decides it as a listing entry saying
// the same would be (compare: an inactive or gone account gets its account
// row, an active one is marked only when its rev is newer than the
// archive's); false when no one answered (counted; the next audit asks
// again).
func (r *Runner) checkOne(ctx context.Context, did, host string) (bool, error) {
	rs, err := r.cfg.Status.GetRepoStatus(ctx, "", did)
	if upstream.Classify(err) == upstream.ClassNotFound {
		// The relay's index may miss a live account: only its own host's
		// word that it is gone is taken; with no host known, nothing is.
		host, err = r.statusHost(ctx, did, host)
		if err != nil {
			return false, err
		}
		if host == "" {
			r.cfg.Metrics.absentResult(absentUnanswered)
			return false, nil
		}
		rs, err = r.cfg.Status.GetRepoStatus(ctx, host, did)
	}
	e := upstream.RepoEntry{DID: did, Rev: rs.Rev, Active: rs.Active, Status: rs.Status}
	switch c := upstream.Classify(err); {
	case err == nil:
	case c == upstream.ClassNotFound:
		e = upstream.RepoEntry{DID: did, Status: "deleted"}
	case c == upstream.ClassUnavailable:
		e = upstream.RepoEntry{DID: did, Status: backfill.UnavailableStatus(err)}
	default:
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		r.cfg.Metrics.absentResult(absentUnanswered)
		return false, nil
	}
	r.cfg.Metrics.absentResult(absentChecked)
	u, err := r.compare([]upstream.RepoEntry{e}, nil)
	if err != nil || len(u.Repos) == 0 {
		return true, err
	}
	if err := r.submit(ctx, u); err != nil {
		return false, err
	}
	r.cfg.Wake()
	return true, nil
}
