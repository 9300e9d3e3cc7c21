package backfill

import (
	"context"
	"runtime"
	"testing"
)

// TestVerifySmallRepoBytes: verifying a small repository (10 records, the
// typical account of a bootstrap of many) allocates little beyond its
// block index and entry table: the walk's entry buffers are sized to the
// tree's nodes, not a fixed 16 entries (1.4 KB) per depth.
func TestVerifySmallRepoBytes(t *testing.T) {
	f := benchFixture(t, 10)
	car := f.car(t)
	verify := func() {
		if _, err := VerifyBytes(context.Background(), car, f.did, VerifyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	verify()
	const n = 100
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for range n {
		verify()
	}
	runtime.ReadMemStats(&m1)
	per := (m1.TotalAlloc - m0.TotalAlloc) / n
	t.Logf("%d bytes allocated per verification of a %d-byte CAR", per, len(car))
	if per > 4096 {
		t.Fatalf("verifying a 10-record repository allocates %d bytes, want at most 4096", per)
	}
}
