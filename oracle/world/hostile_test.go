package world

import (
	"bytes"
	"context"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
	car "github.com/ipld/go-car"
)

// worldState is everything a one-off commit must leave untouched.
type worldState struct {
	acct    Account
	records map[string]cid.Cid
	car     []byte
}

func stateOf(t *testing.T, w *World, did string) worldState {
	t.Helper()
	b, acct, err := w.RepoCAR(did)
	if err != nil {
		t.Fatal(err)
	}
	return worldState{acct: acct, records: w.Records(did), car: append([]byte(nil), b...)}
}

// decodeOneOff reads a #commit's blocks without indigo's structure checks:
// the signed commit (whatever its rev), and the MST it names.
func decodeOneOff(t *testing.T, c *comatproto.SyncSubscribeRepos_Commit) (repo.Commit, *mst.Tree, *repo.TinyBlockstore) {
	t.Helper()
	ctx := context.Background()
	cr, err := car.NewCarReader(bytes.NewReader(c.Blocks))
	if err != nil {
		t.Fatal(err)
	}
	if len(cr.Header.Roots) != 1 || cr.Header.Roots[0] != cid.Cid(c.Commit) {
		t.Fatalf("blocks roots %v, commit %s", cr.Header.Roots, cid.Cid(c.Commit))
	}
	bs := repo.NewTinyBlockstore()
	for {
		blk, err := cr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := bs.Put(ctx, blk); err != nil {
			t.Fatal(err)
		}
	}
	blk, err := bs.Get(ctx, cid.Cid(c.Commit))
	if err != nil {
		t.Fatal(err)
	}
	var commit repo.Commit
	if err := commit.UnmarshalCBOR(bytes.NewReader(blk.RawData())); err != nil {
		t.Fatal(err)
	}
	tree, err := mst.LoadTreeFromStore(ctx, bs, commit.Data)
	if err != nil {
		t.Fatalf("load MST from one-off blocks: %v", err)
	}
	return commit, tree, bs
}

// checkOneOff proves everything but the intended defect is valid: the signed
// commit names did and rev, its signature verifies against the account's
// DID-document key, Since/PrevData name the state before, every op's record
// is in the blocks, and inverting the ops gives PrevData.
func checkOneOff(t *testing.T, c *comatproto.SyncSubscribeRepos_Commit, before worldState) {
	t.Helper()
	commit, tree, bs := decodeOneOff(t, c)
	if commit.DID != before.acct.DID || commit.Rev != c.Rev || commit.Version != repo.ATPROTO_REPO_VERSION {
		t.Fatalf("commit did %s rev %q version %d; message repo %s rev %q", commit.DID, commit.Rev, commit.Version, c.Repo, c.Rev)
	}
	pub, err := atcrypto.ParsePublicMultibase(before.acct.PublicKeyMultibase)
	if err != nil {
		t.Fatal(err)
	}
	if err := commit.VerifySignature(pub); err != nil {
		t.Fatalf("one-off commit not signed by the account's key: %v", err)
	}
	if c.Since == nil || *c.Since != before.acct.Rev || c.PrevData == nil || cid.Cid(*c.PrevData) != before.acct.Data {
		t.Fatalf("since %v prevData %v, want %s %s", c.Since, c.PrevData, before.acct.Rev, before.acct.Data)
	}
	if _, err := syntax.ParseDatetime(c.Time); err != nil {
		t.Fatal(err)
	}
	inv := tree.Copy()
	for _, op := range c.Ops {
		if op.Action != "create" || op.Cid == nil || op.Prev != nil {
			t.Fatalf("op %+v", op)
		}
		if _, err := bs.Get(context.Background(), cid.Cid(*op.Cid)); err != nil {
			t.Fatalf("record of %s missing from blocks: %v", op.Path, err)
		}
		v := cid.Cid(*op.Cid)
		if err := repo.InvertOp(&inv, &repo.Operation{Path: op.Path, Value: &v}); err != nil {
			t.Fatalf("invert %s: %v", op.Path, err)
		}
	}
	root, err := inv.RootCID()
	if err != nil {
		t.Fatal(err)
	}
	if *root != before.acct.Data {
		t.Fatalf("inverted root %s, prevData %s", root, before.acct.Data)
	}
}

