package world

// repo.go owns one account's repository: its MST, block store, signed head
// commit, the #commit diff it produces for each write and the full CAR
// export. Every method here expects the account's mutex to be held.

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/ipfs/go-cid"
	car "github.com/ipld/go-car"
	carutil "github.com/ipld/go-car/util"
)

// account is the mutable state of one account. mu guards every field below
// it; the fields above it are fixed at Build.
type account struct {
	idx         int
	did         string
	host        int
	buildStatus string // status at build time

	mu        sync.Mutex
	priv      *atcrypto.PrivateKeyK256 // changed by RotateKey
	pubMB     string
	keyGen    int // key rotations so far
	handle    string
	handleGen int    // number of handle changes so far
	status    string // StatusActive when active
	revClock  *syntax.TIDClock
	lt        logicalTime // record rkey/createdAt clock
	rng       *rand.Rand  // content stream for ResetRepo
	hrng      *rand.Rand  // content stream of hostile one-off commits; nil until first needed
	hostileN  int         // hostile path commits built so far (picks the invalid path)
	tree      mst.Tree
	bs        *memBlockstore
	nrec      int
	rev       string
	head      cid.Cid
	data      cid.Cid
	commitBlk []byte
	car       []byte // cached full CAR of the head; nil when stale

	// paths is a lazily built index of current record paths, for random
	// picks by Traffic; nil until first needed.
	paths   []string
	pathIdx map[string]int
}

func (a *account) active() bool { return a.status == StatusActive }

func (a *account) snapshot() Account {
	return Account{
		DID:                a.did,
		Handle:             a.handle,
		Host:               a.host,
		Active:             a.active(),
		Status:             a.status,
		Rev:                a.rev,
		Head:               a.head,
		Data:               a.data,
		Records:            a.nrec,
		PublicKeyMultibase: a.pubMB,
	}
}

// newRepo replaces the repo with the given records (no diff is kept) and
// signs a fresh commit. Duplicate paths keep the last record.
func (a *account) newRepo(recs []genRecord) error {
	a.tree = mst.NewEmptyTree()
	a.bs = newMemBlockstore(len(recs) + len(recs)/3 + 4)
	a.paths, a.pathIdx = nil, nil
	a.nrec = 0
	for _, r := range recs {
		b, c, err := encodeRecord(r.rec)
		if err != nil {
			return err
		}
		a.bs.put(c, b)
		prev, err := a.tree.Insert([]byte(r.collection+"/"+r.rkey), c)
		if err != nil {
			return fmt.Errorf("world: insert %s/%s: %w", r.collection, r.rkey, err)
		}
		if prev == nil {
			a.nrec++
		}
	}
	root, err := a.tree.WriteDiffBlocks(context.Background(), a.bs)
	if err != nil {
		return fmt.Errorf("world: write mst: %w", err)
	}
	return a.sign(*root)
}

// sign signs a new commit over root with the next rev and makes it the head.
func (a *account) sign(root cid.Cid) error {
	c := repo.Commit{
		DID:     a.did,
		Version: repo.ATPROTO_REPO_VERSION,
		Data:    root,
		Rev:     a.revClock.Next().String(),
	}
	if err := c.Sign(a.priv); err != nil {
		return fmt.Errorf("world: sign commit: %w", err)
	}
	var buf bytes.Buffer
	if err := c.MarshalCBOR(&buf); err != nil {
		return fmt.Errorf("world: encode commit: %w", err)
	}
	head, err := dagCBORPrefix.Sum(buf.Bytes())
	if err != nil {
		return fmt.Errorf("world: commit cid: %w", err)
	}
	a.rev, a.head, a.data, a.commitBlk, a.car = c.Rev, head, root, buf.Bytes(), nil
	return nil
}

func encodeRecord(rec map[string]any) ([]byte, cid.Cid, error) {
	b, err := marshalRecord(rec)
	if err != nil {
		return nil, cid.Undef, err
	}
	c, err := dagCBORPrefix.Sum(b)
	if err != nil {
		return nil, cid.Undef, fmt.Errorf("world: record cid: %w", err)
	}
	return b, c, nil
}

// writeOp is one record write of a commit; rec nil means delete.
type writeOp struct {
	path string
	rec  []byte
}

