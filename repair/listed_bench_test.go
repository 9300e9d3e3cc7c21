package repair

import (
	"fmt"
	"testing"

	"github.com/backstream/backstream/upstream"
)

// BenchmarkListedSet: a pass's listed set over 2^20 accounts: every DID
// added a page of 1,000 at a time, then each looked up once, as the check
// of absent accounts does for every repo/ row.
func BenchmarkListedSet(b *testing.B) {
	const n = 1 << 20
	dids := make([]upstream.RepoEntry, n)
	for i := range dids {
		dids[i] = upstream.RepoEntry{DID: fmt.Sprintf("did:plc:%024d", i)}
	}
	b.ReportAllocs()
	for b.Loop() {
		set := newListedSet(1, true)
		for i := 0; i < n; i += 1000 {
			set.add(dids[i:min(i+1000, n)])
		}
		for i := range dids {
			if !set.has(dids[i].DID) {
				b.Fatal("not found")
			}
		}
	}
}
