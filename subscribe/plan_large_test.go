package subscribe

import (
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestPlanIndexOnLargeSpans: on a long span the plan compares the
// estimate with 1/16 of the span, not with the count's cap: a collection
// holding 1,114,112 seqs (17 runs of 65,536; runs stay after compaction)
// in a span of 2^26 seqs (1/60 of it) reads the index. Compared with the
// cap, anything past 2^20 rows scanned whatever the span: a 1 % collection
// of a billion-event archive read all of it.
func TestPlanIndexOnLargeSpans(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 1 << 10})
	const coll = "com.example.big"
	prefix := archive.AppendIndexPrefix(nil, archive.PrefixByCollection, coll)
	b := h.store.DB().NewBatch()
	const runs = 17
	for i := uint64(0); i < runs; i++ {
		first := 1 + i*(1<<21)
		_ = b.Set(archive.AppendIndexRunKey(nil, prefix, first, first+archive.MaxIndexRun-1), nil, nil)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if err := h.store.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	from, to := uint64(1), uint64(1<<26)
	f := planCase{collections: []string{coll}}.filter(t)
	ranges, err := collectionRanges(h.store, f)
	if err != nil {
		t.Fatal(err)
	}
	n, exact, err := h.store.EstimateIndex(ranges, from, to, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rows in the index ranges: %d (exact %v); span %d, 1/16 of it %d", n, exact, to-from, (to-from)/planRatio)
	if n >= (to-from)/planRatio {
		t.Fatalf("setup: %d rows is not under 1/16 of the span", n)
	}
	p, err := plan(h.store, f, from, to, false)
	if err != nil {
		t.Fatal(err)
	}
	if p.name() != planIndex {
		t.Fatalf("plan %s for %d rows in a span of %d seqs (1/%d of it), want index", p.name(), n, to-from, (to-from)/n)
	}
}
