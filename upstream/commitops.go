// commitops.go owns extracting the record operations of a #commit: the
// blocks CAR is read with hash checks (internal/car), its root must be the
// commit, and each create/update takes its record bytes from the blocks
// (copied into one buffer per commit, so kept records do not pin the CAR).

package upstream

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"unsafe"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/internal/car"
)

// Commit-op sentinels. Whole-commit failures are returned by CommitOps;
// per-op failures are set in Op.Err and leave the other ops usable.
var (
	// ErrBadBlocks: the commit's blocks are not a valid CAR (bad header,
	// truncated, a block whose bytes do not hash to its CID).
	ErrBadBlocks = errors.New("invalid commit blocks")
	// ErrCommitRootMismatch: the blocks CAR's single root is not the
	// commit CID the event names.
	ErrCommitRootMismatch = errors.New("blocks root does not match commit")
	// ErrMissingBlock: a create/update op's record block is not in the
	// blocks (or the op carries no CID).
	ErrMissingBlock = errors.New("record block missing")
	// ErrInvalidAction: an op action other than create, update, delete.
	ErrInvalidAction = errors.New("invalid op action")
	// ErrInvalidCollection: the op path's collection is not a valid NSID.
	ErrInvalidCollection = errors.New("invalid collection")
	// ErrInvalidRKey: the op path's record key is not valid (or the path is
	// not collection/rkey).
	ErrInvalidRKey = errors.New("invalid record key")
)

// Op actions.
const (
	ActionCreate = "create"
	ActionUpdate = "update"
	ActionDelete = "delete"
)

// Op is one record operation of a commit.
type Op struct {
	Action     string
	Collection string
	RKey       string
	// CID is the new record's CID (create/update); cid.Undef for delete.
	CID cid.Cid
	// Prev is the previous record CID when the op carried one (sync 1.1);
	// it points into the commit's op (never modify it).
	Prev *cid.Cid
	// Record is the record's DAG-CBOR bytes (create/update), copied out of
	// the blocks into one buffer shared by the commit's records.
	Record []byte
	// Err, when set, says this op is unusable (ErrMissingBlock,
	// ErrInvalidAction, ErrInvalidCollection, ErrInvalidRKey); the
	// commit's other ops are still valid.
	Err error
}

// maxCommitBlocks bounds the blocks read from one commit CAR.
const maxCommitBlocks = 1 << 16

// CommitOps returns the operations of c in order, with records taken from
// c.Blocks. It fails as a whole when the blocks are not a hash-checked CAR
// whose only root is c.Commit (ErrBadBlocks, ErrCommitRootMismatch); it
// does not verify the MST, the signature or the rev.
func CommitOps(c *comatproto.SyncSubscribeRepos_Commit) (ops []Op, err error) {
	defer func() {
		// Belt and braces, as in DecodeFrame: hostile blocks never panic
		// the process (the fuzz target calls commitOps directly).
		if r := recover(); r != nil {
			ops = nil
			err = fmt.Errorf("upstream: commit ops: %w: panic: %v", ErrBadBlocks, r)
		}
	}()
	return commitOps(c)
}

func commitOps(c *comatproto.SyncSubscribeRepos_Commit) ([]Op, error) {
	if c == nil {
		return nil, fmt.Errorf("upstream: commit ops: %w: nil commit", ErrBadBlocks)
	}
	commitCID := cid.Cid(c.Commit)
	if !commitCID.Defined() {
		return nil, fmt.Errorf("upstream: commit ops: %w: commit CID undefined", ErrCommitRootMismatch)
	}
	var arr [16]commitBlock // stays on the stack (readCommitBlocks returns, never stores, its list)
	blocks, err := readCommitBlocks(c.Blocks, commitCID, arr[:0])
	if err != nil {
		return nil, fmt.Errorf("upstream: commit ops: %w", err)
	}
	ops := make([]Op, 0, len(c.Ops))
	for _, rop := range c.Ops {
		if rop == nil {
			ops = append(ops, Op{Err: fmt.Errorf("%w: null op", ErrInvalidAction)})
			continue
		}
		o := Op{Action: rop.Action}
		if rop.Prev != nil && cid.Cid(*rop.Prev).Defined() {
			o.Prev = (*cid.Cid)(rop.Prev) // shares the op's link, no copy
		}
		coll, rkey, perr := splitRepoPath(rop.Path)
		o.Collection, o.RKey = coll, rkey
		switch {
		case perr != nil:
			o.Err = perr
		case rop.Action == ActionDelete:
		case rop.Action == ActionCreate || rop.Action == ActionUpdate:
			if rop.Cid == nil || !cid.Cid(*rop.Cid).Defined() {
				o.Err = fmt.Errorf("%w: %s %s has no cid", ErrMissingBlock, rop.Action, rop.Path)
				break
			}
			o.CID = cid.Cid(*rop.Cid)
			rec, ok := blocks.get(o.CID.KeyString())
			if !ok {
				o.Err = fmt.Errorf("%w: %s %s cid %s", ErrMissingBlock, rop.Action, rop.Path, o.CID)
				break
			}
			o.Record = rec
		default:
			o.Err = fmt.Errorf("%w: %q", ErrInvalidAction, truncate(rop.Action, 64))
		}
		ops = append(ops, o)
	}
	copyRecords(ops)
	return ops, nil
}

