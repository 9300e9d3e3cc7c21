package subscribe

import (
	"fmt"
	"runtime"
	"strings"
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

// TestPrefixPlanHeapBounded: what a subscriber holds for a prefix
// filter's replay, its plan and the index iterator it opens, is at most
// 256 KiB (the iterator's own Pebble iterators, about 110 KB, included)
// whatever collections the archive holds under the prefix, which anyone
// on the network names: 20,000 collections under app.bsky. with names of
// 278 bytes (one account's records in each), or 200 such names; those
// plans scan. With a few collections under the prefix, or 500 of 60
// bytes, the plan still reads the index.
func TestPrefixPlanHeapBounded(t *testing.T) {
	const bound = 256 << 10
	h := newHarness(t, harnessOpts{liveBytes: 1 << 10})
	seg := strings.Repeat("a", 62)
	long := func(i int) string { return fmt.Sprintf("app.bsky.%s.%s.%s.%s.n%05d", seg, seg, seg, seg, i) }
	short := func(i int) string { return fmt.Sprintf("com.example.c%d.record", i) }
	b := h.store.DB().NewBatch()
	for i := range 20_000 {
		_ = b.Set(archive.AppendCollectionIndexKey(nil, long(i), uint64(1+i*64)), nil, nil)
	}
	for i := range 8 {
		_ = b.Set(archive.AppendCollectionIndexKey(nil, short(i), uint64(33+i*64)), nil, nil)
	}
	// Past the bound of a listing's bytes, not of its count: 200 names of
	// 278 bytes.
	for i := range 200 {
		_ = b.Set(archive.AppendCollectionIndexKey(nil, "net.long"+strings.TrimPrefix(long(i), "app.bsky"), uint64(49+i*64)), nil, nil)
	}
	// Just within the bounds of a prefix's listing: 500 names of 60 bytes.
	for i := range 500 {
		_ = b.Set(archive.AppendCollectionIndexKey(nil, fmt.Sprintf("org.edge.%s.n%03d", strings.Repeat("e", 46), i), uint64(17+i*64)), nil, nil)
	}
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	if err := h.store.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	from, to := uint64(1), uint64(1<<26)
	for _, tc := range []struct {
		pattern string
		plan    string
	}{{"app.bsky.*", planScan}, {"net.long.*", planScan}, {"com.example.*", planIndex}, {"org.edge.*", planIndex}} {
		f := planCase{collections: []string{tc.pattern}}.filter(t)
		runtime.GC()
		before := heapInUse()
		p, err := plan(h.store, f, from, to, false)
		if err != nil {
			t.Fatal(err)
		}
		ranges, err := p.rangesAt(h.store)
		if err != nil {
			t.Fatal(err)
		}
		var x *archive.IndexIter
		if ranges != nil {
			if x, err = h.store.IndexedEvents(ranges, from, to); err != nil {
				t.Fatal(err)
			}
		}
		n := len(ranges)
		ranges = nil
		held := heapInUse() - before
		runtime.KeepAlive(p)
		runtime.KeepAlive(x)
		if x != nil {
			if err := x.Close(); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("%s: plan %s over %d ranges; the plan and its iterator hold %d bytes", tc.pattern, p.name(), n, held)
		if held > bound {
			t.Errorf("%s: the plan (%s, %d ranges) and its iterator hold %d bytes of heap, over %d", tc.pattern, p.name(), n, held, bound)
		}
		if p.reexpand && p.ranges != nil {
			t.Errorf("%s: a plan that lists its prefixes again at each iterator opened keeps %d ranges meanwhile", tc.pattern, len(p.ranges))
		}
		if p.name() != tc.plan {
			t.Errorf("%s: plan %s, want %s", tc.pattern, p.name(), tc.plan)
		}
	}
}
