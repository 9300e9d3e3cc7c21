package archive

// This file owns the fail-closed typed reads of single keys: absent
// (ErrNotFound), unreadable (ErrRead) and malformed (ErrMalformed) are three
// distinct outcomes, each naming the key.

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cockroachdb/pebble"
)

// get reads key through r and decodes it with dec.
func get[T any](r pebble.Reader, key []byte, dec func([]byte) (T, error)) (T, error) {
	var zero T
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return zero, &KeyError{Key: string(key), Kind: ErrNotFound}
	}
	if err != nil {
		return zero, &KeyError{Key: keyString(key), Kind: ErrRead, Err: err}
	}
	defer closer.Close()
	t, err := dec(v)
	if err != nil {
		return zero, &KeyError{Key: keyString(key), Kind: ErrMalformed, Err: err}
	}
	return t, nil
}

// Phase reads meta/phase.
func (s *Store) Phase() (Phase, error) { return get(s.db, KeyPhase, DecodePhase) }

// Instance reads meta/instance.
func (s *Store) Instance() (Instance, error) { return get(s.db, KeyInstance, DecodeInstance) }

// Relay reads meta/relay.
func (s *Store) Relay() (string, error) { return get(s.db, KeyRelay, DecodeRelay) }

// ZstdDictionary reads meta/zstd_dictionary.
func (s *Store) ZstdDictionary() (ZstdDictionary, error) {
	return get(s.db, KeyZstdDictionary, DecodeZstdDictionary)
}

// Counts reads meta/counts; a store without repos has none (ErrNotFound).
func (s *Store) Counts() (Counts, error) { return get(s.db, KeyCounts, DecodeCounts) }

// Time reads one of the meta/*_at timestamps.
func (s *Store) Time(key []byte) (time.Time, error) { return get(s.db, key, DecodeTime) }

// openKeys are the keys Open writes by itself: the store's creation and the
// markers of its indexes.
var openKeys = [][]byte{KeyInstance, KeyPhase, KeyPhaseEnteredAt, KeyIndex, KeyReplayIndex, KeyDueIndex}

// Untouched reports whether the store holds nothing but what Open wrote
// (openKeys): nothing was written since. A failed scan is ErrRead.
func (s *Store) Untouched() (bool, error) {
	it, err := s.db.NewIter(nil)
	if err != nil {
		return false, fmt.Errorf("archive: scan the store: %w: %w", ErrRead, err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		if !slices.ContainsFunc(openKeys, func(k []byte) bool { return bytes.Equal(k, it.Key()) }) {
			return false, nil
		}
	}
	if err := it.Error(); err != nil {
		return false, fmt.Errorf("archive: scan the store: %w: %w", ErrRead, err)
	}
	return true, nil
}

// empty reports whether the store holds no key under prefix. A failed
// scan is ErrRead.
func (s *Store) empty(prefix []byte) (bool, error) {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return false, fmt.Errorf("archive: scan %s: %w: %w", prefix, ErrRead, err)
	}
	defer it.Close()
	found := it.First()
	if err := it.Error(); err != nil {
		return false, fmt.Errorf("archive: scan %s: %w: %w", prefix, ErrRead, err)
	}
	return !found, nil
}

// RelayCursor reads cursor/relay.
func (s *Store) RelayCursor() (uint64, error) { return get(s.db, KeyCursorRelay, DecodeSeqCursor) }

// MergeCursor reads cursor/merge.
func (s *Store) MergeCursor() (uint64, error) { return get(s.db, KeyCursorMerge, DecodeSeqCursor) }

// ListCursor reads cursor/listrepos (or, with last, cursor/listrepos_last).
func (s *Store) ListCursor(last bool) (ListCursor, error) {
	if last {
		return get(s.db, KeyCursorListLast, DecodeListCursor)
	}
	return get(s.db, KeyCursorListRepos, DecodeListCursor)
}

// HostListCursor reads cursor/hostlist/<host>, a fleet bootstrap's
// checkpoint of host's own listing.
func (s *Store) HostListCursor(host string) (ListCursor, error) {
	return get(s.db, HostListCursorKey(host), DecodeListCursor)
}

// HostListLast reads cursor/hostlist_last/<host>, the last non-empty
// cursor of host's own listing a fleet bootstrap covered.
func (s *Store) HostListLast(host string) (ListCursor, error) {
	return get(s.db, HostListLastKey(host), DecodeListCursor)
}

// RosterHost is a host whose host/ row holds a roster entry: its roster
// status and the account count the relay gave it.
type RosterHost struct {
	Host, Status string
	Accounts     uint64
}

