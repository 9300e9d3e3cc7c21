package backfill

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

// drops lists a snapshot's dropped entries.
func dropsOf(t *testing.T, s *Snapshot) []Drop {
	t.Helper()
	var out []Drop
	if err := s.Drops(func(d Drop) error {
		out = append(out, d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func sameDrop(a, b Drop) bool {
	return a.Path == b.Path && a.CID.Equals(b.CID) && a.Size == b.Size && a.Reason == b.Reason
}

// TestVerifyEntryTable: a snapshot verified in memory reads its records and
// drops from the table its verifying walk noted, with its block index
// dropped, and yields exactly what a walk of the tree yields (VerifyFile's):
// keys rebuilt across node boundaries, dropped entries between kept ones
// included. A tree with more entries than the CAR has blocks keeps no
// table and is walked again, with the same result.
func TestVerifyEntryTable(t *testing.T) {
	withDrops := fixtureSpec{posts: 300}
	for i, p := range []string{"app.bsky.feed.like/bad rkey", "app.bsky.feed.post/a/b", "noslash", "zzz..x/y"} {
		withDrops.extra = append(withDrops.extra, fxRecord{p, fixtureBody(t, 5000+i)})
	}
	withDrops.extra = append(withDrops.extra, fxRecord{"app.bsky.feed.post/notamap", []byte{0x01}})
	shared := fixtureSpec{posts: 2}
	for i := range 60 {
		shared.extra = append(shared.extra, fxRecord{fmt.Sprintf("app.bsky.feed.repost/k%02d", i), []byte{0xa1, 0x61, 'a', 0x01}})
	}
	for _, tc := range []struct {
		name  string
		spec  fixtureSpec
		table bool
	}{
		{"empty", fixtureSpec{}, true},
		{"deep with drops", withDrops, true},
		{"records sharing blocks", shared, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := buildFixture(t, tc.spec)
			b := f.car(t)
			s, err := VerifyBytes(context.Background(), b, f.did, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.entries != nil; got != tc.table {
				t.Fatalf("entry table kept: %v, want %v (%d entries, %d blocks)", got, tc.table, len(f.keys), s.Blocks)
			}
			if tc.table && (len(s.entries) != len(f.keys) || s.index != nil) {
				t.Fatalf("table of %d entries for %d keys, index kept: %v", len(s.entries), len(f.keys), s.index != nil)
			}
			if !tc.table && s.index == nil {
				t.Fatal("no table and no index")
			}
			fs, err := verifyFileBytes(t, b, f.did, VerifyOptions{})
			if err != nil {
				t.Fatal(err)
			}
			recs, walked := collect(t, s), collect(t, fs)
			if !slices.EqualFunc(recs, walked, sameRecord) {
				t.Fatalf("records %v\nwalked %v", recs, walked)
			}
			for _, r := range recs {
				if key := r.Collection + "/" + r.RKey; !r.CID.Equals(f.values[key]) {
					t.Fatalf("%s: CID %s, want %s", key, r.CID, f.values[key])
				}
			}
			if drops, walkedDrops := dropsOf(t, s), dropsOf(t, fs); !slices.EqualFunc(drops, walkedDrops, sameDrop) || len(drops) != s.Dropped.Total() {
				t.Fatalf("drops %v\nwalked %v", drops, walkedDrops)
			}
			if len(recs)+s.Dropped.Total() != len(f.keys) {
				t.Fatalf("%d records and %d drops of %d keys", len(recs), s.Dropped.Total(), len(f.keys))
			}
		})
	}
}
