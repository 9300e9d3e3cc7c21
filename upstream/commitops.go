// commitops.go owns extracting the record operations of a #commit: the
// blocks CAR is read with hash checks, its root must be the commit, and each
// create/update takes its record bytes from the blocks.

package upstream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
	car "github.com/ipld/go-car"
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
	// Prev is the previous record CID when the op carried one (sync 1.1).
	Prev *cid.Cid
	// Record is the record's DAG-CBOR bytes (create/update).
	Record []byte
	// Err, when set, says this op is unusable (ErrMissingBlock,
	// ErrInvalidAction, ErrInvalidCollection, ErrInvalidRKey); the
	// commit's other ops are still valid.
	Err error
}

// maxCommitBlocks bounds the blocks kept from one commit CAR.
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
	blocks, err := readCommitBlocks(c.Blocks, commitCID)
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
		if rop.Prev != nil {
			p := cid.Cid(*rop.Prev)
			if p.Defined() {
				o.Prev = &p
			}
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
			rec, ok := blocks[o.CID.KeyString()]
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
	return ops, nil
}

// readCommitBlocks reads a commit's CAR: version 1, exactly one root equal
// to commit, every block hash-checked by go-car.
func readCommitBlocks(data []byte, commit cid.Cid) (map[string][]byte, error) {
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty", ErrBadBlocks)
	}
	cr, err := car.NewCarReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBlocks, err)
	}
	if len(cr.Header.Roots) != 1 || !cr.Header.Roots[0].Equals(commit) {
		return nil, fmt.Errorf("%w: roots %v, commit %s", ErrCommitRootMismatch, cr.Header.Roots, commit)
	}
	blocks := make(map[string][]byte)
	for {
		blk, err := cr.Next()
		if err == io.EOF {
			return blocks, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadBlocks, err)
		}
		if len(blocks) >= maxCommitBlocks {
			return nil, fmt.Errorf("%w: more than %d blocks", ErrBadBlocks, maxCommitBlocks)
		}
		blocks[blk.Cid().KeyString()] = blk.RawData()
	}
}

// splitRepoPath splits "collection/rkey" and validates both halves.
func splitRepoPath(path string) (string, string, error) {
	coll, rkey, ok := strings.Cut(path, "/")
	if !ok || strings.Contains(rkey, "/") {
		return coll, rkey, fmt.Errorf("%w: path %q", ErrInvalidRKey, truncate(path, 256))
	}
	if _, err := syntax.ParseNSID(coll); err != nil {
		return coll, rkey, fmt.Errorf("%w: %q", ErrInvalidCollection, truncate(coll, 256))
	}
	if _, err := syntax.ParseRecordKey(rkey); err != nil {
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
