// verify_errors.go owns the sentinels of CAR verification. Every error
// returned by Verify wraps exactly one of them (plus, where there is one, the
// underlying cause), so callers classify with errors.Is and never by message.

package backfill

import (
	"errors"
	"fmt"
)

// ErrTruncated: the CAR ends inside its header or inside a block section.
// Wraps io.ErrUnexpectedEOF. A CAR cut exactly on a block boundary parses
// and surfaces as ErrMissingBlock or ErrPartialTree instead.
var ErrTruncated = errors.New("truncated CAR")

// ErrMalformedCAR: the CAR framing is not CAR v1: undecodable header, wrong
// version, no root, an empty section or a section whose CID does not parse.
var ErrMalformedCAR = errors.New("malformed CAR")

// ErrBadBlock: a block's bytes do not hash to the CID it is stored under.
var ErrBadBlock = errors.New("block does not match its CID")

// ErrMissingBlock: the commit block, the MST root node or a record block
// named by the tree is absent from the CAR.
var ErrMissingBlock = errors.New("missing block")

// ErrBadCommit: the commit block does not decode as a commit, or fails the
// structural check (version 3, signature present, DID syntax, rev a TID,
// data CID present); the job's identity check also refuses with it a rev
// too far ahead of the clock (ident.RevAhead).
var ErrBadCommit = errors.New("invalid commit")

// ErrWrongDID: the commit names another account than the one requested (E7).
var ErrWrongDID = errors.New("commit DID differs from the requested DID")

// ErrBadSignature: a public key was given and the commit signature does not
// verify against it.
var ErrBadSignature = errors.New("commit signature invalid")

// ErrPartialTree: an MST node below the root is absent, so some records
// would be silently skipped (indigo's loader tolerates this; we do not).
var ErrPartialTree = errors.New("partial MST")

// ErrBadTree: an MST node does not decode, or the tree is structurally
// invalid (keys out of order or duplicated, a key at the wrong height, an
// empty node, a child below height zero, a prefix length out of range).
var ErrBadTree = errors.New("invalid MST")

// IsIncomplete reports whether err says the CAR was cut short (truncated,
// or a block the tree needs is absent): the shape a download interrupted on
// a block boundary takes, so a retry may succeed. Every other verification
// failure is a property of the repository as served.
func IsIncomplete(err error) bool {
	return errors.Is(err, ErrTruncated) || errors.Is(err, ErrMissingBlock) || errors.Is(err, ErrPartialTree)
}

// verifyErr builds a verification error: "backfill: verify: <sentinel>: <detail>[: cause]".
func verifyErr(kind error, cause error, format string, args ...any) error {
	detail := fmt.Sprintf(format, args...)
	if cause == nil {
		return fmt.Errorf("backfill: verify: %w: %s", kind, detail)
	}
	return fmt.Errorf("backfill: verify: %w: %s: %w", kind, detail, cause)
}