// commit applies ops as one signed commit and returns its #commit body.
// Create/update/delete is decided by the tree: rec on an absent path is a
// create, on a present one an update. Callers validate first: an error after
// validation leaves the account unusable.
func (a *account) commit(ops []writeOp, now string) (*comatproto.SyncSubscribeRepos_Commit, error) {
	prevData, prevRev := a.data, a.rev
	repoOps := make([]*comatproto.SyncSubscribeRepos_RepoOp, 0, len(ops))
	var newRecs []cid.Cid
	for _, op := range ops {
		var val *cid.Cid
		if op.rec != nil {
			c, err := dagCBORPrefix.Sum(op.rec)
			if err != nil {
				return nil, fmt.Errorf("world: record cid: %w", err)
			}
			a.bs.put(c, op.rec)
			newRecs = append(newRecs, c)
			val = &c
		}
		res, err := repo.ApplyOp(&a.tree, op.path, val)
		if err != nil {
			return nil, fmt.Errorf("world: apply %s: %w", op.path, err)
		}
		if len(a.tree.Root.Entries) == 0 {
			// indigo's mst leaves an emptied root at the removed key's
			// height (see the TODO in node_remove.go); a later insert of a
			// lower key then builds a non-canonical tree. An empty node
			// encodes the same at any height, so resetting it is safe.
			a.tree.Root.Height = 0
		}
		rop := &comatproto.SyncSubscribeRepos_RepoOp{Path: op.path}
		switch {
		case res.IsCreate():
			rop.Action = "create"
			a.nrec++
			a.indexAdd(op.path)
		case res.IsUpdate():
			rop.Action = "update"
		case res.IsDelete():
			rop.Action = "delete"
			a.nrec--
			a.indexRemove(op.path)
		default:
			return nil, fmt.Errorf("world: apply %s: no-op write", op.path)
		}
		if res.Value != nil {
			l := lexutil.LexLink(*res.Value)
			rop.Cid = &l
		}
		if res.Prev != nil {
			l := lexutil.LexLink(*res.Prev)
			rop.Prev = &l
		}
		repoOps = append(repoOps, rop)
	}
	a.bs.startDiff()
	root, err := a.tree.WriteDiffBlocks(context.Background(), a.bs)
	diff := a.bs.stopDiff()
	if err != nil {
		return nil, fmt.Errorf("world: write mst diff: %w", err)
	}
	if err := a.sign(*root); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(len(a.commitBlk) + a.bs.putBytes + 512*len(newRecs) + 128)
	seen := make(map[cid.Cid]struct{}, len(diff)+len(newRecs)+1)
	if err := writeCARHeader(&buf, a.head, a.commitBlk); err != nil {
		return nil, err
	}
	seen[a.head] = struct{}{}
	for _, list := range [][]cid.Cid{diff, newRecs} {
		for _, c := range list {
			if _, dup := seen[c]; dup {
				continue
			}
			seen[c] = struct{}{}
			b, _ := a.bs.get(c)
			if err := carutil.LdWrite(&buf, c.Bytes(), b); err != nil {
				return nil, fmt.Errorf("world: write diff car: %w", err)
			}
		}
	}
	since := prevRev
	pd := lexutil.LexLink(prevData)
	return &comatproto.SyncSubscribeRepos_Commit{
		Blobs:    []lexutil.LexLink{},
		Blocks:   buf.Bytes(),
		Commit:   lexutil.LexLink(a.head),
		Ops:      repoOps,
		PrevData: &pd,
		Repo:     a.did,
		Rev:      a.rev,
		Since:    &since,
		Time:     now,
	}, nil
}

// syncBody returns the #sync body for the current head: a CAR holding only
// the signed commit block.
func (a *account) syncBody(now string) (*comatproto.SyncSubscribeRepos_Sync, error) {
	var buf bytes.Buffer
	if err := writeCARHeader(&buf, a.head, a.commitBlk); err != nil {
		return nil, err
	}
	return &comatproto.SyncSubscribeRepos_Sync{Blocks: buf.Bytes(), Did: a.did, Rev: a.rev, Time: now}, nil
}

