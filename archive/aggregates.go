package archive

// aggregates.go owns the failure aggregates: failed repos
// by error class (in meta/counts) and failed repos by final host (the
// Failures of host/<host>, indexed by hostrank/). The writer keeps both in
// the same batch as every repo transition, so they are exactly as durable as
// the states they count; reading them is a point read or a read of N
// hostrank/ keys, never a scan of repo/ or host/ (S3).

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cockroachdb/pebble"
)

// countFailed counts a repo entering (or staying in, re-counted) status
// failed under its class; beyond MaxFailedClasses distinct classes, under
// FailedClassOther.
func (c *Counts) countFailed(s RepoState) {
	if c.FailedByClass == nil {
		c.FailedByClass = make(map[string]int64)
	}
	k := FailedClass(s)
	if _, ok := c.FailedByClass[k]; !ok && len(c.FailedByClass) >= MaxFailedClasses {
		k = FailedClassOther
	}
	c.FailedByClass[k]++
}

// uncountFailed is the inverse of countFailed. A class absent from the map
// was counted under FailedClassOther when it was counted. A count going
// negative is left for EncodeCounts to refuse (a bug, fatal).
func (c *Counts) uncountFailed(s RepoState) {
	if c.FailedByClass == nil {
		c.FailedByClass = make(map[string]int64)
	}
	k := FailedClass(s)
	if _, ok := c.FailedByClass[k]; !ok {
		k = FailedClassOther
	}
	c.FailedByClass[k]--
	if c.FailedByClass[k] == 0 {
		delete(c.FailedByClass, k)
	}
}

// failedHost is the host a repo state's failure is attributed to ("" = none:
// not failed, or failed before any host answered).
func failedHost(s RepoState) string {
	if s.Status != StatusFailed {
		return ""
	}
	return s.Host
}

// stageHosts decides the host/ writes of a unit: the failure deltas of its
// repo transitions, then its HostUpdates in order.
func (w *Writer) stageHosts(st *staged, ups []HostUpdate) error {
	if len(st.repoOrder) == 0 && len(ups) == 0 {
		return nil
	}
	delta := map[string]int64{}
	for _, did := range st.repoOrder {
		if old, ok := st.old[did]; ok {
			if h := failedHost(old); h != "" {
				delta[h]--
			}
		}
		if h := failedHost(st.repos[did]); h != "" {
			delta[h]++
		}
	}
	get := func(h string) (hostChange, error) {
		if ch, ok := st.hosts[h]; ok {
			return ch, nil
		}
		cur, err := w.hostState(h)
		if err != nil {
			return hostChange{}, err
		}
		st.hostOrder = append(st.hostOrder, h)
		return hostChange{old: cur, ns: cur}, nil
	}
	if len(delta) > 0 || len(ups) > 0 {
		st.hosts = make(map[string]hostChange)
	}
	hosts := make([]string, 0, len(delta))
	for h, d := range delta {
		if d != 0 {
			hosts = append(hosts, h)
		}
	}
	sort.Strings(hosts)
	for _, h := range hosts {
		ch, err := get(h)
		if err != nil {
			return err
		}
		d := delta[h]
		if d < 0 && uint64(-d) > ch.ns.Failures {
			// Our own aggregate disagrees with repo/: a bug, fatal.
			return fmt.Errorf("host %q: %d failed repos leave it, its count is %d: the failure aggregate is inconsistent with repo/", h, -d, ch.ns.Failures)
		}
		ch.ns.Failures = uint64(int64(ch.ns.Failures) + d)
		st.hosts[h] = ch
	}
	for _, up := range ups {
		if up.Host == "" || len(up.Host) > maxHost || up.Func == nil {
			return invalid("host update for a host of %d bytes (func set: %v)", len(up.Host), up.Func != nil)
		}
		ch, err := get(up.Host)
		if err != nil {
			return err
		}
		failures := ch.ns.Failures
		ch.ns = up.Func(ch.ns)
		ch.ns.Failures = failures
		if _, err := EncodeHostState(ch.ns); err != nil {
			return invalid("host update for %s: %v", up.Host, err)
		}
		st.hosts[up.Host] = ch
	}
	return nil
}

// maxHost bounds a host name in host/ keys.
const maxHost = 1024

// hostState returns the host's state as of the open batch (zero if absent).
func (w *Writer) hostState(h string) (HostState, error) {
	if s, ok := w.hosts[h]; ok {
		return s, nil
	}
	s, err := w.store.HostState(h)
	if errors.Is(err, ErrNotFound) {
		return HostState{}, nil
	}
	return s, err
}