// copyRecords copies the ops' records out of the blocks into one buffer
// for the commit: a record kept downstream (the writer, the live log,
// whose byte bound counts only the record) must not pin the whole CAR, MST
// nodes and all. Each block is copied once, and ops naming the same block
// share its copy, so the buffer is never larger than the blocks (8,192 ops
// naming one 1 MiB record would otherwise copy 8 GiB).
func copyRecords(ops []Op) {
	var copies map[*byte][]byte // a block's copy, by its first byte; when ops may share one
	if len(ops) > 1 {
		copies = make(map[*byte][]byte, len(ops))
	}
	total := 0
	for i := range ops {
		if r := ops[i].Record; r != nil {
			if _, dup := copies[unsafe.SliceData(r)]; !dup {
				total += len(r)
				if copies != nil {
					copies[unsafe.SliceData(r)] = nil
				}
			}
		}
	}
	buf := make([]byte, 0, total)
	for i := range ops {
		r := ops[i].Record
		if r == nil {
			continue
		}
		if c := copies[unsafe.SliceData(r)]; c != nil {
			ops[i].Record = c
			continue
		}
		at := len(buf)
		buf = append(buf, r...)
		ops[i].Record = buf[at:len(buf):len(buf)]
		if copies != nil {
			copies[unsafe.SliceData(r)] = ops[i].Record
		}
	}
}

// commitBlock is one block of a commit's CAR: its CID bytes (as a string
// aliasing the blocks) and its data (aliasing the blocks too).
type commitBlock struct {
	key  string
	data []byte
}

// commitBlocks looks blocks up by CID: a linear scan for the few blocks of
// a typical commit, a map beyond blockMapMin.
type commitBlocks struct {
	list []commitBlock
	m    map[string][]byte
}

// blockMapMin is the block count from which lookups go through a map.
const blockMapMin = 32

func (bs *commitBlocks) get(key string) ([]byte, bool) {
	if bs.m != nil {
		b, ok := bs.m[key]
		return b, ok
	}
	for i := range bs.list {
		if bs.list[i].key == key {
			return bs.list[i].data, true
		}
	}
	return nil, false
}

// CommitBlocks are the blocks of a commit's CAR, by CID (ReadCommitBlocks).
type CommitBlocks struct{ bs commitBlocks }

// ReadCommitBlocks reads a commit's blocks as CommitOps does: a CAR v1,
// exactly one root equal to commit, every block hash-checked
// (ErrBadBlocks, ErrCommitRootMismatch otherwise). The blocks alias data.
func ReadCommitBlocks(data []byte, commit cid.Cid) (CommitBlocks, error) {
	bs, err := readCommitBlocks(data, commit, nil)
	if err != nil {
		return CommitBlocks{}, fmt.Errorf("upstream: commit blocks: %w", err)
	}
	return CommitBlocks{bs}, nil
}

// Get returns the data of the block whose CID is c.
func (b *CommitBlocks) Get(c cid.Cid) ([]byte, bool) { return b.bs.get(c.KeyString()) }

// readCommitBlocks reads a commit's CAR with internal/car: version 1,
// exactly one root equal to commit, every block hash-checked, at most
// maxCommitBlocks blocks, appended to list. The blocks alias data.
func readCommitBlocks(data []byte, commit cid.Cid, list []commitBlock) (commitBlocks, error) {
	if len(data) == 0 {
		return commitBlocks{}, fmt.Errorf("%w: empty", ErrBadBlocks)
	}
	cr, err := car.Open(data)
	if err != nil {
		return commitBlocks{}, fmt.Errorf("%w: %v", ErrBadBlocks, err)
	}
	if roots := cr.Roots(); len(roots) != 1 || string(roots[0]) != commit.KeyString() {
		return commitBlocks{}, fmt.Errorf("%w: %d roots, commit %s", ErrCommitRootMismatch, len(roots), commit)
	}
	var m map[string][]byte
	for {
		c, blk, err := cr.Next()
		if err == io.EOF {
			return commitBlocks{list: list, m: m}, nil
		}
		if err != nil {
			return commitBlocks{}, fmt.Errorf("%w: %v", ErrBadBlocks, err)
		}
		if len(list) >= maxCommitBlocks {
			return commitBlocks{}, fmt.Errorf("%w: more than %d blocks", ErrBadBlocks, maxCommitBlocks)
		}
		key := unsafe.String(unsafe.SliceData(c), len(c))
		list = append(list, commitBlock{key: key, data: blk})
		if m != nil {
			m[key] = blk
		} else if len(list) == blockMapMin {
			m = make(map[string][]byte, 2*blockMapMin)
			for _, b := range list {
				m[b.key] = b.data
			}
		}
	}
}

// splitRepoPath splits "collection/rkey" and validates both halves.
func splitRepoPath(path string) (string, string, error) {
	coll, rkey, ok := strings.Cut(path, "/")
	if !ok || strings.Contains(rkey, "/") {
		return coll, rkey, fmt.Errorf("%w: path %q", ErrInvalidRKey, truncate(path, 256))
	}
	if !ValidNSID(coll) {
		return coll, rkey, fmt.Errorf("%w: %q", ErrInvalidCollection, truncate(coll, 256))
	}
	if !ValidRecordKey(rkey) {
		return coll, rkey, fmt.Errorf("%w: %q", ErrInvalidRKey, truncate(rkey, 256))
	}
	return coll, rkey, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
