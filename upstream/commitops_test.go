package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
	"unsafe"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
)

func TestCommitOpsRealCommit(t *testing.T) {
	fx := buildCommit(t)
	ops, err := CommitOps(fx.evt)
	if err != nil {
		t.Fatalf("CommitOps: %v", err)
	}
	if len(ops) != 3 {
		t.Fatalf("%d ops", len(ops))
	}
	wantActions := []string{ActionUpdate, ActionDelete, ActionCreate}
	for i, op := range ops {
		rop := fx.evt.Ops[i]
		if op.Err != nil {
			t.Fatalf("op %d: %v", i, op.Err)
		}
		if op.Action != wantActions[i] || op.Collection+"/"+op.RKey != rop.Path {
			t.Fatalf("op %d: %+v vs %+v", i, op, rop)
		}
		switch op.Action {
		case ActionDelete:
			if op.CID.Defined() || op.Record != nil || op.Prev == nil {
				t.Fatalf("delete op: %+v", op)
			}
			if op.Collection != "app.bsky.feed.like" {
				t.Fatalf("delete collection %q", op.Collection)
			}
		default:
			if !op.CID.Equals(cid.Cid(*rop.Cid)) || !bytes.Equal(op.Record, fx.records[rop.Path]) {
				t.Fatalf("op %d record mismatch", i)
			}
		}
	}
	if ops[0].Prev == nil || ops[2].Prev != nil {
		t.Fatalf("prev: update %v, create %v", ops[0].Prev, ops[2].Prev)
	}
}

func TestCommitOpsWholeCommitFailures(t *testing.T) {
	fx := buildCommit(t)
	mutate := func(fn func(c *comatproto.SyncSubscribeRepos_Commit)) *comatproto.SyncSubscribeRepos_Commit {
		c := *fx.evt
		fn(&c)
		return &c
	}
	tampered := append([]byte(nil), fx.evt.Blocks...)
	tampered[len(tampered)-5] ^= 0xff // inside the last record block
	otherRoot := record(t, "not the commit")

	cases := []struct {
		name string
		c    *comatproto.SyncSubscribeRepos_Commit
		want error
	}{
		{"nil", nil, ErrBadBlocks},
		{"empty-blocks", mutate(func(c *comatproto.SyncSubscribeRepos_Commit) { c.Blocks = nil }), ErrBadBlocks},
		{"garbage-blocks", mutate(func(c *comatproto.SyncSubscribeRepos_Commit) { c.Blocks = []byte("garbage garbage") }), ErrBadBlocks},
		{"truncated", mutate(func(c *comatproto.SyncSubscribeRepos_Commit) { c.Blocks = c.Blocks[:len(c.Blocks)-7] }), ErrBadBlocks},
		{"tampered-block", mutate(func(c *comatproto.SyncSubscribeRepos_Commit) { c.Blocks = tampered }), ErrBadBlocks},
		{"root-mismatch", mutate(func(c *comatproto.SyncSubscribeRepos_Commit) {
			c.Blocks = writeCAR(t, otherRoot.Cid(), fx.blocks)
		}), ErrCommitRootMismatch},
		{"commit-field-mismatch", mutate(func(c *comatproto.SyncSubscribeRepos_Commit) {
			c.Commit = lexutil.LexLink(otherRoot.Cid())
		}), ErrCommitRootMismatch},
		{"undefined-commit", mutate(func(c *comatproto.SyncSubscribeRepos_Commit) { c.Commit = lexutil.LexLink(cid.Undef) }), ErrCommitRootMismatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ops, err := CommitOps(tc.c)
			if !errors.Is(err, tc.want) || ops != nil {
				t.Fatalf("got %v (%d ops), want %v", err, len(ops), tc.want)
			}
		})
	}
}

func TestCommitOpsPerOpFailures(t *testing.T) {
	fx := buildCommit(t)
	// Blocks without the created record: only that op fails.
	var noCreate []blocks.Block
	for _, b := range fx.blocks {
		if !b.Cid().Equals(cid.Cid(*fx.evt.Ops[2].Cid)) {
			noCreate = append(noCreate, b)
		}
	}
	c := *fx.evt
	c.Blocks = writeCAR(t, fx.commit.Cid(), noCreate)
	good := fx.evt.Ops
	c.Ops = []*comatproto.SyncSubscribeRepos_RepoOp{
		good[0],
		good[1],
		good[2],                                // record block missing
		{Action: "create", Path: good[2].Path}, // no cid
		{Action: "upsert", Path: good[0].Path, Cid: good[0].Cid},               // bad action
		{Action: "create", Path: "not a nsid/3jzfcijpj2z2a", Cid: good[0].Cid}, // bad collection
		{Action: "create", Path: "app.bsky.feed.post/bad rkey", Cid: good[0].Cid},
		{Action: "create", Path: "app.bsky.feed.post", Cid: good[0].Cid},
		{Action: "create", Path: "app.bsky.feed.post/a/b", Cid: good[0].Cid},
		{Action: "delete", Path: "app.bsky.feed.post/.."},
		nil,
	}
	want := []error{nil, nil, ErrMissingBlock, ErrMissingBlock, ErrInvalidAction, ErrInvalidCollection,
		ErrInvalidRKey, ErrInvalidRKey, ErrInvalidRKey, ErrInvalidRKey, ErrInvalidAction}
	ops, err := CommitOps(&c)
	if err != nil {
		t.Fatalf("CommitOps: %v", err)
	}
	if len(ops) != len(want) {
		t.Fatalf("%d ops", len(ops))
	}
	for i, op := range ops {
		if want[i] == nil {
			if op.Err != nil {
				t.Errorf("op %d: unexpected %v", i, op.Err)
			}
			continue
		}
		if !errors.Is(op.Err, want[i]) {
			t.Errorf("op %d: got %v, want %v", i, op.Err, want[i])
		}
		if op.Record != nil {
			t.Errorf("op %d: failed op carries a record", i)
		}
	}
}

// TestCommitOpsCopiesEachBlockOnce: ops naming the same record block share
// one copy of it, out of the blocks, so a commit's records never take more
// memory than its blocks (a frame of 8,192 creates naming one large record
// copied it 8,192 times).
func TestCommitOpsCopiesEachBlockOnce(t *testing.T) {
	fx := buildCommit(t)
	c := *fx.evt
	c.Ops = append([]*comatproto.SyncSubscribeRepos_RepoOp(nil), fx.evt.Ops...)
	created := fx.evt.Ops[2]
	for i := range 1000 {
		c.Ops = append(c.Ops, &comatproto.SyncSubscribeRepos_RepoOp{Action: "create", Path: fmt.Sprintf("app.bsky.feed.post/dup%d", i), Cid: created.Cid})
	}
	ops, err := CommitOps(&c)
	if err != nil {
		t.Fatal(err)
	}
	shared := unsafe.SliceData(ops[2].Record)
	for i, op := range ops[3:] {
		if op.Err != nil || !bytes.Equal(op.Record, fx.records[created.Path]) {
			t.Fatalf("op %d: %v, record %x", 3+i, op.Err, op.Record)
		}
		if unsafe.SliceData(op.Record) != shared {
			t.Fatalf("op %d holds a copy of its own of the created record", 3+i)
		}
	}
	blocks := unsafe.Slice(unsafe.SliceData(c.Blocks), len(c.Blocks))
	for i, op := range ops {
		if len(op.Record) > 0 && overlaps(op.Record, blocks) {
			t.Fatalf("op %d's record aliases the blocks", i)
		}
	}
}

// overlaps reports whether a and b share memory.
func overlaps(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}