// checkUnchanged proves the world did not apply a one-off commit, and that
// the next valid commit chains from the state before it.
func checkUnchanged(t *testing.T, w *World, before worldState, hostileRev string) {
	t.Helper()
	ctx := context.Background()
	did := before.acct.DID
	after := stateOf(t, w, did)
	if !reflect.DeepEqual(after.acct, before.acct) {
		t.Fatalf("one-off commit changed the account: %+v -> %+v", before.acct, after.acct)
	}
	if d := diffRecords(after.records, before.records); d != "" {
		t.Fatalf("one-off commit changed the records: %s", d)
	}
	if !bytes.Equal(after.car, before.car) {
		t.Fatal("one-off commit changed the served CAR")
	}
	ev, err := w.CreateRecord(did, "com.example.thing", "", map[string]any{"$type": "com.example.thing", "n": int64(1)})
	if err != nil {
		t.Fatal(err)
	}
	c := ev.Commit
	if ev.Invalid != "" || c.Since == nil || *c.Since != before.acct.Rev || cid.Cid(*c.PrevData) != before.acct.Data {
		t.Fatalf("next valid commit: invalid %q since %v prevData %v, want %s %s", ev.Invalid, c.Since, c.PrevData, before.acct.Rev, before.acct.Data)
	}
	if c.Rev <= before.acct.Rev || (hostileRev != InvalidRevValue && c.Rev <= hostileRev) {
		t.Fatalf("next valid rev %s, previous %s, hostile %s", c.Rev, before.acct.Rev, hostileRev)
	}
	if _, err := repo.VerifyCommitMessage(ctx, c); err != nil {
		t.Fatalf("next valid commit: VerifyCommitMessage: %v", err)
	}
	if err := repo.VerifyCommitSignature(ctx, mockDirectory(t, w), c); err != nil {
		t.Fatalf("next valid commit: signature: %v", err)
	}
}

func TestSigningKeyMatchesDIDDocumentKey(t *testing.T) {
	w := mustBuild(t, smallCfg)
	for _, a := range w.Accounts() {
		k, ok := w.SigningKey(a.DID)
		if !ok {
			t.Fatalf("%s: no key", a.DID)
		}
		pub, err := k.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		if pub.Multibase() != a.PublicKeyMultibase {
			t.Fatalf("%s: key %s, DID document %s", a.DID, pub.Multibase(), a.PublicKeyMultibase)
		}
	}
	if _, ok := w.SigningKey("did:plc:unknown"); ok {
		t.Fatal("key for an unknown DID")
	}
}

func TestInvalidRevCommit(t *testing.T) {
	ctx := context.Background()
	w := mustBuild(t, smallCfg)
	did := firstWithStatus(t, w, StatusActive).DID
	before := stateOf(t, w, did)
	ev, err := w.InvalidRevCommit(did)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Invalid != ReasonInvalidRev || ev.DID != did || ev.Commit == nil || ev.Commit.Rev != InvalidRevValue || len(ev.Commit.Ops) != 1 {
		t.Fatalf("event %+v", ev)
	}
	if _, _, err := syntax.ParseRepoPath(ev.Commit.Ops[0].Path); err != nil {
		t.Fatalf("invalid-rev commit has a bad path too: %v", err)
	}
	checkOneOff(t, ev.Commit, before)
	_, err = repo.VerifyCommitMessage(ctx, ev.Commit)
	if err == nil || !strings.Contains(err.Error(), "TID") {
		t.Fatalf("VerifyCommitMessage: %v, want a TID error", err)
	}
	// The signed commit block itself fails indigo's structure check on its rev.
	_, _, err = repo.LoadRepoFromCAR(ctx, bytes.NewReader(ev.Commit.Blocks))
	if err == nil || !strings.Contains(err.Error(), "TID") {
		t.Fatalf("LoadRepoFromCAR: %v, want a TID error", err)
	}
	checkUnchanged(t, w, before, InvalidRevValue)
}

