package firehose

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"

	"github.com/backstream/backstream/internal/car"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// indigoBlocks serves a blockSource to indigo's MST loader; a block absent
// from the partial tree is ipld's not-found, which the loader skips.
type indigoBlocks struct{ bs blockSource }

func (b indigoBlocks) Get(_ context.Context, c cid.Cid) (blocks.Block, error) {
	data, ok := b.bs.Get(c)
	if !ok {
		return nil, &ipld.ErrNotFound{Cid: c}
	}
	return blocks.NewBlockWithCid(data, c)
}

// trafficCommits are the #commit messages of n steps of basic traffic
// (creates, updates, deletes, several ops in one commit) over a world
// whose repos are a few hundred records deep.
func trafficCommits(t testing.TB, n int) []world.Event {
	t.Helper()
	w, err := world.Build(world.Config{Seed: 5, Accounts: 6, RecordsMean: 300, Hosts: 1})
	if err != nil {
		t.Fatal(err)
	}
	tr := w.NewTraffic(world.TrafficBasic, 9)
	var out []world.Event
	for len(out) < n {
		ev, err := tr.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.Commit != nil {
			out = append(out, ev)
		}
	}
	return out
}

// commitBlocks are the blocks of the #commit message m and its decoded
// commit.
func commitBlocks(t testing.TB, m *comatproto.SyncSubscribeRepos_Commit) (upstream.CommitBlocks, signed) {
	t.Helper()
	bs, err := upstream.ReadCommitBlocks(m.Blocks, cid.Cid(m.Commit))
	if err != nil {
		t.Fatal(err)
	}
	s, err := decodeCommit(&bs, cid.Cid(m.Commit))
	if err != nil {
		t.Fatal(err)
	}
	return bs, s
}

// indigoNode is what indigo makes of a node block: its error, or a panic
// of NodeData.Node as an error. NodeData.Node slices the previous key by
// an entry's prefix length unchecked: past the key's length but within its
// slice's spare capacity it takes whatever bytes lie there instead of
// panicking; such a node is an error here too (decodeNode refuses it), as
// is a key longer than mst.MAX_KEY_BYTES, which indigo's tree refuses to
// hold.
func indigoNode(data []byte, ref cid.Cid) (n *mst.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	nd, err := mst.NodeDataFromCBOR(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var prev int64
	for i, e := range nd.Entries {
		if e.PrefixLen > prev {
			return nil, fmt.Errorf("entry %d: prefix %d past the previous key's %d bytes", i, e.PrefixLen, prev)
		}
		prev = e.PrefixLen + int64(len(e.KeySuffix))
		if prev > mst.MAX_KEY_BYTES {
			return nil, fmt.Errorf("entry %d: a key of %d bytes", i, prev)
		}
	}
	node := nd.Node(&ref)
	return &node, nil
}

// TestLoadTreeMatchesIndigo: over the partial trees of real commits,
// loadTree builds exactly the tree mst.LoadTreeFromStore builds, and every
// node block is taken by nodeReader (none falls back to indigo).
func TestLoadTreeMatchesIndigo(t *testing.T) {
	nodes := 0
	for i, ev := range trafficCommits(t, 300) {
		m := ev.Commit
		bs, s := commitBlocks(t, m)
		commit := s.commit
		want, err := mst.LoadTreeFromStore(context.Background(), indigoBlocks{&bs}, commit.Data)
		if err != nil {
			t.Fatal(err)
		}
		got, err := loadTree(&bs, commit.Data)
		if err != nil {
			t.Fatalf("commit %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("commit %d (%d ops): the trees differ", i, len(m.Ops))
		}
		var walk func(n *mst.Node)
		walk = func(n *mst.Node) {
			data, _ := bs.Get(*n.CID)
			r := nodeReader{b: data}
			if _, ok := r.node(*n.CID); !ok {
				t.Errorf("commit %d: node %s left to indigo (%v)", i, n.CID, r.err)
			}
			nodes++
			for _, e := range n.Entries {
				if e.Child != nil {
					walk(e.Child)
				}
			}
		}
		walk(got.Root)
	}
	if nodes < 600 {
		t.Fatalf("only %d nodes compared", nodes)
	}
}

// FuzzDecodeNode: any block decodes by decodeNode as indigo decodes it (the
// same node, or both fail). Seeds: the node blocks of real commits, and
// non-canonical variants nodeReader leaves to indigo.
func FuzzDecodeNode(f *testing.F) {
	for _, ev := range trafficCommits(f, 20) {
		r, err := car.Open(ev.Commit.Blocks)
		if err != nil {
			f.Fatal(err)
		}
		for {
			_, data, err := r.Next()
			if err != nil {
				break
			}
			if _, err := indigoNode(data, cid.Undef); err == nil {
				f.Add(data)
				f.Add(append(bytes.Clone(data), 0)) // trailing byte: indigo ignores it
			}
		}
	}
	f.Add([]byte{0xa1, 0x61, 'l', 0xf6})                                              // no "e"
	f.Add([]byte{0xa2, 0x61, 'e', 0x80, 0x61, 'l', 0xf6})                             // empty node
	f.Add([]byte{0xa2, 0x61, 'l', 0xf6, 0x61, 'e', 0x80})                             // keys out of order
	f.Add([]byte{0xa2, 0x61, 'e', 0x81, 0xa4, 0x61, 'k', 0x41, 'a', 0x61, 'p', 0x01}) // prefix past the key
	ref, _ := cid.Prefix{Version: 1, Codec: cid.DagCBOR, MhType: 0x12, MhLength: -1}.Sum([]byte("ref"))
	// Entries whose keys are not in canonical order ("p" first) go to
	// indigo's decoder, which takes a prefix past the previous key, or a
	// negative one, and panics on it in NodeData.Node.
	link := append([]byte{0xd8, 0x2a, 0x58, byte(1 + ref.ByteLen()), 0x00}, ref.Bytes()...)
	for _, p := range []byte{0x01, 0x20} { // 1 (the first key has no previous one), -1
		node := []byte{0xa2, 0x61, 'e', 0x81, 0xa4, 0x61, 'p', p, 0x61, 'k', 0x41, 'a', 0x61, 't', 0xf6, 0x61, 'v'}
		f.Add(append(append(node, link...), 0x61, 'l', 0xf6))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		want, werr := indigoNode(data, ref)
		got, gerr := decodeNode(data, ref)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("indigo: %v, decodeNode: %v (% x)", werr, gerr, data)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("nodes differ for % x:\n%+v\n%+v", data, got, want)
		}
	})
}

