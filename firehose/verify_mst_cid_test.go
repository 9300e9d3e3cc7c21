package firehose

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
)

// sameRoot fails t unless rootCID of a and indigo's RootCID of b (the same
// tree, two copies: both record the CIDs they compute) agree: the same CID,
// or both an error.
func sameRoot(t *testing.T, what string, a, b *mst.Tree) {
	t.Helper()
	got, gotErr := rootCID(a)
	want, wantErr := b.RootCID()
	switch {
	case (gotErr == nil) != (wantErr == nil):
		t.Fatalf("%s: rootCID error %v, indigo's %v", what, gotErr, wantErr)
	case wantErr == nil && got != *want:
		t.Fatalf("%s: rootCID %s, indigo's %s", what, got, want)
	}
}

// invertedTrees are the partial MSTs of basic traffic's #commit frames
// with their ops inverted, loaded twice.
func invertedTrees(t testing.TB, n int) (a, b []*mst.Tree) {
	t.Helper()
	for _, ev := range trafficCommits(t, n) {
		m := ev.Commit
		if m.PrevData == nil {
			continue
		}
		bs, s := commitBlocks(t, m)
		var pair [2]*mst.Tree
		for k := range pair {
			tree, err := loadTree(&bs, s.commit.Data)
			if err != nil {
				t.Fatal(err)
			}
			var ops []repo.Operation
			for _, op := range m.Ops {
				ops = append(ops, repoOp(op))
			}
			if ops, err = repo.NormalizeOps(ops); err != nil {
				t.Fatal(err)
			}
			for i := range ops {
				if err := repo.InvertOp(tree, &ops[i]); err != nil {
					t.Fatal(err)
				}
			}
			pair[k] = tree
		}
		a, b = append(a, pair[0]), append(b, pair[1])
	}
	return a, b
}

// keyTree is an MST of keys (each inserted with a value made from it),
// then the first removed of them removed.
func keyTree(t testing.TB, keys [][]byte, removed int) *mst.Tree {
	t.Helper()
	tree := mst.NewEmptyTree()
	for _, k := range keys {
		if _, err := tree.Insert(k, testCID(t, string(k))); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys[:removed] {
		if _, err := tree.Remove(k); err != nil {
			t.Fatal(err)
		}
	}
	return &tree
}

// TestRootCIDMatchesIndigo: rootCID is indigo's RootCID over the partial
// trees of real commits with their ops inverted (the sync 1.1 check's
// use), and over whole trees of random
// keys of every height, built by inserts and removals, empty ones too.
func TestRootCIDMatchesIndigo(t *testing.T) {
	a, b := invertedTrees(t, 300)
	if len(a) < 100 {
		t.Fatalf("only %d commits inverted", len(a))
	}
	for i := range a {
		sameRoot(t, fmt.Sprintf("inverted commit %d", i), a[i], b[i])
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 5, 30, 200, 2000} {
		keys := make([][]byte, n)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "app.bsky.feed.post/%013d", rng.Int64N(1e13))
		}
		for _, removed := range []int{0, n / 2, n} {
			what := fmt.Sprintf("%d keys, %d removed", n, removed)
			sameRoot(t, what, keyTree(t, keys, removed), keyTree(t, keys, removed))
		}
	}
}

// FuzzRootCID: a tree of any valid keys (the input split at zero bytes;
// the first byte says how many are removed again) has indigo's root CID.
// Run with: go test ./firehose -fuzz FuzzRootCID
func FuzzRootCID(f *testing.F) {
	f.Add([]byte("\x01a/1\x00a/2\x00b/3\x00zzzzzzzzzzzzzzzz/4"))
	f.Add([]byte("\x00app.bsky.feed.post/1\x00app.bsky.feed.like/2"))
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		seen := map[string]bool{}
		var keys [][]byte
		for _, k := range bytes.Split(in[1:], []byte{0}) {
			if mst.IsValidKey(k) && !seen[string(k)] {
				seen[string(k)] = true
				keys = append(keys, k)
			}
		}
		removed := min(int(in[0]), len(keys))
		sameRoot(t, fmt.Sprintf("%q", keys), keyTree(t, keys, removed), keyTree(t, keys, removed))
	})
}