// writeCARHeader writes a CAR v1 header with root head, then the commit block.
func writeCARHeader(buf *bytes.Buffer, head cid.Cid, commitBlk []byte) error {
	if err := car.WriteHeader(&car.CarHeader{Roots: []cid.Cid{head}, Version: 1}, buf); err != nil {
		return fmt.Errorf("world: write car header: %w", err)
	}
	if err := carutil.LdWrite(buf, head.Bytes(), commitBlk); err != nil {
		return fmt.Errorf("world: write commit block: %w", err)
	}
	return nil
}

// exportCAR returns the full CAR of the head (cached until the next change):
// header, commit block, then the MST in pre-order with each record block
// after the node that holds it; blocks deduplicated. It also drops blocks no
// longer reachable when they outnumber the live ones by half.
func (a *account) exportCAR() ([]byte, error) {
	if a.car != nil {
		return a.car, nil
	}
	var buf bytes.Buffer
	buf.Grow(len(a.commitBlk) + 300*(a.nrec+a.nrec/3+2))
	if err := writeCARHeader(&buf, a.head, a.commitBlk); err != nil {
		return nil, err
	}
	seen := make(map[cid.Cid]struct{}, a.nrec+a.nrec/3+2)
	write := func(c cid.Cid) error {
		if _, dup := seen[c]; dup {
			return nil
		}
		seen[c] = struct{}{}
		b, ok := a.bs.get(c)
		if !ok {
			return fmt.Errorf("world: export %s: block %s missing", a.did, c)
		}
		return carutil.LdWrite(&buf, c.Bytes(), b)
	}
	var walk func(n *mst.Node) error
	walk = func(n *mst.Node) error {
		if n.CID == nil {
			return fmt.Errorf("world: export %s: unwritten mst node", a.did)
		}
		if err := write(*n.CID); err != nil {
			return err
		}
		for _, e := range n.Entries {
			if e.Child != nil {
				if err := walk(e.Child); err != nil {
					return err
				}
			} else if e.ChildCID != nil {
				return fmt.Errorf("world: export %s: partial mst", a.did)
			}
			if e.IsValue() {
				if err := write(*e.Value); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(a.tree.Root); err != nil {
		return nil, err
	}
	if len(a.bs.m) > len(seen)*3/2+64 {
		for c := range a.bs.m {
			if _, live := seen[c]; !live {
				delete(a.bs.m, c)
			}
		}
	}
	a.car = buf.Bytes()
	return a.car, nil
}

// records returns path -> CID of the current records.
func (a *account) records() map[string]cid.Cid {
	out := make(map[string]cid.Cid, a.nrec)
	if a.status == StatusDeleted || a.tree.Root == nil {
		return out
	}
	_ = a.tree.Walk(func(k []byte, v cid.Cid) error {
		out[string(k)] = v
		return nil
	})
	return out
}

func (a *account) recordCID(path string) *cid.Cid {
	if a.tree.Root == nil {
		return nil
	}
	c, err := a.tree.Get([]byte(path))
	if err != nil {
		return nil
	}
	return c
}

func (a *account) ensureIndex() {
	if a.pathIdx != nil {
		return
	}
	a.paths = make([]string, 0, a.nrec)
	a.pathIdx = make(map[string]int, a.nrec)
	if a.tree.Root == nil {
		return
	}
	_ = a.tree.Walk(func(k []byte, _ cid.Cid) error {
		a.pathIdx[string(k)] = len(a.paths)
		a.paths = append(a.paths, string(k))
		return nil
	})
}

func (a *account) indexAdd(path string) {
	if a.pathIdx == nil {
		return
	}
	a.pathIdx[path] = len(a.paths)
	a.paths = append(a.paths, path)
}

func (a *account) indexRemove(path string) {
	if a.pathIdx == nil {
		return
	}
	i, ok := a.pathIdx[path]
	if !ok {
		return
	}
	last := len(a.paths) - 1
	a.paths[i] = a.paths[last]
	a.pathIdx[a.paths[i]] = i
	a.paths = a.paths[:last]
	delete(a.pathIdx, path)
}

// clear drops the repo of a deleted account.
func (a *account) clear() {
	a.tree = mst.Tree{}
	a.bs = newMemBlockstore(0)
	a.paths, a.pathIdx = nil, nil
	a.nrec = 0
	a.head, a.data, a.commitBlk, a.car = cid.Undef, cid.Undef, nil, nil
}