// TestDecodeNodeRefusesLongKeys: a node holding a key longer than
// mst.MAX_KEY_BYTES is refused, whether the key comes whole or grows by
// its prefix, from the canonical reader or through indigo's decoder (entry
// keys out of canonical order). Before, each entry's key was built whole:
// 8,192 entries each extending the last by 190 bytes, in a frame's 2 MiB,
// were 6.4 GB of keys.
func TestDecodeNodeRefusesLongKeys(t *testing.T) {
	val, _ := cid.Prefix{Version: 1, Codec: cid.DagCBOR, MhType: 0x12, MhLength: -1}.Sum([]byte("v"))
	entry := func(p int, suffix string) mst.EntryData {
		return mst.EntryData{PrefixLen: int64(p), KeySuffix: []byte(suffix), Value: val}
	}
	near := strings.Repeat("a", mst.MAX_KEY_BYTES)
	m := mapBlocks{}
	for name, nd := range map[string]mst.NodeData{
		"at the limit":    {Entries: []mst.EntryData{entry(0, near)}},
		"whole":           {Entries: []mst.EntryData{entry(0, near+"b")}},
		"by their prefix": {Entries: []mst.EntryData{entry(0, near), entry(mst.MAX_KEY_BYTES-1, "bb")}},
	} {
		ref := m.put(t, nd)
		_, err := decodeNode(m[*ref], *ref)
		if (err == nil) != (name == "at the limit") {
			t.Errorf("keys %s: %v", name, err)
		}
	}
	// {"e": [{"p": 0, "k": key, "t": null, "v": link}], "l": null}: "p"
	// first, so nodeReader leaves it to indigo's decoder.
	link := append([]byte{0xd8, 0x2a, 0x58, byte(1 + val.ByteLen()), 0x00}, val.Bytes()...)
	nonCanonical := func(key string) []byte {
		b := []byte{0xa2, 0x61, 'e', 0x81, 0xa4, 0x61, 'p', 0x00, 0x61, 'k', 0x59, byte(len(key) >> 8), byte(len(key))}
		b = append(append(b, key...), 0x61, 't', 0xf6, 0x61, 'v')
		return append(append(b, link...), 0x61, 'l', 0xf6)
	}
	if _, err := decodeNode(nonCanonical(near), val); err != nil {
		t.Errorf("a non-canonical node with a key at the limit: %v", err)
	}
	if _, err := decodeNode(nonCanonical(near+"b"), val); err == nil {
		t.Error("a non-canonical node with a key over the limit: taken")
	}
}