// RosterEntries returns every host whose host/<host> row holds a roster
// entry, whatever its status, in key order.
func (s *Store) RosterEntries() ([]RosterHost, error) {
	var hosts []RosterHost
	err := s.scanRoster(func(host string, h HostState) {
		if h.Status != "" {
			hosts = append(hosts, RosterHost{Host: host, Status: h.Status, Accounts: h.Accounts})
		}
	})
	return hosts, err
}

// RosterGeneration counts the writer batches committed since the store was
// opened that changed a roster entry (a host/ row's Status or Accounts,
// what RosterEntries returns). A figure computed from a RosterEntries read
// that began after RosterGeneration returned g is still true while it
// returns g: a reader asked at every scrape or status build reads host/
// again only after a roster was recorded, not at every ask. A failed
// repo's host or a park changes no roster entry.
func (s *Store) RosterGeneration() uint64 { return s.rosterGen.Load() }

// scanRoster calls fn for every host/ row, in key order.
func (s *Store) scanRoster(fn func(host string, h HostState)) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixHost, UpperBound: prefixEnd(PrefixHost)})
	if err != nil {
		return &KeyError{Key: "host/<scan>", Kind: ErrRead, Err: err}
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		h, err := DecodeHostState(it.Value())
		if err != nil {
			return &KeyError{Key: string(it.Key()), Kind: ErrMalformed, Err: err}
		}
		fn(string(it.Key()[len(PrefixHost):]), h)
	}
	if err := it.Error(); err != nil {
		return &KeyError{Key: "host/<scan>", Kind: ErrRead, Err: err}
	}
	return nil
}

// RepoState reads repo/<did>.
func (s *Store) RepoState(did string) (RepoState, error) {
	return get(s.db, RepoKey(did), DecodeRepoState)
}

// Rev reads rev/<did>, the account's ratchet.
func (s *Store) Rev(did string) (string, error) { return get(s.db, RevKey(did), DecodeRev) }

// HostState reads host/<host>.
func (s *Store) HostState(host string) (HostState, error) {
	return get(s.db, HostKey(host), DecodeHostState)
}

// ScanReposPage bounds the repo/ rows one iterator of ScanRepos reads,
// and so the rows a walk holds at once.
const ScanReposPage = 1024

// ScanRepos calls fn for every repo/ entry in DID order, streaming: at
// most one page of ScanReposPage states is held. Each page is read by its
// own iterator, closed before fn sees the page: fn may wait (a unit
// submitted to a writer that is behind) without the walk pinning the
// sstables and memtables it started on, which every compaction meanwhile
// would otherwise leave on disk until the walk ends. The walk is so not
// one snapshot: a row written while it runs may be seen or not, and no
// key is seen twice. A malformed state stops the scan with an error
// naming its key, after fn has seen the rows before it. fn returning an
// error stops the scan with that error.
func (s *Store) ScanRepos(fn func(did string, st RepoState) error) error {
	type row struct {
		did string
		st  RepoState
	}
	page := make([]row, 0, ScanReposPage)
	from := PrefixRepo
	for from != nil {
		page = page[:0]
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: from, UpperBound: prefixEnd(PrefixRepo)})
		if err != nil {
			return fmt.Errorf("archive: scan repos: %w", err)
		}
		var bad error
		ok := it.First()
		for ; ok && len(page) < ScanReposPage; ok = it.Next() {
			st, err := DecodeRepoState(it.Value())
			if err != nil {
				bad = &KeyError{Key: string(it.Key()), Kind: ErrMalformed, Err: err}
				break
			}
			page = append(page, row{string(it.Key()[len(PrefixRepo):]), st})
		}
		from = nil
		if ok && bad == nil {
			from = append([]byte(nil), it.Key()...)
		}
		if err := it.Error(); err != nil {
			_ = it.Close()
			return &KeyError{Key: "repo/<scan>", Kind: ErrRead, Err: err}
		}
		if err := it.Close(); err != nil {
			return &KeyError{Key: "repo/<scan>", Kind: ErrRead, Err: err}
		}
		for _, r := range page {
			if err := fn(r.did, r.st); err != nil {
				return err
			}
		}
		if bad != nil {
			return bad
		}
	}
	return nil
}

// SinkCursor reads cursor/sink/nats, the NATS sink's position.
func (s *Store) SinkCursor() (uint64, error) { return get(s.db, KeyCursorSinkNATS, DecodeSeqCursor) }

// SinkRemoval reads cursor/sink/nats_removed, the last removal the NATS
// sink saw empty its stream.
func (s *Store) SinkRemoval() (SinkRemoval, error) {
	return get(s.db, KeyCursorSinkNATSRemoved, DecodeSinkRemoval)
}
