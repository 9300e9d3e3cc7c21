// verify.go owns the complete verification of a downloaded repository CAR
// (E6, E7) and the Snapshot it yields records from. Verification happens in
// full before a Snapshot exists, so nothing about a record can reach the
// store from a CAR that fails: every block re-hashed against its CID, the
// commit decoded and structurally checked, its DID equal to the requested
// one, optionally its signature, the whole MST walked and checked with no
// node and no record block missing, and every record validated (R1).
//
// Memory: the whole CAR is held in one buffer, plus an index of at most
// indexBytesPerBlock per block whose keys alias that buffer while the tree
// is verified, and the entry table (verify_entries.go) after (VerifyFile
// keeps none of them: see verify_file.go). Iterating records allocates two
// objects per record (its key string and its CID); MST nodes decode without
// allocating and record bytes are never copied.

package backfill

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"math"
	"unsafe"

	"github.com/backstream/backstream/internal/car"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"
)

// VerifyOptions tunes Verify. The zero value is the bootstrap's setting.
type VerifyOptions struct {
	// PublicKey, when set, verifies the commit signature with it
	// (ErrBadSignature). Nil skips the check: the bootstrap trusts the relay
	// for snapshots and resolves no DID documents.
	PublicKey atcrypto.PublicKey
	// CheckCommit, when set, is called with the decoded commit once its
	// structure and DID are checked, before any record is read; its error
	// fails verification as it is (the job sets it per attempt to check the
	// signature against the account's DID document, package ident).
	CheckCommit func(ctx context.Context, c *repo.Commit) error
	// StrictRecords also decodes every record with atdata.UnmarshalCBOR and
	// drops those it rejects (bad_cbor). The default is the allocation-free
	// structural scan; strict decoding costs several microseconds and tens
	// of allocations per record.
	StrictRecords bool
}

// Snapshot is a repository CAR that passed verification. It is immutable;
// Records and Drops may run concurrently and repeatedly.
type Snapshot struct {
	DID       syntax.DID
	Rev       syntax.TID
	CommitCID cid.Cid
	Data      cid.Cid // the MST root
	// RecordCount is the number of records Records yields (drops excluded).
	RecordCount int
	// Dropped counts records dropped by per-record validation, by reason.
	Dropped DropCounts
	// Blocks is the number of block sections in the CAR; Bytes its size.
	Blocks int
	Bytes  int

	car []byte
	// index maps CID bytes to blocks until the tree is verified; entries
	// then replaces it (verify_entries.go). A non-nil entries (empty for
	// an empty tree) is the table Records and Drops read; nil, they walk
	// the tree again through index.
	index   map[string]span
	entries []walkEntry
	file    *fileBlocks // set instead of car and index when verified from a file
	drops   []uint64    // bitmap by ordinal (MST key order) of the dropped entries
	strict  bool
}

// dropped reports whether the entry at ordinal was dropped.
func (s *Snapshot) dropped(ordinal int32) bool {
	w := int(ordinal >> 6)
	return w < len(s.drops) && s.drops[w]&(1<<(ordinal&63)) != 0
}

// markDropped sets ordinal in the drop bitmap, growing it as needed (one
// bit per entry: an eighth of a byte per entry, at most), within the memory
// limit of a file-backed snapshot.
func (s *Snapshot) markDropped(ordinal int32) error {
	w := int(ordinal >> 6)
	if w >= cap(s.drops) {
		next := max(2*cap(s.drops), w+1, 8)
		if s.file != nil {
			if err := s.file.take(8 * next); err != nil {
				return err
			}
			s.file.give(8 * cap(s.drops))
		}
		s.drops = append(make([]uint64, 0, next), s.drops...)
	}
	if w >= len(s.drops) {
		s.drops = s.drops[:w+1]
	}
	s.drops[w] |= 1 << (ordinal & 63)
	return nil
}

// span locates a block's bytes in the CAR buffer.
type span struct{ off, end uint32 }

// maxCARBytes keeps offsets in a uint32; far above any upstream byte cap.
const maxCARBytes = math.MaxUint32

// ctxCheckEvery is how many blocks or records pass between context checks.
const ctxCheckEvery = 4096

// Verify reads a whole repository CAR from r (a scratch file; its size, when
// r has Stat, sizes the one buffer) and verifies it as VerifyBytes does. A
// read error is returned wrapped, with no verification sentinel.
func Verify(ctx context.Context, r io.Reader, wantDID string, opts VerifyOptions) (*Snapshot, error) {
	b, err := readCAR(r)
	if err != nil {
		return nil, fmt.Errorf("backfill: verify: read CAR: %w", err)
	}
	return VerifyBytes(ctx, b, wantDID, opts)
}

