package backfill

import (
	"bufio"
	"bytes"
	"context"
	"testing"
)

// TestCountSectionsInMemory: a CAR held in memory is counted from the
// slice itself, with no read buffer allocated, to the same count as the
// buffered file path gives, for the whole CAR and for every cut of it (a
// cut ends the count at the section it breaks).
func TestCountSectionsInMemory(t *testing.T) {
	b := buildFixture(t, fixtureSpec{posts: 12}).car(t)
	ctx := context.Background()
	if n := countSections(ctx, &sliceReader{b: b}); n < 12 {
		t.Fatalf("whole CAR: %d sections, want at least 12", n)
	}
	for cut := 0; cut <= len(b); cut++ {
		want := countSections(ctx, bufio.NewReaderSize(bytes.NewReader(b[:cut]), fileReadBuffer))
		if got := countSections(ctx, &sliceReader{b: b[:cut]}); got != want {
			t.Fatalf("CAR cut at %d of %d bytes: %d sections in memory, %d buffered", cut, len(b), got, want)
		}
	}
	r := &sliceReader{}
	allocs := testing.AllocsPerRun(20, func() {
		r.b = b
		countSections(ctx, r)
	})
	if allocs != 0 {
		t.Fatalf("in-memory count: %.0f allocations, want 0", allocs)
	}
}