func TestInvalidPathCommit(t *testing.T) {
	ctx := context.Background()
	w := mustBuild(t, smallCfg)
	did := firstWithStatus(t, w, StatusActive).DID
	dir := mockDirectory(t, w)
	seen := map[string]bool{}
	for range InvalidRecordPaths() {
		before := stateOf(t, w, did)
		ev, err := w.InvalidPathCommit(did)
		if err != nil {
			t.Fatal(err)
		}
		c := ev.Commit
		if ev.Invalid != ReasonInvalidPath || c == nil || len(c.Ops) != 2 {
			t.Fatalf("event %+v", ev)
		}
		if _, err := syntax.ParseTID(c.Rev); err != nil || c.Rev <= before.acct.Rev {
			t.Fatalf("rev %q (%v), previous %s", c.Rev, err, before.acct.Rev)
		}
		var bad, good int
		for _, op := range c.Ops {
			if _, _, err := syntax.ParseRepoPath(op.Path); err != nil {
				bad++
				seen[op.Path] = true
			} else {
				good++
			}
		}
		if bad != 1 || good != 1 {
			t.Fatalf("%d invalid and %d valid paths in %+v", bad, good, c.Ops)
		}
		checkOneOff(t, c, before)
		if err := repo.VerifyCommitSignature(ctx, dir, c); err != nil {
			t.Fatalf("signature: %v", err)
		}
		_, err = repo.VerifyCommitMessage(ctx, c)
		if err == nil || !strings.Contains(err.Error(), "invalid repo path") {
			t.Fatalf("VerifyCommitMessage: %v, want an invalid repo path error", err)
		}
		checkUnchanged(t, w, before, c.Rev)
	}
	if len(seen) != len(InvalidRecordPaths()) {
		t.Fatalf("invalid paths used %v, want each of %d", seen, len(InvalidRecordPaths()))
	}
}

func TestOneOffCommitsNeedAnActiveAccount(t *testing.T) {
	w := mustBuild(t, smallCfg)
	inactive := firstWithStatus(t, w, StatusDeactivated).DID
	for _, mk := range []func(string) (Event, error){w.InvalidRevCommit, w.InvalidPathCommit} {
		if _, err := mk(inactive); !errors.Is(err, ErrAccountInactive) {
			t.Fatalf("inactive: %v", err)
		}
		if _, err := mk("did:plc:unknown"); !errors.Is(err, ErrUnknownDID) {
			t.Fatalf("unknown: %v", err)
		}
	}
}

// RetryValidOps re-commits the valid create of an invalid-path commit, with
// the same path and record CID, chaining from the last valid state; a
// consumer that dropped only the invalid op and one that dropped the whole
// commit then hold the same records as the world.
func TestRetryValidOps(t *testing.T) {
	ctx := context.Background()
	w := mustBuild(t, smallCfg)
	did := firstWithStatus(t, w, StatusActive).DID
	before := stateOf(t, w, did)
	hev, err := w.InvalidPathCommit(did)
	if err != nil {
		t.Fatal(err)
	}
	lenient := map[string]cid.Cid{}
	for p, c := range before.records {
		lenient[p] = c
	}
	var valid *comatproto.SyncSubscribeRepos_RepoOp
	for _, op := range hev.Commit.Ops {
		if _, _, err := syntax.ParseRepoPath(op.Path); err == nil {
			valid = op
			lenient[op.Path] = cid.Cid(*op.Cid)
		}
	}
	ev, err := w.RetryValidOps(hev)
	if err != nil {
		t.Fatal(err)
	}
	c := ev.Commit
	if ev.Invalid != "" || len(c.Ops) != 1 || c.Ops[0].Path != valid.Path || c.Ops[0].Action != "create" || cid.Cid(*c.Ops[0].Cid) != cid.Cid(*valid.Cid) {
		t.Fatalf("retry %+v, want a create of %s %s", c.Ops, valid.Path, cid.Cid(*valid.Cid))
	}
	if *c.Since != before.acct.Rev || cid.Cid(*c.PrevData) != before.acct.Data || c.Rev <= hev.Commit.Rev {
		t.Fatalf("retry since %s prevData %s rev %s; before %s %s, hostile rev %s", *c.Since, cid.Cid(*c.PrevData), c.Rev, before.acct.Rev, before.acct.Data, hev.Commit.Rev)
	}
	if _, err := repo.VerifyCommitMessage(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := repo.VerifyCommitSignature(ctx, mockDirectory(t, w), c); err != nil {
		t.Fatal(err)
	}
	if d := diffRecords(w.Records(did), lenient); d != "" {
		t.Fatalf("world after retry vs lenient fold: %s", d)
	}
	// Nothing valid to retry.
	bad := *hev.Commit
	bad.Ops = nil
	for _, op := range hev.Commit.Ops {
		if op != valid {
			bad.Ops = append(bad.Ops, op)
		}
	}
	if _, err := w.RetryValidOps(Event{DID: did, Commit: &bad}); !errors.Is(err, ErrNoValidOps) {
		t.Fatalf("retry of only invalid ops: %v", err)
	}
	if _, err := w.RetryValidOps(Event{DID: did}); !errors.Is(err, ErrNoValidOps) {
		t.Fatalf("retry of a non-commit: %v", err)
	}
}
