package archive

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// truth recomputes the failure aggregates the slow way: a scan of repo/.
func truth(t *testing.T, s *Store) (map[string]int64, map[string]uint64) {
	t.Helper()
	classes, hosts := map[string]int64{}, map[string]uint64{}
	err := s.ScanRepos(func(did string, st RepoState) error {
		if st.Status == StatusFailed {
			classes[FailedClass(st)]++
			if st.Host != "" {
				hosts[st.Host]++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return classes, hosts
}

// checkAggregates compares meta/counts' classes, every host's Failures and
// the whole hostrank/ index with the truth from repo/.
func checkAggregates(t *testing.T, s *Store, when string) {
	t.Helper()
	classes, hosts := truth(t, s)
	c, err := s.Counts()
	if err != nil {
		t.Fatalf("%s: counts: %v", when, err)
	}
	if !reflect.DeepEqual(c.FailedByClass, classes) {
		t.Fatalf("%s: failed by class %v, repo/ says %v", when, c.FailedByClass, classes)
	}
	// Every host/ Failures equals the truth (hosts absent from the truth
	// have 0).
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	rank := map[string]uint64{}
	for ok := it.SeekGE(PrefixHost); ok && hasPrefix(it.Key(), PrefixHost); ok = it.Next() {
		h, err := DecodeHostState(it.Value())
		if err != nil {
			t.Fatal(err)
		}
		name := string(it.Key()[len(PrefixHost):])
		if h.Failures != hosts[name] {
			t.Fatalf("%s: host/%s failures %d, repo/ says %d", when, name, h.Failures, hosts[name])
		}
	}
	for ok := it.SeekGE(PrefixHostRank); ok && hasPrefix(it.Key(), PrefixHostRank); ok = it.Next() {
		name, f, err := ParseHostRankKey(it.Key())
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := rank[name]; dup {
			t.Fatalf("%s: host %s ranked twice", when, name)
		}
		rank[name] = f
	}
	it.Close()
	if !reflect.DeepEqual(rank, hosts) {
		t.Fatalf("%s: hostrank/ %v, repo/ says %v", when, rank, hosts)
	}
	// The top 10: most failures first, ties by name.
	var want []HostFailures
	for h, n := range hosts {
		want = append(want, HostFailures{h, n})
	}
	sort.Slice(want, func(i, j int) bool {
		if want[i].Failures != want[j].Failures {
			return want[i].Failures > want[j].Failures
		}
		return want[i].Host < want[j].Host
	})
	if len(want) > 10 {
		want = want[:10]
	}
	got, err := s.TopFailingHosts(10)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
		t.Fatalf("%s: top hosts %v, want %v", when, got, want)
	}
	checkDueIndex(t, s, when)
}

// checkDueIndex compares the whole due/ index with the truth from repo/:
// one entry per retryable repo, at its next attempt, valued with its host.
func checkDueIndex(t *testing.T, s *Store, when string) {
	t.Helper()
	want := map[string]string{}
	if err := s.ScanRepos(func(did string, st RepoState) error {
		if st.Retryable() {
			want[string(DueKey(st.NextAttemptUS, did))] = st.Host
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixDue, UpperBound: prefixEnd(PrefixDue)})
	if err != nil {
		t.Fatal(err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		got[string(it.Key())] = string(it.Value())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: due/ holds %d entries, repo/ says %d:\n got %q\nwant %q", when, len(got), len(want), got, want)
	}
}

// TestFailureAggregates: random transitions of 300 repos
// over 25 hosts and 7 classes — status, class and host changes, several
// updates of one repo in one unit, many units per group-committed batch,
// host updates trying to set Failures, restarts — and after every burst the
// aggregates equal a scan of repo/, the rank index holds exactly the hosts
// with failures, and the top 10 is right.
func TestFailureAggregates(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	w := newWriter(t, s, WriterOptions{})
	rng := rand.New(rand.NewPCG(7, 7))
	classes := []string{"transient", "timeout", "rate_limited", "permanent", "not_found_active", "", "incomplete_car"}
	statuses := []RepoStatus{StatusNotStarted, StatusPending, StatusComplete, StatusFailed, StatusFailed, StatusUnavailable}
	randState := func() RepoState {
		return RepoState{
			Status:        statuses[rng.IntN(len(statuses))],
			Active:        rng.IntN(5) != 0,
			ErrClass:      classes[rng.IntN(len(classes))],
			Host:          []string{"", fmt.Sprintf("pds%02d.test", rng.IntN(25))}[min(rng.IntN(8), 1)],
			NextAttemptUS: []int64{0, -5, rng.Int64N(1 << 50)}[rng.IntN(3)],
			Refetch:       Refetch(rng.IntN(int(numRefetch))) * Refetch(rng.IntN(2)),
		}
	}
	fields := FieldStatus | FieldActive | FieldError | FieldHost | FieldNextAttempt | FieldRefetch
	for burst := 0; burst < 60; burst++ {
		acks := NewAcks()
		units := 1 + rng.IntN(20)
		for i := 0; i < units; i++ {
			u := &Unit{Acks: acks}
			for j := rng.IntN(6); j >= 0; j-- {
				did := didN(rng.IntN(300))
				switch rng.IntN(3) {
				case 0: // field-level, sometimes only the host or the class
					f := fields
					if rng.IntN(3) == 0 {
						f = []RepoField{FieldHost, FieldError, FieldNextAttempt, FieldRefetch, FieldActive}[rng.IntN(5)]
					}
					u.Repos = append(u.Repos, RepoUpdate{DID: did, Fields: f | FieldStatus, State: randState()})
				case 1:
					// Drawn here: the Func runs on the writer's goroutine,
					// and rng is the test goroutine's.
					ns, keep := randState(), rng.IntN(4) != 0
					u.Repos = append(u.Repos, RepoUpdate{DID: did, Func: func(cur RepoState, exists bool) (RepoState, bool) {
						if !exists {
							return ns, true
						}
						cur.Status, cur.Host = ns.Status, ns.Host
						return cur, keep
					}})
				default:
					u.Repos = append(u.Repos, RepoUpdate{DID: did, Fields: fields, State: randState()})
				}
			}
			if rng.IntN(4) == 0 {
				until := rng.Int64N(1 << 40)
				u.Hosts = append(u.Hosts, HostUpdate{Host: fmt.Sprintf("pds%02d.test", rng.IntN(30)), Func: func(h HostState) HostState {
					h.ParkedUntilUS, h.Failures = until, 1<<40 // Failures is the writer's: ignored
					return h
				}})
			}
			if err := w.Submit(context.Background(), u); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < units; {
			select {
			case <-acks.Ready():
				for _, r := range acks.Drain(nil) {
					if r.Refused != nil {
						t.Fatalf("burst %d: refused: %v", burst, r.Refused)
					}
					got++
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("burst %d: %d of %d receipts", burst, got, units)
			}
		}
		checkAggregates(t, s, fmt.Sprintf("burst %d", burst))
		if burst%20 == 19 { // a restart reads the aggregates back
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			w = newWriter(t, s, WriterOptions{})
		}
	}
	c, _ := s.Counts()
	if c.Get(StatusFailed) < 20 || len(c.FailedByClass) < 5 {
		t.Fatalf("the workload left too little to check: %+v", c)
	}
	w.Close()
	s.Close()
}

// TestHostsBelongToTheWriter: host/ and hostrank/ are refused as Puts, and
// a HostUpdate cannot change Failures.
func TestHostsBelongToTheWriter(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	v, _ := EncodeHostState(HostState{Failures: 9})
	for _, k := range [][]byte{HostKey("pds.test"), HostRankKey(9, "pds.test")} {
		if r := apply(t, w, &Unit{Puts: []KV{{Key: k, Value: v}}}); !errors.Is(r.Refused, errInvalidUnit) {
			t.Fatalf("put of %q: %v, want refused", k, r.Refused)
		}
	}
	if r := apply(t, w, &Unit{Hosts: []HostUpdate{{Host: "", Func: func(h HostState) HostState { return h }}}}); r.Refused == nil {
		t.Fatal("host update without a host accepted")
	}
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: didN(1), Fields: FieldStatus | FieldHost | FieldError,
		State: RepoState{Status: StatusFailed, Host: "pds.test", ErrClass: "transient"}}}})
	apply(t, w, &Unit{Hosts: []HostUpdate{{Host: "pds.test", Func: func(h HostState) HostState {
		h.Failures, h.ParkedUntilUS = 0, 5
		return h
	}}}})
	h, err := s.HostState("pds.test")
	if err != nil || h.Failures != 1 || h.ParkedUntilUS != 5 {
		t.Fatalf("host state %+v %v: want failures 1 (the writer's), parked 5", h, err)
	}
}

// TestCountsUpgradeFromV1: a store whose meta/counts predates the classes
// (version 1, no host failure counts) gets them rebuilt from repo/ when the
// writer starts, in one synced batch, and they are exact from then on.
func TestCountsUpgradeFromV1(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	w := newWriter(t, s, WriterOptions{})
	for i := 0; i < 40; i++ {
		st := RepoState{Status: []RepoStatus{StatusComplete, StatusFailed}[i%2], Active: true,
			ErrClass: []string{"transient", "timeout", ""}[i%3], Host: fmt.Sprintf("pds%d.test", i%4)}
		apply(t, w, &Unit{Repos: []RepoUpdate{{DID: didN(i), Fields: FieldStatus | FieldActive | FieldError | FieldHost, State: st}}})
	}
	apply(t, w, &Unit{Hosts: []HostUpdate{{Host: "pds1.test", Func: func(h HostState) HostState { h.ParkedUntilUS = 77; return h }}}})
	w.Close()
	checkAggregates(t, s, "before the downgrade")
	// Rewrite the store as a build without the aggregates left it.
	c, _ := s.Counts()
	v1 := []byte{codecV1}
	for st := RepoStatus(1); st < numRepoStatus; st++ {
		v1 = append(v1, byte(c.ByStatus[st]))
	}
	v1 = append(v1, byte(c.Inactive))
	b := s.db.NewBatch()
	_ = b.Set(KeyCounts, v1, nil)
	_ = b.DeleteRange(PrefixHostRank, prefixEnd(PrefixHostRank), nil)
	for i := 0; i < 4; i++ {
		h, _ := s.HostState(fmt.Sprintf("pds%d.test", i))
		h.Failures = 0
		v, _ := EncodeHostState(h)
		_ = b.Set(HostKey(fmt.Sprintf("pds%d.test", i)), v, nil)
	}
	if err := s.commit("downgrade", b); err != nil {
		t.Fatal(err)
	}
	if old, err := s.Counts(); err != nil || old.FailedByClass != nil {
		t.Fatalf("v1 counts read as %+v %v", old, err)
	}
	w = newWriter(t, s, WriterOptions{})
	checkAggregates(t, s, "after the upgrade")
	if h, _ := s.HostState("pds1.test"); h.ParkedUntilUS != 77 {
		t.Fatalf("the upgrade lost the parking: %+v", h)
	}
	// And they stay exact: fail one more, complete one.
	apply(t, w, &Unit{Repos: []RepoUpdate{
		{DID: didN(0), Fields: FieldStatus | FieldError, State: RepoState{Status: StatusFailed, ErrClass: "permanent"}},
		{DID: didN(1), Fields: FieldStatus, State: RepoState{Status: StatusComplete}},
	}})
	checkAggregates(t, s, "after the upgrade and two transitions")
	w.Close()
	s.Close()
}

// TestCountsClassesCodec: the version-2 classes are canonical and consistent
// with the failed count.
func TestCountsClassesCodec(t *testing.T) {
	c := Counts{FailedByClass: map[string]int64{"a": 1, "b": 2}}
	c.ByStatus[StatusFailed] = 3
	good, err := EncodeCounts(c)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeCounts(good); err != nil || !reflect.DeepEqual(got, c) {
		t.Fatalf("round trip %+v %v", got, err)
	}
	bad := func(name string, c Counts) {
		if _, err := EncodeCounts(c); err == nil {
			t.Errorf("encoder accepted %s", name)
		}
	}
	bad("a sum below failed", Counts{ByStatus: c.ByStatus, FailedByClass: map[string]int64{"a": 1}})
	bad("a negative class", Counts{ByStatus: c.ByStatus, FailedByClass: map[string]int64{"a": 4, "b": -1}})
	bad("an empty class name", Counts{ByStatus: c.ByStatus, FailedByClass: map[string]int64{"": 3}})
	prefix := good[:7] // version, five statuses, inactive
	for name, tail := range map[string][]byte{
		"classes out of order": {2, 1, 'b', 2, 1, 'a', 1},
		"duplicate class":      {2, 1, 'a', 1, 1, 'a', 2},
		"zero count":           {3, 1, 'a', 1, 1, 'b', 2, 1, 'c', 0},
		"sum mismatch":         {2, 1, 'a', 1, 1, 'b', 1},
		"too many classes":     {65},
		"truncated":            {2, 1, 'a', 1},
		"trailing":             {2, 1, 'a', 1, 1, 'b', 2, 0},
	} {
		b := append(append([]byte(nil), prefix...), tail...)
		_, err := DecodeCounts(b)
		mustMalformed(t, "counts "+name, err)
	}
}
