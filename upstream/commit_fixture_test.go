// commit_fixture_test.go builds real, signed sync-1.1 #commit events with
// atproto/repo/mst, for the frame and commit-op tests and the fuzz seeds.

package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	car "github.com/ipld/go-car"
	carutil "github.com/ipld/go-car/util"
	"github.com/multiformats/go-multihash"
)

// memBlockstore is the full go-ipfs-blockstore interface over a map, in
// insertion order (so CARs are deterministic).
type memBlockstore struct {
	m     map[cid.Cid]blocks.Block
	order []cid.Cid
}

func newMemBlockstore() *memBlockstore { return &memBlockstore{m: map[cid.Cid]blocks.Block{}} }

func (b *memBlockstore) DeleteBlock(_ context.Context, c cid.Cid) error { delete(b.m, c); return nil }
func (b *memBlockstore) Has(_ context.Context, c cid.Cid) (bool, error) {
	_, ok := b.m[c]
	return ok, nil
}
func (b *memBlockstore) Get(_ context.Context, c cid.Cid) (blocks.Block, error) {
	blk, ok := b.m[c]
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
	if _, ok := b.m[blk.Cid()]; !ok {
		b.order = append(b.order, blk.Cid())
	}
	b.m[blk.Cid()] = blk
	return nil
}
func (b *memBlockstore) PutMany(ctx context.Context, bs []blocks.Block) error {
	for _, blk := range bs {
		b.Put(ctx, blk)
	}
	return nil
}
func (b *memBlockstore) AllKeysChan(context.Context) (<-chan cid.Cid, error) {
	ch := make(chan cid.Cid, len(b.order))
	for _, c := range b.order {
		ch <- c
	}
	close(ch)
	return ch, nil
}
func (b *memBlockstore) HashOnRead(bool) {}

func cborBlock(t testing.TB, data []byte) blocks.Block {
	t.Helper()
	c, err := cid.NewPrefixV1(cid.DagCBOR, multihash.SHA2_256).Sum(data)
	if err != nil {
		t.Fatal(err)
	}
	blk, err := blocks.NewBlockWithCid(data, c)
	if err != nil {
		t.Fatal(err)
	}
	return blk
}

func record(t testing.TB, text string) blocks.Block {
	t.Helper()
	b, err := atdata.MarshalCBOR(map[string]any{
		"$type":     "app.bsky.feed.post",
		"text":      text,
		"createdAt": "2024-01-02T03:04:05.678Z",
	})
	if err != nil {
		t.Fatal(err)
	}
	return cborBlock(t, b)
}

