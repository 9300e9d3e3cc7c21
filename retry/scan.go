package retry

// scan.go owns reading candidates from the store: the due index (due/,
// kept by the archive writer) read up to now in short pages, soonest due
// first (each page opens and closes its own iterator, so no iterator pins
// memtables while workers run for minutes), and the parked hosts restored
// from host/ at startup. Nothing here holds more than one page of
// candidates (S3), and a pass reads the repos due, not the repos known.

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
	return st.Retryable() && st.NextAttemptUS <= nowUS
}

// page is one page of a pass.
type page struct {
	items []item
	due   int
	next  []byte // first key of the next page; nil when the pass is over
}

// readPage reads at most keys due/ entries from from on (nil: the first)
// whose next attempt is at most nowUS: the repos due, and only those
// (archive.Store.DuePage).
func readPage(s *archive.Store, from []byte, keys int, nowUS int64, buf []item, scratch []archive.DueEntry) (page, []archive.DueEntry, error) {
	entries, next, err := s.DuePage(from, nowUS, keys, scratch)
	p := page{items: buf[:0], next: next, due: len(entries)}
	for _, e := range entries {
		p.items = append(p.items, item{did: e.DID, host: e.Host})
	}
	return p, entries, err
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
