package retry

// scan.go owns reading candidates from the store: repo/ walked in DID order
// in short pages (each page opens and closes its own iterator, so no
// iterator pins memtables while workers run for minutes), and the parked
// hosts restored from host/ at startup. Nothing here holds more than one
// page of candidates (S3).

import (
	"github.com/backstream/backstream/archive"
	"github.com/cockroachdb/pebble"
)

// Due reports whether a repo is a candidate at nowUS: active, and either
// failed, pending, or marked for a replacement (a #sync, a reactivation,
// discovery), with its next attempt due. A replacement mark sets the next
// attempt to the time it was made, so it is due at once; a failed repo waits
// for the backoff written with its failure. An inactive account is never
// fetched (E11, S8), whatever its mark.
func Due(st archive.RepoState, nowUS int64) bool {
	if !st.Active {
		return false
	}
	if st.Status != archive.StatusFailed && st.Status != archive.StatusPending && st.Refetch == archive.RefetchNone {
		return false
	}
	return st.NextAttemptUS <= nowUS
}

// repoEnd is the exclusive upper bound of repo/ keys.
var repoEnd = func() []byte {
	k := append([]byte(nil), archive.PrefixRepo...)
	k[len(k)-1]++
	return k
}()

// page is one page of a pass.
type page struct {
	items   []item
	scanned int
	due     int
	next    []byte // first key of the next page; nil when the pass is over
}

// readPage reads at most keys repo/ entries from from on and returns those
// due. The iterator is closed before it returns.
func readPage(db *pebble.DB, from []byte, keys int, nowUS int64, buf []item) (page, error) {
	p := page{items: buf[:0]}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: repoEnd})
	if err != nil {
		return p, &archive.KeyError{Key: "repo/<scan>", Kind: archive.ErrRead, Err: err}
	}
	ok := it.First()
	for ; ok && p.scanned < keys; ok = it.Next() {
		p.scanned++
		st, err := archive.DecodeRepoState(it.Value())
		if err != nil {
			key := string(it.Key())
			_ = it.Close()
			return p, &archive.KeyError{Key: key, Kind: archive.ErrMalformed, Err: err}
		}
		if !Due(st, nowUS) {
			continue
		}
		p.due++
		p.items = append(p.items, item{did: string(it.Key()[len(archive.PrefixRepo):]), host: st.Host})
	}
	if ok {
		// More keys follow: the next page starts at the first unread one.
		p.next = append([]byte(nil), it.Key()...)
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return p, &archive.KeyError{Key: "repo/<scan>", Kind: archive.ErrRead, Err: err}
	}
	if err := it.Close(); err != nil {
		return p, &archive.KeyError{Key: "repo/<scan>", Kind: archive.ErrRead, Err: err}
	}
	return p, nil
}

// loadParks streams host/ once and calls fn for every host still parked at
// nowUS; only those are kept in memory (never the host set).
func loadParks(db *pebble.DB, nowUS int64, fn func(host string, untilUS int64)) (err error) {
	end := append([]byte(nil), archive.PrefixHost...)
	end[len(end)-1]++
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: archive.PrefixHost, UpperBound: end})
	if err != nil {
		return &archive.KeyError{Key: "host/<scan>", Kind: archive.ErrRead, Err: err}
	}
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = &archive.KeyError{Key: "host/<scan>", Kind: archive.ErrRead, Err: cerr}
		}
	}()
	for ok := it.First(); ok; ok = it.Next() {
		h, err := archive.DecodeHostState(it.Value())
		if err != nil {
			return &archive.KeyError{Key: string(it.Key()), Kind: archive.ErrMalformed, Err: err}
		}
		if h.ParkedUntilUS > nowUS {
			fn(string(it.Key()[len(archive.PrefixHost):]), h.ParkedUntilUS)
		}
	}
	if err := it.Error(); err != nil {
		return &archive.KeyError{Key: "host/<scan>", Kind: archive.ErrRead, Err: err}
	}
	return nil
}
