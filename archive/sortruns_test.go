package archive

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSortIndexMatchesSort checks the writer's sort of index entries
// against a plain sort, on the orders a batch has: units in key order
// (runs that do not overlap), runs that overlap (one record's versions in
// two units, tomb/ keys among rec/ ones), and scattered live entries.
func TestSortIndexMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var tr tombResolver // reused: stale scratch must not leak into a sort
	for trial := range 400 {
		var buf []byte
		var idx []idxEntry
		units := 1 + rng.IntN(40)
		seq := uint64(1)
		for range units {
			did := fmt.Sprintf("did:plc:%04d", rng.IntN(60)) // accounts recur: runs may overlap
			n := 1 + rng.IntN(30)
			for r := range n {
				k0 := len(buf)
				if rng.IntN(50) == 0 {
					buf = AppendTombKey(buf, did, seq)
				} else {
					rkey := fmt.Sprintf("3l%05d", r*7)
					if trial%3 == 0 { // live: scattered
						rkey = fmt.Sprintf("3l%05d", rng.IntN(1000))
					}
					buf = AppendRecordKey(buf, did, "app.bsky.feed.post", rkey, seq)
				}
				k1 := len(buf)
				buf = append(buf, byte(seq))
				idx = append(idx, idxEntry{k0: k0, k1: k1, v1: len(buf)})
				seq++
			}
		}
		want := slices.Clone(idx)
		slices.SortFunc(want, func(x, y idxEntry) int { return bytes.Compare(buf[x.k0:x.k1], buf[y.k0:y.k1]) })
		tr.sortIndex(buf, idx)
		if !slices.Equal(idx, want) {
			t.Fatalf("trial %d (%d units, %d entries): sortIndex order differs from a sort", trial, units, len(idx))
		}
	}
}

// TestSortNamedMatchesSort checks the replay index's sort against a plain
// sort: entries staged in seq order in stretches of one name (a repo's
// collections), short stretches, and entries out of seq order.
func TestSortNamedMatchesSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	names := []string{"app.bsky.feed.like", "app.bsky.feed.post", "app.bsky.feed.repost", "app.bsky.graph.follow", "z"}
	var tmp []collEntry
	var spans []span
	for trial := range 400 {
		var es []collEntry
		seq := uint64(1)
		for range 1 + rng.IntN(40) {
			for _, name := range names[rng.IntN(len(names)):] { // a repo: its collections in order
				for range 1 + rng.IntN(20) {
					es = append(es, collEntry{name: name, seq: seq, v0: int(seq)})
					seq += 1 + uint64(rng.IntN(2))
				}
			}
		}
		if trial%4 == 0 { // out of seq order
			i, j := rng.IntN(len(es)), rng.IntN(len(es))
			es[i].seq, es[j].seq = es[j].seq, es[i].seq
		}
		if trial%5 == 0 { // short stretches
			rng.Shuffle(len(es), func(i, j int) { es[i].name, es[j].name = es[j].name, es[i].name })
		}
		want := slices.Clone(es)
		slices.SortFunc(want, compareCollEntry)
		tmp, spans = sortNamed[string](es, tmp, spans, compareCollEntry)
		if !slices.Equal(es, want) {
			t.Fatalf("trial %d (%d entries): sortNamed order differs from a sort", trial, len(es))
		}
	}
}