// writeCAR writes a CARv1 with the given root and blocks.
func writeCAR(t testing.TB, root cid.Cid, blks []blocks.Block) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := car.WriteHeader(&car.CarHeader{Roots: []cid.Cid{root}, Version: 1}, &buf); err != nil {
		t.Fatal(err)
	}
	for _, b := range blks {
		if err := carutil.LdWrite(&buf, b.Cid().Bytes(), b.RawData()); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

// commitFixture is a second commit of a small repo: update one post, delete
// a like, create a post, as a signed #commit with sync-1.1 proof blocks.
type commitFixture struct {
	evt     *comatproto.SyncSubscribeRepos_Commit
	pub     atcrypto.PublicKey
	records map[string][]byte // path → record bytes for creates/updates
	blocks  []blocks.Block    // in CAR order: commit first
	commit  blocks.Block
}

func buildCommit(t testing.TB) *commitFixture {
	t.Helper()
	ctx := context.Background()
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := priv.PublicKey()
	did := testDID
	clk := syntax.NewTIDClock(0)
	tree := mst.NewEmptyTree()
	full := newMemBlockstore()

	// Commit 1: ten posts and a like.
	var postPaths []string
	for i := 0; i < 10; i++ {
		rec := record(t, fmt.Sprintf("post %d", i))
		full.Put(ctx, rec)
		p := "app.bsky.feed.post/" + clk.Next().String()
		postPaths = append(postPaths, p)
		c := rec.Cid()
		if _, err := repo.ApplyOp(&tree, p, &c); err != nil {
			t.Fatal(err)
		}
	}
	like := cborBlock(t, mustCBOR(t, map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-02T03:04:05.678Z"}))
	full.Put(ctx, like)
	likePath := "app.bsky.feed.like/" + clk.Next().String()
	lc := like.Cid()
	if _, err := repo.ApplyOp(&tree, likePath, &lc); err != nil {
		t.Fatal(err)
	}
	data1, err := tree.WriteDiffBlocks(ctx, full)
	if err != nil {
		t.Fatal(err)
	}
	rev1 := clk.Next().String()

	// Commit 2: update post 3, delete the like, create a new post.
	diff := newMemBlockstore()
	var ops []*comatproto.SyncSubscribeRepos_RepoOp
	records := map[string][]byte{}
	addOp := func(action, path string, val blocks.Block) {
		var vc *cid.Cid
		if val != nil {
			c := val.Cid()
			vc = &c
			records[path] = val.RawData()
		}
		op, err := repo.ApplyOp(&tree, path, vc)
		if err != nil {
			t.Fatal(err)
		}
		rop := &comatproto.SyncSubscribeRepos_RepoOp{Action: action, Path: path}
		if vc != nil {
			l := lexutil.LexLink(*vc)
			rop.Cid = &l
		}
		if op.Prev != nil {
			l := lexutil.LexLink(*op.Prev)
			rop.Prev = &l
		}
		ops = append(ops, rop)
	}
	upd := record(t, "post 3, edited")
	addOp(ActionUpdate, postPaths[3], upd)
	addOp(ActionDelete, likePath, nil)
	created := record(t, "a new post")
	newPath := "app.bsky.feed.post/" + clk.Next().String()
	addOp(ActionCreate, newPath, created)

	data2, err := tree.WriteDiffBlocks(ctx, diff)
	if err != nil {
		t.Fatal(err)
	}
	rev2 := clk.Next().String()
	com := repo.Commit{DID: did, Version: repo.ATPROTO_REPO_VERSION, Data: *data2, Rev: rev2}
	if err := com.Sign(priv); err != nil {
		t.Fatal(err)
	}
	var cb bytes.Buffer
	if err := com.MarshalCBOR(&cb); err != nil {
		t.Fatal(err)
	}
	commitBlk := cborBlock(t, cb.Bytes())
	blks := []blocks.Block{commitBlk}
	for _, c := range diff.order {
		blks = append(blks, diff.m[c])
	}
	blks = append(blks, upd, created)

	prevData := lexutil.LexLink(*data1)
	evt := &comatproto.SyncSubscribeRepos_Commit{
		Repo:     did,
		Rev:      rev2,
		Since:    &rev1,
		Seq:      12345,
		Time:     time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC).Format(time.RFC3339Nano),
		Commit:   lexutil.LexLink(commitBlk.Cid()),
		Blocks:   writeCAR(t, commitBlk.Cid(), blks),
		Ops:      ops,
		PrevData: &prevData,
		Blobs:    []lexutil.LexLink{},
	}
	return &commitFixture{evt: evt, pub: pub, records: records, blocks: blks, commit: commitBlk}
}

func mustCBOR(t testing.TB, m map[string]any) []byte {
	t.Helper()
	b, err := atdata.MarshalCBOR(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCommitFixtureIsReal proves the fixture is a valid sync-1.1 commit:
// indigo's own verifier accepts it (inversion against prevData included)
// and its signature checks.
func TestCommitFixtureIsReal(t *testing.T) {
	f := buildCommit(t)
	if _, err := repo.VerifyCommitMessage(context.Background(), f.evt); err != nil {
		t.Fatalf("VerifyCommitMessage: %v", err)
	}
	com, _, err := repo.LoadCommitFromCAR(context.Background(), bytes.NewReader(f.evt.Blocks))
	if err != nil {
		t.Fatal(err)
	}
	if err := com.VerifySignature(f.pub); err != nil {
		t.Fatalf("signature: %v", err)
	}
	// And a tampered prevData is caught, so the check above means something.
	bad := *f.evt
	other := lexutil.LexLink(f.commit.Cid())
	bad.PrevData = &other
	if _, err := repo.VerifyCommitMessage(context.Background(), &bad); err == nil {
		t.Fatal("tampered prevData accepted")
	} else if errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
}