// upgradeCounts brings counts read at writer start to the current version:
// a version-1 value (no classes) with failed repos gets its classes and its
// host failure counts rebuilt by one pass over repo/, committed synced
// before the writer takes any unit. The pass keeps one counter per class and
// per host with failed repos, nothing per repo.
func (s *Store) upgradeCounts(c Counts, log *slog.Logger, now func() time.Time) (Counts, error) {
	if c.FailedByClass != nil {
		return c, nil
	}
	if c.ByStatus[StatusFailed] == 0 {
		c.FailedByClass = map[string]int64{}
		return c, nil
	}
	// NewWriter waits for this read of every repo: say so before it.
	p := s.startup.Begin(log, now, StepAnnouncement{Step: StepFailureAggregates,
		Line:  "archive: rebuilding the failure aggregates of a store written before they existed: reading every repo/ row once before the writer starts (about a fifth of a CPU-microsecond a repo, BenchmarkWriterRebuildsFailureAggregates)",
		Args:  []any{"repos", c.Total(), "failed_repos", c.ByStatus[StatusFailed]},
		Still: "archive: still rebuilding the failure aggregates from repo/; the writer starts when it ends", Total: c.Total()})
	defer p.End()
	rebuilt := Counts{ByStatus: c.ByStatus, Inactive: c.Inactive}
	hosts := map[string]uint64{}
	var failed int64
	err := s.ScanRepos(func(did string, st RepoState) error {
		if p.Read() {
			p.Tick("failed_read", failed)
		}
		if st.Status == StatusFailed {
			failed++
			rebuilt.countFailed(st)
			if h := failedHost(st); h != "" {
				hosts[h]++
			}
		}
		return nil
	})
	if err != nil {
		return c, fmt.Errorf("rebuild failure aggregates: %w", err)
	}
	if failed != c.ByStatus[StatusFailed] {
		return c, fmt.Errorf("rebuild failure aggregates: meta/counts says %d failed repos, repo/ holds %d", c.ByStatus[StatusFailed], failed)
	}
	b := s.db.NewBatch()
	defer b.Close()
	for h, n := range hosts {
		hs, err := s.HostState(h)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return c, fmt.Errorf("rebuild failure aggregates: %w", err)
		}
		if hs.Failures > 0 {
			_ = b.Delete(HostRankKey(hs.Failures, h), nil)
		}
		hs.Failures = n
		v, err := EncodeHostState(hs)
		if err != nil {
			return c, fmt.Errorf("rebuild failure aggregates: host %s: %w", h, err)
		}
		_ = b.Set(HostKey(h), v, nil)
		_ = b.Set(HostRankKey(n, h), nil, nil)
	}
	v, err := EncodeCounts(rebuilt)
	if err != nil {
		return c, fmt.Errorf("rebuild failure aggregates: %w", err)
	}
	_ = b.Set(KeyCounts, v, nil)
	err = s.commit("rebuild failure aggregates", b)
	s.rankGen.Add(1)
	if err != nil {
		return c, err
	}
	log.Info("archive: rebuilt the failure aggregates of a store written before they existed",
		"failed_repos", failed, "classes", len(rebuilt.FailedByClass), "hosts", len(hosts))
	return rebuilt, nil
}

// HostFailures is one row of the failure ranking.
type HostFailures struct {
	Host     string `json:"host"`
	Failures uint64 `json:"failed"`
}

// topCache is TopFailingHosts's last answer, for n hosts, read while
// rankGen was gen.
type topCache struct {
	mu    sync.Mutex
	ok    bool
	gen   uint64
	n     int
	hosts []HostFailures
}

// TopFailingHosts returns at most n hosts with the most failed repos, most
// first (ties by host name), reading n keys of hostrank/ and every deleted
// row ahead of them that no compaction has dropped yet. After hosts
// recover those may be many (one for each count a host held), so the
// answer is kept and read again only after a batch changed a failure
// count: /status, built at every poll of a status page, reads nothing
// while no failure is counted or cleared.
func (s *Store) TopFailingHosts(n int) ([]HostFailures, error) {
	gen := s.rankGen.Load() // before the read: a change during it is read again
	s.top.mu.Lock()
	defer s.top.mu.Unlock()
	if s.top.ok && s.top.gen == gen && s.top.n == n {
		return slices.Clone(s.top.hosts), nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixHostRank, UpperBound: prefixEnd(PrefixHostRank)})
	if err != nil {
		return nil, &KeyError{Key: "hostrank/<scan>", Kind: ErrRead, Err: err}
	}
	var out []HostFailures
	for ok := it.First(); ok && len(out) < n; ok = it.Next() {
		h, f, err := ParseHostRankKey(it.Key())
		if err != nil || f == 0 {
			key := string(it.Key())
			_ = it.Close()
			return nil, &KeyError{Key: key, Kind: ErrMalformed, Err: fmt.Errorf("not a host rank key (failures %d): %v", f, err)}
		}
		out = append(out, HostFailures{Host: h, Failures: f})
	}
	if err := it.Error(); err != nil {
		_ = it.Close()
		return nil, &KeyError{Key: "hostrank/<scan>", Kind: ErrRead, Err: err}
	}
	if err := it.Close(); err != nil {
		return nil, &KeyError{Key: "hostrank/<scan>", Kind: ErrRead, Err: err}
	}
	s.top.ok, s.top.gen, s.top.n, s.top.hosts = true, gen, n, out
	return slices.Clone(out), nil
}
