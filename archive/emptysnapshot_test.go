package archive

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
)

// TestReplacementBelowEmptySnapshotIsStale: a snapshot without a record
// completes at its rev (BackfillRev) but writes no row, so it sets no
// rev/. A replacement whose snapshot is older (a lagging PDS, a host the
// account left serving its old copy) is as stale against it as against a
// snapshot with rows: refused whole, its records not brought back over
// the newer, empty one. A snapshot at or above it applies.
func TestReplacementBelowEmptySnapshotIsStale(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	w := newWriter(t, s, WriterOptions{})
	defer w.Close()
	apply(t, w, &Unit{Repos: []RepoUpdate{{DID: testDID, Fields: FieldStatus | FieldActive | FieldBackfillRev,
		State: RepoState{Status: StatusComplete, Active: true, BackfillRev: "05"}}}}) // no rows: no rev/
	replace := func(rev string) Receipt {
		return apply(t, w, &Unit{
			Replace: &Replacement{DID: testDID, Rev: rev, Final: true},
			Events:  []Event{{Kind: KindSync, DID: testDID, Rev: rev, Source: SourceRetry}, commitEv(testDID, rev, KindCreate, SourceRetry, "z")},
		})
	}
	if r := replace("03"); !errors.Is(r.Refused, ErrStaleReplacement) || r.Kept != 0 {
		t.Fatalf("a replacement at 03 over an empty snapshot at 05: %+v, want refused as stale", r)
	}
	if r := replace("07"); r.Refused != nil || r.Kept != 2 {
		t.Fatalf("a replacement at 07 over an empty snapshot at 05: %+v, want applied", r)
	}
}
