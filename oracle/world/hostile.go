package world

// hostile.go owns the deliberately invalid one-off #commit bodies a hostile
// relay emits (an invalid rev; a record under an invalid path next to a valid
// one) and access to the accounts' signing keys for the network's hostile
// CARs. A one-off commit is built on a copy of the account's MST and a
// scratch block store and is never applied: the account's tree, blocks,
// head, data, rev, record count and logical clock stay as they were, so the
// next valid commit chains from the last valid state (Since = last valid
// rev, PrevData = last valid data).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/ipfs/go-cid"
	car "github.com/ipld/go-car"
	carutil "github.com/ipld/go-car/util"
)

// Reasons carried by Event.Invalid: the check a one-off commit fails.
const (
	// ReasonInvalidRev: the rev (message and signed commit block) is not a TID.
	ReasonInvalidRev = "invalid_rev"
	// ReasonInvalidPath: one create op's path is not a valid repo path
	// (invalid NSID, invalid rkey, or no rkey), next to a valid create.
	ReasonInvalidPath = "invalid_path"
	// ReasonForgedSignature: the commit is signed by a key that is not the
	// account's (ForgedSignatureCommit).
	ReasonForgedSignature = "forged_signature"
	// ReasonNonInverting: the ops do not invert to the claimed prevData
	// (NonInvertingCommit).
	ReasonNonInverting = "non_inverting"
	// ReasonFutureRev: the rev is a TID of a time ahead of the clock
	// (FutureRevCommit, FutureRevSync).
	ReasonFutureRev = "future_rev"
)

// InvalidRevValue is the rev InvalidRevCommit carries: not a TID.
const InvalidRevValue = "not-a-tid"

// InvalidRecordPaths returns MST keys that are not valid repo paths: an
// invalid NSID, an invalid rkey, an over-long rkey (600 > 512 characters)
// and a key without an rkey. All are valid MST keys (at most 1024 bytes).
func InvalidRecordPaths() []string {
	return []string{
		"app.bsky.feed..post/3kabcdefghi22",
		"app.bsky.feed.post/bad rkey!",
		"com.example.thing/" + strings.Repeat("k", 600),
		"app.bsky.feed.post",
	}
}

