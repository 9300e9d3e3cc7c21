// verify_fixture_test.go builds real signed repository CARs with indigo's
// MST for the verifier's tests, and lets a test cut, omit, tamper with or
// replace any block.

package backfill

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	"github.com/ipld/go-car"
	carutil "github.com/ipld/go-car/util"
	"github.com/multiformats/go-multihash"
)

const fixtureDID = "did:plc:verifyfixture0000000000a"

// fxBlock is one CAR block.
type fxBlock struct {
	c    cid.Cid
	data []byte
}

// fxRecord is a record placed at an arbitrary MST key.
type fxRecord struct {
	path string
	body []byte
}

// fxNode describes one MST node of a fixture.
type fxNode struct {
	c        cid.Cid
	height   int
	depth    int // 0 for the root
	children int
}

// fixtureSpec says what repository to build.
type fixtureSpec struct {
	did   string     // default fixtureDID
	posts int        // generated records, spread over three collections
	extra []fxRecord // records at given keys (may be invalid paths)
	rev   string     // commit rev; default a fixed valid TID
	key   atcrypto.PrivateKey
	// sha512 lists paths whose record CID uses sha2-512 instead of sha2-256.
	sha512 []string
}

// fixture is a built repository: its blocks and what they mean.
type fixture struct {
	did       string
	priv      atcrypto.PrivateKey
	pub       atcrypto.PublicKey
	commit    repo.Commit
	commitBlk fxBlock
	root      cid.Cid   // MST root
	nodes     []fxNode  // pre-order, root first
	nodeBlks  []fxBlock // same order
	records   []fxBlock // record blocks in key order, deduplicated
	keys      []string  // every MST key, sorted
	values    map[string]cid.Cid
}

var (
	fixtureKeyOnce sync.Once
	fixtureKey     *atcrypto.PrivateKeyK256
)

// sharedKey is one K256 key for all fixtures (generation is not free).
func sharedKey(t testing.TB) atcrypto.PrivateKey {
	fixtureKeyOnce.Do(func() {
		k, err := atcrypto.GeneratePrivateKeyK256()
		if err != nil {
			panic(err)
		}
		fixtureKey = k
	})
	return fixtureKey
}

