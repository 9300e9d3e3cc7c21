package repair

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/backstream/backstream/upstream"
)

// TestListedSetMemory: the DIDs a pass listed are held in about 8 bytes
// an account (a 64-bit hash each), so a pass over a network of 40 million
// accounts holds about 320 MiB of them, not a map's 24 to 36 bytes an
// entry (1 to 1.4 GiB); and each listed DID is found, an unlisted one not.
func TestListedSetMemory(t *testing.T) {
	const n = 1 << 20
	page := make([]upstream.RepoEntry, 1000)
	did := func(i int) string { return fmt.Sprintf("did:plc:%024d", i) }
	before := liveHeap()
	set := newListedSet(1, true)
	for i := 0; i < n; i += len(page) {
		page = page[:min(len(page), n-i)]
		for j := range page {
			page[j] = upstream.RepoEntry{DID: did(i + j)}
		}
		set.add(page)
	}
	perEntry := float64(liveHeap()-before) / n
	for i := range n {
		if !set.has(did(i)) {
			t.Fatalf("%s listed, not found", did(i))
		}
	}
	if set.has(did(n)) {
		t.Fatalf("%s not listed, found", did(n))
	}
	runtime.KeepAlive(set)
	if perEntry > 12 {
		t.Fatalf("the listed set holds %.1f bytes an account; want at most 12 (a 64-bit hash each and the slack of its growth)", perEntry)
	}
	t.Logf("%.1f bytes an account", perEntry)
}

// TestListedSetReleased: once a pass has checked its absent accounts, the
// runner holds none of the DIDs it listed: the set is not kept until the
// next pass begins (a day later, with a whole network's accounts in it).
func TestListedSetReleased(t *testing.T) {
	s, w, apply := newStore(t)
	hostsGap(apply, 1, nil)
	relay := &listing{repos: []upstream.RepoEntry{{DID: didNew, Rev: revNew, Active: true}}}
	r := stepOnce(t, Config{Store: s, Writer: w, Source: relay, Status: &countingStatus{}})
	if relay.pages.Load() != 1 {
		t.Fatalf("relay asked %d pages, want 1", relay.pages.Load())
	}
	if r.seen != nil && r.seen.held() > 0 {
		t.Fatalf("the runner holds %d listed DIDs after the pass checked its absent accounts; want none", r.seen.held())
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// held is how many DID hashes the set holds.
func (l *listedSet) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.dids)
}