// VerifyBytes verifies a repository CAR held in b, which the Snapshot keeps
// (no copy): b must not be modified afterwards. On failure the error wraps
// exactly one of the Err* sentinels of this package (or ctx's error) and no
// Snapshot is returned.
func VerifyBytes(ctx context.Context, b []byte, wantDID string, opts VerifyOptions) (*Snapshot, error) {
	return verifyBytes(ctx, b, wantDID, opts, 0)
}

// verifyBytes is VerifyBytes with the number of sections when known (0:
// unknown), which sizes the block index exactly.
func verifyBytes(ctx context.Context, b []byte, wantDID string, opts VerifyOptions, sections int64) (*Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("backfill: verify: %w", err)
	}
	if len(b) > maxCARBytes {
		return nil, verifyErr(ErrMalformedCAR, nil, "CAR of %d bytes exceeds %d", len(b), maxCARBytes)
	}
	root, index, blocks, err := indexCAR(ctx, b, sections)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{CommitCID: root, Blocks: blocks, Bytes: len(b), car: b, index: index}
	return s.verify(ctx, wantDID, opts)
}

// verify checks the commit and the whole tree of a snapshot whose blocks
// are indexed (CommitCID, Blocks, Bytes and the block source set).
func (s *Snapshot) verify(ctx context.Context, wantDID string, opts VerifyOptions) (*Snapshot, error) {
	root := s.CommitCID
	var buf []byte
	blk, _, ok, err := s.block(root.Bytes(), &buf)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, verifyErr(ErrMissingBlock, nil, "commit block %s", root)
	}
	var commit repo.Commit
	if err := commit.UnmarshalCBOR(bytes.NewReader(blk)); err != nil {
		return nil, verifyErr(ErrBadCommit, err, "decode commit %s", root)
	}
	s.file.give(cap(buf))
	if err := commit.VerifyStructure(); err != nil {
		return nil, verifyErr(ErrBadCommit, err, "commit %s", root)
	}
	if !commit.Data.Defined() {
		return nil, verifyErr(ErrBadCommit, nil, "commit %s has no data CID", root)
	}
	if commit.DID != wantDID {
		return nil, verifyErr(ErrWrongDID, nil, "commit names %q, requested %q", commit.DID, wantDID)
	}
	if opts.PublicKey != nil {
		if err := commit.VerifySignature(opts.PublicKey); err != nil {
			return nil, verifyErr(ErrBadSignature, err, "commit %s", root)
		}
	}
	if opts.CheckCommit != nil {
		if err := opts.CheckCommit(ctx, &commit); err != nil {
			return nil, fmt.Errorf("backfill: verify: commit %s: %w", root, err)
		}
	}
	s.DID, s.Rev, s.Data, s.strict = syntax.DID(commit.DID), syntax.TID(commit.Rev), commit.Data, opts.StrictRecords
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// block returns the bytes of the block with CID bytes c: a view of the CAR
// buffer starting at offset at, or (a snapshot verified from a file, at 0)
// the block read into *buf, grown within the memory limit as needed.
func (s *Snapshot) block(c []byte, buf *[]byte) (b []byte, at uint32, ok bool, err error) {
	if s.file != nil {
		b, ok, err = s.file.get(c, buf)
		return b, 0, ok, err
	}
	loc, ok := s.index[string(c)]
	if !ok {
		return nil, 0, false, nil
	}
	return s.car[loc.off:loc.end:loc.end], loc.off, true, nil
}

// check walks the whole tree once with every structural check on, requires
// every record block, and records the drop verdicts Records replays (and,
// for a snapshot in memory, the entry table it reads).
func (s *Snapshot) check(ctx context.Context) error {
	rc := newRecordChecker(s.strict)
	w := s.newWalker(ctx, true)
	defer w.release()
	if s.file == nil {
		w.table, w.entries = true, make([]walkEntry, 0, max(s.Blocks, 1))
	}
	var ordinal int32
	err := w.walk(s.Data, func(key, _, body []byte) error {
		reason := DropReason(0)
		if _, r := rc.checkPath(key); r != 0 {
			reason = r
		} else {
			reason = rc.checkBody(body)
		}
		if reason != 0 {
			s.Dropped[reason]++
			if err := s.markDropped(ordinal); err != nil {
				return err
			}
		} else {
			s.RecordCount++
		}
		if ordinal == math.MaxInt32 {
			return verifyErr(ErrBadTree, nil, "more than %d records", math.MaxInt32)
		}
		ordinal++
		return nil
	})
	if err == nil && w.table {
		s.entries, s.index = w.entries, nil
	}
	return err
}

// Records calls fn for every record that passed validation, in MST key
// order, and stops at the first error fn returns (returned as is). It
// allocates one key string per record; Record.CBOR aliases the CAR buffer
// (a snapshot from VerifyFile: a read buffer valid only during fn).
func (s *Snapshot) Records(fn func(Record) error) error {
	return s.kept(func(key, val, body []byte) error {
		c, err := cid.Cast(val)
		if err != nil { // decodeNode checked it
			return verifyErr(ErrBadTree, err, "record %q CID", key)
		}
		slash := bytes.IndexByte(key, '/')
		k := string(key)
		return fn(Record{Collection: k[:slash], RKey: k[slash+1:], CID: c, CBOR: body})
	})
}

