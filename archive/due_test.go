package archive

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// seedRepos writes n repo states through a writer, every third one failed
// (retryable, due at i), every fifth of those inactive (not retryable),
// and returns the number of retryable ones.
func seedRepos(t *testing.T, s *Store, n int) int {
	t.Helper()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	retryable := 0
	var ups []RepoUpdate
	for i := 0; i < n; i++ {
		st := RepoState{Status: StatusComplete, Active: true, Host: fmt.Sprintf("pds%d.test", i%7)}
		if i%3 == 0 {
			st.Status, st.NextAttemptUS, st.ErrClass = StatusFailed, int64(i), "transient"
			st.Active = i%5 != 0
		}
		if st.Retryable() {
			retryable++
		}
		ups = append(ups, RepoUpdate{DID: didN(i), Fields: FieldStatus | FieldActive | FieldHost | FieldNextAttempt | FieldError, State: st})
	}
	apply(t, w, &Unit{Repos: ups})
	return retryable
}

// dueKeys counts the due/ keys of s.
func dueKeys(t *testing.T, s *Store) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: PrefixDue, UpperBound: prefixEnd(PrefixDue)})
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	n := 0
	for ok := it.First(); ok; ok = it.Next() {
		n++
	}
	return n
}

// TestDueIndexBuiltOnOpen (S3): a store from before the due index (no
// meta/due_index) gets it built from repo/ when it opens, exactly, even when
// an interrupted build left entries behind — stale ones included — and the
// marker is written last. A present marker means no build; a malformed one
// stops Open naming it.
func TestDueIndexBuiltOnOpen(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	want := seedRepos(t, s, 600)
	if got := dueKeys(t, s); got != want {
		t.Fatalf("the writer indexed %d repos, want %d", got, want)
	}
	// An older store, or an interrupted build: no marker, one entry of a
	// repo that is complete, and half the index gone.
	b := s.db.NewBatch()
	_ = b.Delete(KeyDueIndex, nil)
	_ = b.Set(DueKey(5, didN(1)), []byte("stale.test"), nil)
	_ = b.DeleteRange(DueKey(300, ""), prefixEnd(PrefixDue), nil)
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openMem(t, fs)
	checkDueIndex(t, s, "after the build")
	if _, err := get(s.db, KeyDueIndex, decodeDueMarker); err != nil {
		t.Fatalf("marker after the build: %v", err)
	}
	// With the marker present Open trusts the index: a stray entry stays.
	if err := s.db.Set(DueKey(5, didN(1)), nil, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openMem(t, fs)
	if got := dueKeys(t, s); got != want+1 {
		t.Fatalf("reopen with the marker: %d due/ keys, want %d (no rebuild)", got, want+1)
	}
	// A malformed marker is an error naming the key, never a rebuild.
	if err := s.db.Set(KeyDueIndex, []byte{0x02}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open("/data", testOptions(fs))
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), "meta/due_index") {
		t.Fatalf("open with a malformed marker: %v; want ErrMalformed naming meta/due_index", err)
	}
}

// TestDuePageReadsOnlyDueRepos (S3): a page holds the retryable repos whose
// next attempt has come, soonest first, in pages that resume where the last
// stopped; repos not retryable or not yet due are never read.
func TestDuePageReadsOnlyDueRepos(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	seedRepos(t, s, 600)
	var all []DueEntry
	var from []byte
	for pages := 0; ; pages++ {
		page, next, err := s.DuePage(from, 297, 7, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 7 {
			t.Fatalf("page of %d entries, asked for 7", len(page))
		}
		all = append(all, page...)
		if next == nil {
			break
		}
		from = next
	}
	// Due at ≤ 297: i = 0, 3, …, 297 failed, without the inactive (i%5 == 0);
	// 297 itself is due.
	var want []DueEntry
	for i := 0; i <= 297; i += 3 {
		if i%5 != 0 {
			want = append(want, DueEntry{DID: didN(i), NextUS: int64(i), Host: fmt.Sprintf("pds%d.test", i%7)})
		}
	}
	if fmt.Sprint(all) != fmt.Sprint(want) {
		t.Fatalf("due at 297:\n got %v\nwant %v", all, want)
	}
}

// TestDueKeyRoundTrip: ParseDueKey inverts DueKey and refuses what DueKey
// cannot produce.
func TestDueKeyRoundTrip(t *testing.T) {
	for _, at := range []int64{0, 1, 1 << 40, 1<<63 - 1} {
		did, got, err := ParseDueKey(DueKey(at, "did:plc:x"))
		if err != nil || did != "did:plc:x" || got != at {
			t.Fatalf("round trip of %d: %q %d %v", at, did, got, err)
		}
	}
	if _, got, _ := ParseDueKey(DueKey(-7, "did:plc:x")); got != 0 {
		t.Fatalf("a next attempt before the epoch is stored as %d, want 0", got)
	}
	for _, k := range [][]byte{[]byte("due/"), []byte("due/\x00\x00\x00\x00\x00\x00\x00\x01"), []byte("repo/did:plc:x"),
		append([]byte("due/\x80\x00\x00\x00\x00\x00\x00\x00"), "did:plc:x"...)} {
		if _, _, err := ParseDueKey(k); err == nil {
			t.Fatalf("ParseDueKey(%q) accepted", k)
		}
	}
}

// TestScanRetryable: the scan visits exactly the retryable repos, each
// with its state, and skips entries whose repo has no state or is no
// longer retryable.
func TestScanRetryable(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	seedRepos(t, s, 600)
	want := map[string]RepoState{}
	if err := s.ScanRepos(func(did string, st RepoState) error {
		if st.Retryable() {
			want[did] = st
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{DueKey(1, didN(1)), DueKey(2, "did:plc:unknown")} { // complete; no state
		if err := s.db.Set(k, nil, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]RepoState{}
	if _, err := s.ScanRetryable(0, math.MaxInt64, func(did string, st RepoState) error {
		got[did] = st
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(want) == 0 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("ScanRetryable visited %d repos, repo/ has %d retryable:\n got %v\nwant %v", len(got), len(want), got, want)
	}
}

// TestTakeDueWritten: it reports the earliest next attempt among the due/
// entries made durable since the last call, then none until the writer
// writes another; an entry removed or left as it was is not one.
func TestTakeDueWritten(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	seedRepos(t, s, 30) // failed repos due at 3, 6, 9, … (0 is inactive)
	if at, ok := s.TakeDueWritten(); !ok || at != 3 {
		t.Fatalf("after the seed: %d %v, want 3 true", at, ok)
	}
	if at, ok := s.TakeDueWritten(); ok {
		t.Fatalf("taken twice: %d %v, want none", at, ok)
	}
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	apply(t, w, &Unit{Repos: []RepoUpdate{
		{DID: didN(3), Fields: FieldStatus, State: RepoState{Status: StatusComplete}},    // leaves the index
		{DID: didN(6), Fields: FieldError, State: RepoState{ErrClass: "other"}},          // stays where it was
		{DID: didN(9), Fields: FieldNextAttempt, State: RepoState{NextAttemptUS: 5_000}}, // moves
	}})
	if at, ok := s.TakeDueWritten(); !ok || at != 5_000 {
		t.Fatalf("after a unit moving one entry to 5000: %d %v, want 5000 true", at, ok)
	}
}
