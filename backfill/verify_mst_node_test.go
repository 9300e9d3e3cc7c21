package backfill

import (
	"bytes"
	"testing"

	"github.com/bluesky-social/indigo/atproto/repo/mst"
)

// TestDecodeNodeReusedBuffer: entries are decoded in place into the
// buffer of an earlier node, and an entry that omits its optional fields
// ("p" and "t") reads them as absent, never as what the earlier node left
// in its place.
func TestDecodeNodeReusedBuffer(t *testing.T) {
	val := cborCID(t, []byte{0xa0})
	full := nodeBlock(t, mst.NodeData{Entries: []mst.EntryData{
		{KeySuffix: []byte("a/a"), Value: val, Right: &val},
		{PrefixLen: 2, KeySuffix: []byte("b"), Value: val, Right: &val},
	}})
	first, err := decodeNode(full.data, nil)
	if err != nil || len(first.entries) != 2 || first.entries[1].prefix != 2 || first.entries[1].right == nil {
		t.Fatalf("full node: %+v, %v", first, err)
	}
	link := append([]byte{0xd8, 0x2a, 0x58, byte(len(val.Bytes()) + 1), 0x00}, val.Bytes()...)
	entry := func(key string) []byte {
		b := []byte{0xa2, 0x61, 'k', 0x40 | byte(len(key))}
		b = append(b, key...)
		return append(append(b, 0x61, 'v'), link...)
	}
	sparse := append([]byte{0xa2, 0x61, 'e', 0x82}, entry("a/c")...)
	sparse = append(sparse, entry("a/d")...)
	sparse = append(sparse, 0x61, 'l', 0xf6)
	nd, err := decodeNode(sparse, first.entries)
	if err != nil || len(nd.entries) != 2 {
		t.Fatalf("sparse node: %+v, %v", nd, err)
	}
	for i, want := range []string{"a/c", "a/d"} {
		if e := nd.entries[i]; e.prefix != 0 || e.right != nil || string(e.suffix) != want || !bytes.Equal(e.value, val.Bytes()) {
			t.Errorf("entry %d: prefix %d, right %x, key %q, value %x; want 0, none, %q, %x", i, e.prefix, e.right, e.suffix, e.value, want, val.Bytes())
		}
	}
}
