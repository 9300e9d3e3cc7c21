package backfill

import (
	"bytes"
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

// TestDecodeNodeHostileCountAllocatesNothing: a node block claiming the
// most entries a node may have, over bytes that hold none, costs no
// allocation: decodeNode sizes its buffer ahead of the entries only for a
// count of at most presizeEntries, so the CAR's bytes bound what decoding
// it holds (E5).
func TestDecodeNodeHostileCountAllocatesNothing(t *testing.T) {
	// {"e": [8192 entries...]} followed by bytes that are no entry.
	b := append([]byte{0xa1, 0x61, 'e', 0x99, 0x20, 0x00}, bytes.Repeat([]byte{0xff}, maxNodeEntries)...)
	var err error
	if n := testing.AllocsPerRun(10, func() { _, err = decodeNode(b, nil) }); n != 0 {
		t.Fatalf("decoding a node of %d claimed entries and none: %v allocations, want 0", maxNodeEntries, n)
	}
	if err == nil {
		t.Fatal("a node without its entries decoded")
	}
}
