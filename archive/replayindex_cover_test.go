package archive

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// TestCoverPolicy: a marker and a rare collection's row get a copy, a
// common collection's do not; whatever the rows (here a flood of
// collections never seen twice, each rare), the copies stay within
// coverBudget bytes a row and the names counted within coverNames.
func TestCoverPolicy(t *testing.T) {
	var c coverPolicy
	picked := map[string]int{}
	for i := 0; i < 100_000; i++ {
		name := "app.bsky.feed.like"
		switch {
		case i%500 == 1:
			name = "com.whtwnd.blog.entry"
		case i%500 == 2:
			name = ""
		case i%2 == 0:
			name = "app.bsky.feed.post"
		}
		if c.pick(name, 200) {
			picked[name]++
		}
	}
	if picked["app.bsky.feed.like"] > 0 || picked["app.bsky.feed.post"] > 0 || picked["com.whtwnd.blog.entry"] < 190 || picked[""] < 190 {
		t.Fatalf("picked %v of 200 rare rows and 200 markers", picked)
	}
	n := 3 * coverWindow
	for i := 0; i < n; i++ {
		c.pick(fmt.Sprintf("com.example.n%d", i), 300)
		if c.spent > c.written*coverBudget {
			t.Fatalf("after %d rows: %d bytes of copies, over %d a row", c.written, c.spent, coverBudget)
		}
	}
	if len(c.counts) > coverNames || c.spent < c.written*coverBudget-300 {
		t.Fatalf("%d names counted (at most %d); %d bytes of copies for %d rows (want the budget spent)", len(c.counts), coverNames, c.spent, c.written)
	}
}

// FuzzParseIndexEntry: what ParseIndexEntry accepts, one row's key or a
// run's, is exactly the key the writer would encode for it.
func FuzzParseIndexEntry(f *testing.F) {
	f.Add(AppendCollectionIndexKey(nil, "app.bsky.feed.post", 7))
	f.Add(AppendIndexRunKey(nil, AppendIndexPrefix(nil, PrefixByCollection, "app.bsky.feed.post"), 0x100, 0x1ff))
	f.Add(AppendIndexRunKey(nil, AppendIndexPrefix(nil, PrefixByAccount, "did:plc:abc"), 1<<40, 1<<40+0xffff))
	f.Add(AppendIndexRunKey(nil, AppendIndexPrefix(nil, PrefixMarker, MarkerName(KindIdentity)), 3, 9))
	f.Fuzz(func(t *testing.T, b []byte) {
		fam, name, first, last, err := ParseIndexEntry(b)
		if err != nil {
			return
		}
		prefix := append(append([]byte(nil), fam...), name...)
		if string(fam) == string(PrefixByCollection) {
			prefix = append(prefix, keySep)
		}
		re := binary.BigEndian.AppendUint64(prefix, first)
		if last != first {
			re = AppendIndexRunKey(nil, prefix, first, last)
		}
		if last < first || !bytes.Equal(re, b) {
			t.Fatalf("accepted non-canonical %q as [%d, %d]", b, first, last)
		}
	})
}
