package subscribe

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/backstream/backstream/archive"
)

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestQueryFilterHoldsOnlyItsStrings: a filter parsed from a query holds
// its own strings, not the query they were cut from: a query of one DID
// padded with an unknown parameter to 1 MiB leaves a filter of a few
// hundred bytes once the query is gone (under 64 KiB, the noise of a heap measurement under -race).
func TestQueryFilterHoldsOnlyItsStrings(t *testing.T) {
	const copies = 8
	raw := func(i int) string {
		return "wantedDids=" + didOf(i) + "&wantedCollections=app.bsky.feed.post&pad=" + strings.Repeat("x", 1<<20)
	}
	before := heapInUse()
	filters := make([]*filter, copies)
	for i := range filters {
		q, perr := parseQuery(raw(i))
		if perr != nil {
			t.Fatal(perr)
		}
		f, perr := newFilter(q[paramCollections], q[paramDIDs], 0)
		if perr != nil {
			t.Fatal(perr)
		}
		filters[i] = f
	}
	held := (heapInUse() - before) / copies
	runtime.KeepAlive(filters)
	t.Logf("a filter of one DID and one collection from a 1 MiB query holds %d bytes", held)
	if held > 64<<10 {
		t.Errorf("a filter of one DID and one collection from a 1 MiB query holds %d bytes of heap, want under 64 KiB: it keeps the query", held)
	}
}

// TestFilterHeldBytesBoundsHeap calibrates heldBytes against the heap: for
// filters of every shape up to the limits, built as newFilter builds them
// and with the replay plan's ranges made from them, the heap they hold
// (measured over several copies, after a collection) is at most the
// estimate, and the estimate is not far above it.
func TestFilterHeldBytesBoundsHeap(t *testing.T) {
	long := func(i int) string { // a 208-byte DID
		s := fmt.Sprintf("did:web:%d.", i)
		return s + strings.Repeat("x", 208-len(s))
	}
	list := func(n int, f func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		collections []string
		dids        []string
		copies      int
	}{
		{"10000 did:plc", nil, list(MaxWantedDIDs, didOf), 4},
		{"10000 long DIDs", nil, list(MaxWantedDIDs, long), 4},
		{"1000 did:plc", nil, list(1000, didOf), 16},
		{"897 did:plc", nil, list(897, didOf), 16}, // one past a table's split: the emptiest tables
		{"458 did:plc", nil, list(458, didOf), 32}, // just past a table's growth
		{"1 did:plc", nil, list(1, didOf), 256},
		{"100 collections", list(MaxWantedCollections, func(i int) string { return fmt.Sprintf("com.example.c%d.record", i) }), nil, 64},
		{"100 long prefixes", list(MaxWantedCollections, func(i int) string {
			return fmt.Sprintf("com.example%d.", i) + strings.Repeat("a", 60) + ".*"
		}), nil, 64},
		{"every limit", list(MaxWantedCollections, func(i int) string { return fmt.Sprintf("com.example.c%d.record", i) }), list(MaxWantedDIDs, long), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			filters := make([]*filter, tc.copies)
			plans := make([][]archive.IndexRange, tc.copies)
			before := heapInUse()
			for i := range filters {
				f, perr := newFilter(tc.collections, tc.dids, 0)
				if perr != nil {
					t.Fatal(perr)
				}
				filters[i] = f
				plans[i] = didRanges(f)
				if f.prefixes == nil && f.exact != nil {
					cr, err := collectionRanges(nil, f) // exact collections only: the store is not read
					if err != nil {
						t.Fatal(err)
					}
					plans[i] = append(plans[i], cr...)
				}
			}
			// Less the filter struct, which heldBytes leaves to the fixed
			// cost of a connection.
			measured := (heapInUse()-before)/int64(tc.copies) - int64(unsafe.Sizeof(filter{}))
			runtime.KeepAlive(filters)
			runtime.KeepAlive(plans)
			held := filters[0].held
			entries := len(filters[0].dids) + len(filters[0].exact) + len(filters[0].prefixes)
			t.Logf("held %d bytes, estimated %d (%.2f×); %d entries", measured, held, float64(held)/float64(max(measured, 1)), entries)
			if measured > held {
				t.Errorf("the filter and its plan hold %d bytes of heap, over the estimate %d", measured, held)
			}
			if held > 2*measured+4<<10 {
				t.Errorf("the estimate %d is over twice the %d bytes the filter and its plan hold, and 4 KiB", held, measured)
			}
		})
	}
}