// kept passes on the entries that passed validation, in MST key order, as
// replay does: what Records yields, before any string or CID is made.
func (s *Snapshot) kept(fn visitFunc) error {
	return s.replay(context.Background(), false, fn)
}

// All is Records as an iterator. The error half of a pair is non-nil only
// for an internal failure, after which iteration ends.
func (s *Snapshot) All() iter.Seq2[Record, error] {
	return func(yield func(Record, error) bool) {
		err := s.Records(func(r Record) error {
			if !yield(r, nil) {
				return errStopIteration
			}
			return nil
		})
		if err != nil && err != errStopIteration {
			yield(Record{}, err)
		}
	}
}

// errStopIteration ends a walk when an iterator's consumer stops early.
var errStopIteration = errors.New("stop iteration")

// Drops calls fn for every dropped record, in MST key order, with its
// reason. For logging and tests; the counts are in Dropped.
func (s *Snapshot) Drops(fn func(Drop) error) error {
	if len(s.drops) == 0 {
		return nil
	}
	rc := newRecordChecker(s.strict)
	return s.replay(context.Background(), true, func(key, val, body []byte) error {
		c, err := cid.Cast(val)
		if err != nil {
			return verifyErr(ErrBadTree, err, "record %q CID", key)
		}
		_, reason := rc.checkPath(key)
		if reason == 0 {
			reason = rc.checkBody(body)
		}
		return fn(Drop{Path: string(key), CID: c, Size: len(body), Reason: reason})
	})
}

// replay walks the verified tree again and passes on either the kept
// entries (dropped == false) or the dropped ones.
func (s *Snapshot) replay(ctx context.Context, dropped bool, fn visitFunc) error {
	if s.entries != nil {
		return s.replayEntries(dropped, fn)
	}
	w := s.newWalker(ctx, false)
	defer w.release()
	var ordinal int32
	return w.walk(s.Data, func(key, val, body []byte) error {
		isDrop := s.dropped(ordinal)
		ordinal++
		if isDrop != dropped {
			return nil
		}
		return fn(key, val, body)
	})
}

// readCAR reads r to its end into one buffer, sized from Stat when r has it.
func readCAR(r io.Reader) ([]byte, error) {
	size := 64 << 10
	if st, ok := r.(interface{ Stat() (fs.FileInfo, error) }); ok {
		if fi, err := st.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() >= 0 && fi.Size() < maxCARBytes {
			size = int(fi.Size()) + 1 // +1: the read that sees EOF needs room
		}
	}
	b := make([]byte, 0, size)
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// indexCAR reads b as a CAR v1 with internal/car (which re-hashes every
// block against its CID) and indexes the blocks by CID bytes. The index
// keys alias b.
func indexCAR(ctx context.Context, b []byte, sections int64) (cid.Cid, map[string]span, int, error) {
	r, err := car.Open(b)
	if err != nil {
		return cid.Undef, nil, 0, carError(err, "")
	}
	roots := r.Roots()
	if len(roots) == 0 {
		return cid.Undef, nil, 0, verifyErr(ErrMalformedCAR, nil, "no root")
	}
	root, err := cid.Cast(roots[0])
	if err != nil { // car.ReadLink checked it
		return cid.Undef, nil, 0, verifyErr(ErrMalformedCAR, err, "root")
	}

	// Sized exactly when the sections were counted; otherwise a repository
	// block is rarely under 100 bytes with its framing.
	hint := min((len(b)-r.Offset())/128+1, 1<<20)
	if sections > 0 {
		hint = int(min(sections, int64(len(b))))
	}
	index := make(map[string]span, hint)
	blocks := 0
	for ; ; blocks++ {
		if blocks%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return cid.Undef, nil, 0, fmt.Errorf("backfill: verify: %w", err)
			}
		}
		c, data, err := r.Next()
		if err == io.EOF {
			return root, index, blocks, nil
		}
		if err != nil {
			return cid.Undef, nil, 0, carError(err, fmt.Sprintf("section %d: ", blocks))
		}
		end := r.Offset()
		index[unsafe.String(unsafe.SliceData(c), len(c))] = span{off: uint32(end - len(data)), end: uint32(end)}
	}
}

// carError classifies an internal/car error by this package's sentinels;
// where prefixes its message.
func carError(err error, where string) error {
	switch {
	case errors.Is(err, car.ErrTruncated):
		return verifyErr(ErrTruncated, io.ErrUnexpectedEOF, "%s%v", where, err)
	case errors.Is(err, car.ErrBadBlock):
		return verifyErr(ErrBadBlock, nil, "%s%v", where, err)
	}
	return verifyErr(ErrMalformedCAR, nil, "%s%v", where, err)
}
