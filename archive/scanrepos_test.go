package archive

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// TestScanReposPages: ScanRepos reads repo/ a page (ScanReposPage rows)
// per iterator; across the pages' seams every row is seen once, in DID
// order, and rows written behind the walk while fn runs are not seen
// again. A malformed row in a later page stops the walk with an error
// naming its key after fn saw every row before it.
func TestScanReposPages(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	n := 2*ScanReposPage + ScanReposPage/2
	did := func(i int) string { return fmt.Sprintf("did:plc:s%023d", i) }
	var ups []RepoUpdate
	for i := range n {
		ups = append(ups, RepoUpdate{DID: did(i), Fields: FieldStatus, State: RepoState{Status: StatusPending}})
	}
	apply(t, w, &Unit{Repos: ups})

	var seen []string
	err := s.ScanRepos(func(d string, st RepoState) error {
		if len(seen) == ScanReposPage+1 {
			// A row rewritten behind the walk, between its pages.
			apply(t, w, &Unit{Repos: []RepoUpdate{{DID: did(0), Fields: FieldStatus, State: RepoState{Status: StatusComplete}}}})
		}
		seen = append(seen, d)
		return nil
	})
	if err != nil || len(seen) != n {
		t.Fatalf("scan saw %d rows, %v; want %d", len(seen), err, n)
	}
	for i, d := range seen {
		if d != did(i) {
			t.Fatalf("row %d of the scan is %s, want %s (every row once, in order)", i, d, did(i))
		}
	}

	bad := did(ScanReposPage + 7)
	if err := s.db.Set(RepoKey(bad), []byte{0xff, 0xff}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	count := 0
	err = s.ScanRepos(func(string, RepoState) error { count++; return nil })
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Kind != ErrMalformed || ke.Key != string(RepoKey(bad)) || count != ScanReposPage+7 {
		t.Fatalf("scan over a malformed row: saw %d rows, %v; want %d rows, then a malformed %s", count, err, ScanReposPage+7, RepoKey(bad))
	}
}