func cborCID(t testing.TB, b []byte) cid.Cid {
	c, err := cid.NewPrefixV1(cid.DagCBOR, multihash.SHA2_256).Sum(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// fixturePath returns the MST key of generated record i: mostly posts, some
// likes, one profile "self" (a non-TID rkey).
func fixturePath(i int) string {
	if i == 0 {
		return "app.bsky.actor.profile/self"
	}
	tid := syntax.NewTID(1_700_000_000_000_000+int64(i)*1000, 0)
	if i%5 == 0 {
		return "app.bsky.feed.like/" + tid.String()
	}
	return "app.bsky.feed.post/" + tid.String()
}

func fixtureBody(t testing.TB, i int) []byte {
	b, err := atdata.MarshalCBOR(map[string]any{
		"$type":     "app.bsky.feed.post",
		"text":      fmt.Sprintf("post number %d with some text to make it realistic in size", i),
		"createdAt": "2024-01-01T00:00:00.000Z",
		"langs":     []any{"en"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func buildFixture(t testing.TB, spec fixtureSpec) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{did: spec.did, priv: spec.key, values: map[string]cid.Cid{}}
	if f.did == "" {
		f.did = fixtureDID
	}
	if f.priv == nil {
		f.priv = sharedKey(t)
	}
	pub, err := f.priv.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	f.pub = pub

	bodies := map[cid.Cid][]byte{}
	tree := mst.NewEmptyTree()
	add := func(path string, body []byte) {
		c := cborCID(t, body)
		if slices.Contains(spec.sha512, path) {
			var err error
			if c, err = cid.NewPrefixV1(cid.DagCBOR, multihash.SHA2_512).Sum(body); err != nil {
				t.Fatal(err)
			}
		}
		bodies[c] = body
		if _, err := tree.Insert([]byte(path), c); err != nil {
			t.Fatalf("insert %q: %v", path, err)
		}
		f.values[path] = c
	}
	for i := 0; i < spec.posts; i++ {
		add(fixturePath(i), fixtureBody(t, i))
	}
	for _, r := range spec.extra {
		add(r.path, r.body)
	}

	bs := newMemBlockstore()
	root, err := tree.WriteDiffBlocks(ctx, bs)
	if err != nil {
		t.Fatal(err)
	}
	f.root = *root
	f.collectNodes(t, bs, f.root, -1, 0)

	for k := range f.values {
		f.keys = append(f.keys, k)
	}
	sort.Strings(f.keys)
	seen := map[cid.Cid]bool{}
	for _, k := range f.keys {
		c := f.values[k]
		if !seen[c] {
			seen[c] = true
			f.records = append(f.records, fxBlock{c, bodies[c]})
		}
	}

	rev := spec.rev
	if rev == "" {
		rev = syntax.NewTID(1_800_000_000_000_000, 0).String()
	}
	f.commit = repo.Commit{DID: f.did, Version: repo.ATPROTO_REPO_VERSION, Data: f.root, Rev: rev}
	f.resign(t)
	return f
}

// resign signs f.commit (as edited) with f.priv and rebuilds its block.
func (f *fixture) resign(t testing.TB) {
	t.Helper()
	f.commit.Sig = nil
	if err := f.commit.Sign(f.priv); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := f.commit.MarshalCBOR(&buf); err != nil {
		t.Fatal(err)
	}
	f.commitBlk = fxBlock{cborCID(t, buf.Bytes()), buf.Bytes()}
}

func (f *fixture) collectNodes(t testing.TB, bs *memBlockstore, c cid.Cid, height, depth int) {
	blk, err := bs.Get(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	nd, err := mst.NodeDataFromCBOR(bytes.NewReader(blk.RawData()))
	if err != nil {
		t.Fatal(err)
	}
	if height < 0 {
		height = 0
		if len(nd.Entries) > 0 {
			height = mst.HeightForKey(nd.Entries[0].KeySuffix)
		}
	}
	var kids []cid.Cid
	if nd.Left != nil {
		kids = append(kids, *nd.Left)
	}
	for _, e := range nd.Entries {
		if e.Right != nil {
			kids = append(kids, *e.Right)
		}
	}
	f.nodes = append(f.nodes, fxNode{c: c, height: height, depth: depth, children: len(kids)})
	f.nodeBlks = append(f.nodeBlks, fxBlock{c, blk.RawData()})
	for _, k := range kids {
		f.collectNodes(t, bs, k, height-1, depth+1)
	}
}

// blocks returns the CAR's blocks in the usual order: commit, MST nodes
// pre-order, records in key order.
func (f *fixture) blocks() []fxBlock {
	out := []fxBlock{f.commitBlk}
	out = append(out, f.nodeBlks...)
	return append(out, f.records...)
}

// interiorNode returns a non-root node that has children, or fails.
func (f *fixture) interiorNode(t testing.TB) fxNode {
	for _, n := range f.nodes {
		if n.depth > 0 && n.children > 0 {
			return n
		}
	}
	t.Fatalf("fixture has no interior node below the root (%d nodes)", len(f.nodes))
	return fxNode{}
}

// car encodes the fixture as a CAR v1 with the commit as root.
func (f *fixture) car(t testing.TB) []byte {
	return writeCAR(t, []cid.Cid{f.commitBlk.c}, f.blocks())
}

// without returns the blocks minus those with CID c.
func without(bl []fxBlock, c cid.Cid) []fxBlock {
	out := make([]fxBlock, 0, len(bl))
	for _, b := range bl {
		if !b.c.Equals(c) {
			out = append(out, b)
		}
	}
	return out
}

// replaced returns the blocks with c's bytes replaced (the CID kept).
func replaced(bl []fxBlock, c cid.Cid, data []byte) []fxBlock {
	out := make([]fxBlock, len(bl))
	for i, b := range bl {
		if b.c.Equals(c) {
			b.data = data
		}
		out[i] = b
	}
	return out
}

func writeCAR(t testing.TB, roots []cid.Cid, bl []fxBlock) []byte {
	var buf bytes.Buffer
	if err := car.WriteHeader(&car.CarHeader{Roots: roots, Version: 1}, &buf); err != nil {
		t.Fatal(err)
	}
	for _, b := range bl {
		if err := carutil.LdWrite(&buf, b.c.Bytes(), b.data); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// memBlockstore is the full blockstore WriteDiffBlocks needs.
type memBlockstore struct{ m map[string]blocks.Block }

func newMemBlockstore() *memBlockstore { return &memBlockstore{m: map[string]blocks.Block{}} }

func (b *memBlockstore) DeleteBlock(_ context.Context, c cid.Cid) error {
	delete(b.m, c.KeyString())
	return nil
}
func (b *memBlockstore) Has(_ context.Context, c cid.Cid) (bool, error) {
	_, ok := b.m[c.KeyString()]
	return ok, nil
}
func (b *memBlockstore) Get(_ context.Context, c cid.Cid) (blocks.Block, error) {
	blk, ok := b.m[c.KeyString()]
	if !ok {
		return nil, &ipld.ErrNotFound{Cid: c}
	}
	return blk, nil
}
func (b *memBlockstore) GetSize(ctx context.Context, c cid.Cid) (int, error) {
	blk, err := b.Get(ctx, c)
	if err != nil {
		return 0, err
	}
	return len(blk.RawData()), nil
}
func (b *memBlockstore) Put(_ context.Context, blk blocks.Block) error {
	b.m[blk.Cid().KeyString()] = blk
	return nil
}
func (b *memBlockstore) PutMany(ctx context.Context, bl []blocks.Block) error {
	for _, blk := range bl {
		b.m[blk.Cid().KeyString()] = blk
	}
	return nil
}
func (b *memBlockstore) AllKeysChan(context.Context) (<-chan cid.Cid, error) {
	ch := make(chan cid.Cid, len(b.m))
	for _, blk := range b.m {
		ch <- blk.Cid()
	}
	close(ch)
	return ch, nil
}
func (b *memBlockstore) HashOnRead(bool) {}