// mapBlocks is a blockSource over hand-made blocks.
type mapBlocks map[cid.Cid][]byte

func (m mapBlocks) Get(c cid.Cid) ([]byte, bool) {
	b, ok := m[c]
	return b, ok
}

// put encodes nd as a block of m and returns its CID.
func (m mapBlocks) put(t *testing.T, nd mst.NodeData) *cid.Cid {
	t.Helper()
	b, c, err := nd.Bytes()
	if err != nil {
		t.Fatal(err)
	}
	m[*c] = b
	return c
}

// keyOfHeight is a valid MST key at height h.
func keyOfHeight(t *testing.T, h int) []byte {
	t.Helper()
	for i := range 100000 {
		k := fmt.Appendf(nil, "app.bsky.feed.post/k%d", i)
		if mst.HeightForKey(k) == h {
			return k
		}
	}
	t.Fatalf("no key of height %d", h)
	return nil
}

// TestLoadTreeHeightsOfKeylessNodes: a node without entries of its own
// takes its height from a loaded child (one above it), and a keyless node
// whose child is absent from the frame takes its parent's less one; as
// indigo's loader does. Real commits have no such nodes; a hostile one may.
func TestLoadTreeHeightsOfKeylessNodes(t *testing.T) {
	val, _ := cid.Prefix{Version: 1, Codec: cid.DagCBOR, MhType: 0x12, MhLength: -1}.Sum([]byte("record"))
	absent, _ := cid.Prefix{Version: 1, Codec: cid.DagCBOR, MhType: 0x12, MhLength: -1}.Sum([]byte("absent"))
	bs := mapBlocks{}
	leaf := bs.put(t, mst.NodeData{Entries: []mst.EntryData{{KeySuffix: keyOfHeight(t, 0), Value: val}}})
	up := bs.put(t, mst.NodeData{Left: leaf})      // keyless, height from its child: 1
	down := bs.put(t, mst.NodeData{Left: &absent}) // keyless, child absent: from its parent
	k2 := keyOfHeight(t, 2)
	root := bs.put(t, mst.NodeData{Left: up, Entries: []mst.EntryData{{KeySuffix: k2, Value: val, Right: down}}})
	for _, tc := range []struct {
		name    string
		root    cid.Cid
		heights func(*mst.Node) []int
		want    []int
	}{
		{"keyed root", *root, func(n *mst.Node) []int {
			return []int{n.Height, n.Entries[0].Child.Height, n.Entries[2].Child.Height}
		}, []int{2, 1, 1}},
		{"keyless root", *up, func(n *mst.Node) []int { return []int{n.Height} }, []int{1}},
	} {
		want, err := mst.LoadTreeFromStore(context.Background(), indigoBlocks{bs}, tc.root)
		if err != nil {
			t.Fatal(err)
		}
		got, err := loadTree(bs, tc.root)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: trees differ:\n%s\n%s", tc.name, dumpTree(got.Root), dumpTree(want.Root))
		}
		if h := tc.heights(got.Root); !slices.Equal(h, tc.want) {
			t.Fatalf("%s: heights %v, want %v", tc.name, h, tc.want)
		}
	}
}

// dumpTree renders a tree's heights and shape for a failure message.
func dumpTree(n *mst.Node) string {
	s := fmt.Sprintf("(h%d", n.Height)
	for _, e := range n.Entries {
		switch {
		case e.Child != nil:
			s += " " + dumpTree(e.Child)
		case e.ChildCID != nil:
			s += " ->absent"
		default:
			s += " " + string(e.Key)
		}
	}
	return s + ")"
}