// SigningKey returns the account's current #atproto signing key (the
// private half of Account.PublicKeyMultibase), so hostile copies of its repo
// can be validly signed. Keys change only by RotateKey; deleted accounts keep
// theirs. false for an unknown DID.
func (w *World) SigningKey(did string) (atcrypto.PrivateKey, bool) {
	a, ok := w.byDID[did]
	if !ok {
		return nil, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.priv, true
}

// ForeignKey is a K256 key that is no account's: what a forger signs with.
func ForeignKey() atcrypto.PrivateKey {
	k, err := deriveKey(-1, -1)
	if err != nil {
		panic(err) // deterministic: a fixed seed that has a valid scalar
	}
	return k
}

// ForgedSignatureCommit returns a one-off #commit for did creating one new
// record, correct in every respect (rev, Since, PrevData, blocks inverting
// to PrevData) except that its commit is signed by ForeignKey. The world does
// not apply it. The account must be active.
func (w *World) ForgedSignatureCommit(did string) (Event, error) {
	return w.oneOffCreate(did, ReasonForgedSignature, func(a *account, ops []writeOp) (*comatproto.SyncSubscribeRepos_Commit, error) {
		return a.oneOffCommit(ops, a.revClock.Next().String(), now(), ForeignKey())
	})
}

// NonInvertingCommit returns a one-off #commit for did creating one new
// record, validly signed by the account, whose PrevData is not the state its
// ops invert to (it names the new tree's root instead). The world does not
// apply it. The account must be active.
func (w *World) NonInvertingCommit(did string) (Event, error) {
	return w.oneOffCreate(did, ReasonNonInverting, func(a *account, ops []writeOp) (*comatproto.SyncSubscribeRepos_Commit, error) {
		body, err := a.oneOffCommit(ops, a.revClock.Next().String(), now(), a.priv)
		if err != nil {
			return nil, err
		}
		var c repo.Commit
		if _, err := readCommit(body.Blocks, &c); err != nil {
			return nil, err
		}
		pd := lexutil.LexLink(c.Data)
		body.PrevData = &pd
		return body, nil
	})
}

// FutureRevCommit returns a one-off #commit for did creating one new
// record, correct in every respect (signed by the account's key, Since and
// PrevData naming the current state, blocks inverting to PrevData) except
// that its rev is a TID of the wall clock plus ahead. The world does not
// apply it. The account must be active.
func (w *World) FutureRevCommit(did string, ahead time.Duration) (Event, error) {
	return w.oneOffCreate(did, ReasonFutureRev, func(a *account, ops []writeOp) (*comatproto.SyncSubscribeRepos_Commit, error) {
		rev := syntax.NewTID(time.Now().Add(ahead).UnixMicro(), uint(a.idx%1024)).String()
		return a.oneOffCommit(ops, rev, now(), a.priv)
	})
}

// ForgedSync returns a one-off #sync for did naming its current tree under
// a new rev, signed by ForeignKey. The world does not apply it. The account
// must be active.
func (w *World) ForgedSync(did string) (Event, error) {
	return w.writableAccount(did, func(a *account) (Event, error) {
		return a.oneOffSync(a.revClock.Next().String(), ForeignKey(), ReasonForgedSignature)
	})
}

// FutureRevSync returns a one-off #sync for did naming its current tree
// under a rev that is a TID of the wall clock plus ahead, signed by the
// account's key. The world does not apply it. The account must be active.
func (w *World) FutureRevSync(did string, ahead time.Duration) (Event, error) {
	return w.writableAccount(did, func(a *account) (Event, error) {
		rev := syntax.NewTID(time.Now().Add(ahead).UnixMicro(), uint(a.idx%1024)).String()
		return a.oneOffSync(rev, a.priv, ReasonFutureRev)
	})
}

// oneOffSync builds a #sync naming the account's current tree under rev,
// signed by key, carrying reason. The account's mutex must be held.
func (a *account) oneOffSync(rev string, key atcrypto.PrivateKey, reason string) (Event, error) {
	var c repo.Commit
	if err := c.UnmarshalCBOR(bytes.NewReader(a.commitBlk)); err != nil {
		return Event{}, fmt.Errorf("world: one-off sync: %w", err)
	}
	c.Rev = rev
	if err := c.Sign(key); err != nil {
		return Event{}, fmt.Errorf("world: one-off sync: %w", err)
	}
	var cb bytes.Buffer
	if err := c.MarshalCBOR(&cb); err != nil {
		return Event{}, fmt.Errorf("world: one-off sync: %w", err)
	}
	head, err := dagCBORPrefix.Sum(cb.Bytes())
	if err != nil {
		return Event{}, fmt.Errorf("world: one-off sync: %w", err)
	}
	var buf bytes.Buffer
	if err := writeCARHeader(&buf, head, cb.Bytes()); err != nil {
		return Event{}, err
	}
	body := &comatproto.SyncSubscribeRepos_Sync{Blocks: buf.Bytes(), Did: a.did, Rev: c.Rev, Time: now()}
	return Event{DID: a.did, Sync: body, Invalid: reason}, nil
}

// oneOffCreate builds a one-off commit of one new record with build, under
// the account's lock.
func (w *World) oneOffCreate(did, reason string, build func(*account, []writeOp) (*comatproto.SyncSubscribeRepos_Commit, error)) (Event, error) {
	return w.writableAccount(did, func(a *account) (Event, error) {
		g := a.hostileGen(w)
		r := g.next(trafficStep)
		ops, err := createOps(pathRec{r.collection + "/" + r.rkey, r.rec})
		if err != nil {
			return Event{}, err
		}
		body, err := build(a, ops)
		if err != nil {
			return Event{}, err
		}
		return Event{DID: a.did, Commit: body, Invalid: reason}, nil
	})
}

// writableAccount runs fn with did's account locked, once it is writable
// (active).
func (w *World) writableAccount(did string, fn func(a *account) (Event, error)) (Event, error) {
	a, err := w.lookup(did)
	if err != nil {
		return Event{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.writable(); err != nil {
		return Event{}, err
	}
	return fn(a)
}

// readCommit decodes the root commit of a commit's blocks CAR.
func readCommit(blocks []byte, c *repo.Commit) (cid.Cid, error) {
	bs, err := carBlocks(blocks)
	if err != nil {
		return cid.Undef, err
	}
	cr, err := car.NewCarReader(bytes.NewReader(blocks))
	if err != nil || len(cr.Header.Roots) != 1 {
		return cid.Undef, fmt.Errorf("world: commit blocks: %v", err)
	}
	root := cr.Header.Roots[0]
	if err := c.UnmarshalCBOR(bytes.NewReader(bs[root])); err != nil {
		return cid.Undef, fmt.Errorf("world: decode commit: %w", err)
	}
	return root, nil
}

// InvalidRevCommit returns a one-off #commit for did that creates one new
// record and is correct in every respect (signed by the account's key, Since
// and PrevData naming the current state, blocks inverting to PrevData)
// except that its rev, in the message and in the signed commit block, is
// InvalidRevValue. The world does not apply it. The account must be active.
func (w *World) InvalidRevCommit(did string) (Event, error) {
	return w.oneOffCreate(did, ReasonInvalidRev, func(a *account, ops []writeOp) (*comatproto.SyncSubscribeRepos_Commit, error) {
		return a.oneOffCommit(ops, InvalidRevValue, now(), a.priv)
	})
}

// InvalidPathCommit returns a one-off #commit for did with two creates: one
// at a valid new path and one at an invalid path (InvalidRecordPaths, in
// turn per account). Everything else is valid: a fresh TID rev greater than
// the current one, the account's signature, Since and PrevData naming the
// current state, blocks inverting to PrevData. The world does not apply it;
// the account's next valid commit still has Since = its current rev and
// PrevData = its current data (and a greater rev than this one). The account
// must be active.
func (w *World) InvalidPathCommit(did string) (Event, error) {
	return w.writableAccount(did, func(a *account) (Event, error) {
		g := a.hostileGen(w)
		good := g.next(trafficStep)
		bad := g.make(colPost)
		paths := InvalidRecordPaths()
		badPath := paths[a.hostileN%len(paths)]
		a.hostileN++
		ops, err := createOps(pathRec{good.collection + "/" + good.rkey, good.rec}, pathRec{badPath, bad.rec})
		if err != nil {
			return Event{}, err
		}
		body, err := a.oneOffCommit(ops, a.revClock.Next().String(), now(), a.priv)
		if err != nil {
			return Event{}, err
		}
		return Event{DID: a.did, Commit: body, Invalid: ReasonInvalidPath}, nil
	})
}

// RetryValidOps commits, as a new valid commit of the same account, the
// creates of a one-off commit (ev, from InvalidPathCommit or
// InvalidRevCommit) whose paths are valid, with the same record bytes: what a
// PDS retrying the write without its bad records would emit. It lets a
// consumer that drops only the invalid op (the firehose rule: "an invalid path drops
// one op") and one that drops the whole invalid commit fold to the same
// records as the world. ErrNoValidOps if there is nothing to retry.
func (w *World) RetryValidOps(ev Event) (Event, error) {
	if ev.Commit == nil {
		return Event{}, fmt.Errorf("world: retry: %s is not a #commit: %w", ev.Type(), ErrNoValidOps)
	}
	a, err := w.lookup(ev.Commit.Repo)
	if err != nil {
		return Event{}, err
	}
	blocks, err := carBlocks(ev.Commit.Blocks)
	if err != nil {
		return Event{}, err
	}
	var ws []pendingWrite
	for _, op := range ev.Commit.Ops {
		if op.Action != "create" || op.Cid == nil {
			continue
		}
		if _, _, err := syntax.ParseRepoPath(op.Path); err != nil {
			continue
		}
		b, ok := blocks[cid.Cid(*op.Cid)]
		if !ok {
			return Event{}, fmt.Errorf("world: retry %s: record block %s missing", op.Path, cid.Cid(*op.Cid))
		}
		ws = append(ws, pendingWrite{action: actCreate, path: op.Path, rec: b})
	}
	if len(ws) == 0 {
		return Event{}, fmt.Errorf("world: retry %s: %w", a.did, ErrNoValidOps)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.applyWrites(ws)
}

// carBlocks reads every block of a CAR v1 into a map.
func carBlocks(b []byte) (map[cid.Cid][]byte, error) {
	cr, err := car.NewCarReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("world: read blocks: %w", err)
	}
	out := map[cid.Cid][]byte{}
	for {
		blk, err := cr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("world: read blocks: %w", err)
		}
		out[blk.Cid()] = blk.RawData()
	}
}

// hostileGen is a record generator over the account's hostile stream and a
// copy of its logical clock (the account's own clock does not move).
func (a *account) hostileGen(w *World) recordGen {
	if a.hrng == nil {
		a.hrng = newRNG(w.cfg.Seed, saltHostile, uint64(a.idx))
	}
	lt := a.lt
	return recordGen{rng: a.hrng, dids: w.dids, lt: &lt}
}

// pathRec is a record to create at path.
type pathRec struct {
	path string
	rec  map[string]any
}

// createOps encodes records as create writes.
func createOps(recs ...pathRec) ([]writeOp, error) {
	ops := make([]writeOp, 0, len(recs))
	for _, r := range recs {
		b, err := marshalRecord(r.rec)
		if err != nil {
			return nil, err
		}
		ops = append(ops, writeOp{path: r.path, rec: b})
	}
	return ops, nil
}

// oneOffCommit builds the #commit that applying creates ops at rev would
// produce, on a copy of the tree and a scratch block store, without touching
// the account. The account's mutex must be held.
func (a *account) oneOffCommit(ops []writeOp, rev, now string, key atcrypto.PrivateKey) (*comatproto.SyncSubscribeRepos_Commit, error) {
	tree := a.tree.Copy()
	scratch := newMemBlockstore(len(ops) + 8)
	repoOps := make([]*comatproto.SyncSubscribeRepos_RepoOp, 0, len(ops))
	recs := make([]cid.Cid, 0, len(ops))
	for _, op := range ops {
		c, err := dagCBORPrefix.Sum(op.rec)
		if err != nil {
			return nil, fmt.Errorf("world: record cid: %w", err)
		}
		res, err := repo.ApplyOp(&tree, op.path, &c)
		if err != nil {
			return nil, fmt.Errorf("world: one-off apply %s: %w", op.path, err)
		}
		if !res.IsCreate() {
			return nil, fmt.Errorf("world: one-off %s: path exists", op.path)
		}
		scratch.put(c, op.rec)
		recs = append(recs, c)
		l := lexutil.LexLink(c)
		repoOps = append(repoOps, &comatproto.SyncSubscribeRepos_RepoOp{Action: "create", Path: op.path, Cid: &l})
	}
	scratch.startDiff()
	root, err := tree.WriteDiffBlocks(context.Background(), scratch)
	diff := scratch.stopDiff()
	if err != nil {
		return nil, fmt.Errorf("world: one-off mst diff: %w", err)
	}
	c := repo.Commit{DID: a.did, Version: repo.ATPROTO_REPO_VERSION, Data: *root, Rev: rev}
	if err := c.Sign(key); err != nil {
		return nil, fmt.Errorf("world: one-off sign: %w", err)
	}
	var cb bytes.Buffer
	if err := c.MarshalCBOR(&cb); err != nil {
		return nil, fmt.Errorf("world: one-off encode commit: %w", err)
	}
	head, err := dagCBORPrefix.Sum(cb.Bytes())
	if err != nil {
		return nil, fmt.Errorf("world: one-off commit cid: %w", err)
	}
	var buf bytes.Buffer
	if err := writeCARHeader(&buf, head, cb.Bytes()); err != nil {
		return nil, err
	}
	seen := map[cid.Cid]struct{}{head: {}}
	for _, list := range [][]cid.Cid{diff, recs} {
		for _, k := range list {
			if _, dup := seen[k]; dup {
				continue
			}
			seen[k] = struct{}{}
			b, _ := scratch.get(k)
			if err := carutil.LdWrite(&buf, k.Bytes(), b); err != nil {
				return nil, fmt.Errorf("world: one-off car: %w", err)
			}
		}
	}
	since := a.rev
	pd := lexutil.LexLink(a.data)
	return &comatproto.SyncSubscribeRepos_Commit{
		Blobs:    []lexutil.LexLink{},
		Blocks:   buf.Bytes(),
		Commit:   lexutil.LexLink(head),
		Ops:      repoOps,
		PrevData: &pd,
		Repo:     a.did,
		Rev:      rev,
		Since:    &since,
		Time:     now,
	}, nil
}
