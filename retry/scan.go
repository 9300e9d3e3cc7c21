package retry

// scan.go owns the candidate rule (Due) and the parked hosts restored from
// host/ at startup. A pass reads its candidates from the due index (due/,
// kept by the archive writer) up to now, one page at a time through
// archive.Store.DuePage, whose iterator is closed before the page is
// offered: no iterator pins memtables while workers run for minutes, no
// more than one page of candidates is held (S3), and a pass reads the
// repos due, not the repos known.

import (
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/cockroachdb/pebble"
)

// Due reports whether a repo is a candidate at nowUS: active, and either
// failed, pending, or marked for a replacement (a #sync, a reactivation,
// discovery), with its next attempt due. A replacement mark sets the next
// attempt to the time it was made, so it is due at once; a failed repo waits
// for the backoff written with its failure. An inactive account is never
// fetched (E11, S8), whatever its mark. A next attempt further ahead than
// horizon (the furthest the runner writes one; 0: no bound) is due too: it
// was written while the wall clock ran ahead, and read after it was put
// right would otherwise wait as long as the clock was wrong.
func Due(st archive.RepoState, nowUS int64, horizon time.Duration) bool {
	if !st.Retryable() {
		return false
	}
	return st.NextAttemptUS <= nowUS || horizon > 0 && st.NextAttemptUS-nowUS > horizon.Microseconds()
}

// loadParks streams host/ once and calls fn for every host with a park
// recorded, ended or not (the scheduler keeps those still parked and
// queues the others for clearing): never the host set.
func loadParks(db *pebble.DB, fn func(host string, untilUS int64)) (err error) {
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
		if h.ParkedUntilUS != 0 {
			fn(string(it.Key()[len(archive.PrefixHost):]), h.ParkedUntilUS)
		}
	}
	if err := it.Error(); err != nil {
		return &archive.KeyError{Key: "host/<scan>", Kind: archive.ErrRead, Err: err}
	}
	return nil
}
