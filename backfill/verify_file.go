// verify_file.go owns verification of a repository CAR that stays in its
// scratch file, for CARs the memory budget cannot hold whole: one
// sequential pass re-hashes every section and builds a compact index (16
// bytes per block: a seeded hash of the CID and the section's place in the
// file), then the tree is walked reading each block with ReadAt on demand.
// Memory is the index, a read buffer and one block per tree depth, counted
// against a limit (ErrOverBudget beyond it): a true bound whatever the CAR.
// It costs a pread per block visited, so it is for CARs the budget cannot
// hold, not the ordinary path.

package backfill

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"slices"
	"sync/atomic"

	"github.com/backstream/backstream/internal/car"
	"github.com/ipfs/go-cid"
)

// Memory accounting of the two verification modes.
const (
	// indexBytesPerBlock is what the in-memory index costs per block at
	// most: a map slot (string key and span, 24 bytes) at the lowest load
	// a Go map reaches sized for its count, rounded up.
	indexBytesPerBlock = 64
	// fileEntryBytes is one block of the file index.
	fileEntryBytes = 16
	// fileReadBuffer is the sequential read buffer of the index pass.
	fileReadBuffer = 32 << 10
	// maxHeaderBytes bounds a CAR header read from a file (MaxRoots links).
	maxHeaderBytes = 1 << 20
)

// ErrOverBudget: the CAR cannot be verified within the memory budget even
// from its file (its block index or a block is larger than the budget).
var ErrOverBudget = errors.New("CAR needs more memory than the budget")

// memoryCost is what verifying a CAR of size bytes and sections sections in
// memory holds: the CAR, its block index and entry table, the drop bitmap
// (a bit per MST entry, an entry taking at least 16 bytes of the CAR) and
// the walk.
func memoryCost(size, sections int64) int64 {
	return size + sections*(indexBytesPerBlock+tableBytesPerBlock) + size/64 + 64<<10
}

// sectionReader is what countSections reads: a bufio.Reader over a file,
// or a sliceReader over a CAR held in memory (no read buffer to allocate).
type sectionReader interface {
	io.ByteReader
	Discard(n int) (int, error)
}

// sliceReader reads a CAR held in memory as a sectionReader.
type sliceReader struct{ b []byte }

func (s *sliceReader) ReadByte() (byte, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c, nil
}

// Discard skips n bytes, as bufio.Reader.Discard does: fewer, with io.EOF,
// when the slice ends first.
func (s *sliceReader) Discard(n int) (int, error) {
	if n > len(s.b) {
		n = len(s.b)
		s.b = nil
		return n, io.EOF
	}
	s.b = s.b[n:]
	return n, nil
}

// countSections counts the block sections of a CAR by its framing alone
// (no hashing), reading br once. A framing error ends the count: verification
// fails at that section, so no index grows beyond it.
func countSections(ctx context.Context, br sectionReader) int64 {
	hlen, err := binary.ReadUvarint(br)
	if err != nil || hlen > maxHeaderBytes {
		return 0
	}
	if _, err := br.Discard(int(hlen)); err != nil {
		return 0
	}
	var n int64
	for {
		if n%ctxCheckEvery == 0 && ctx.Err() != nil {
			return n // verification sees ctx's end at once
		}
		slen, err := binary.ReadUvarint(br)
		if err != nil || slen == 0 || slen > maxCARBytes {
			return n
		}
		n++
		if _, err := br.Discard(int(slen)); err != nil {
			return n
		}
	}
}

// fileEntry locates one block in the file: the section (CID then block
// bytes) spans [off, end).
type fileEntry struct {
	h        uint64 // maphash of the CID bytes
	off, end uint32
}

// fileBlocks is the block source of a file-backed snapshot: immutable
// after the index pass except for the memory count, safe for concurrent
// walks (each brings its own buffers).
type fileBlocks struct {
	f     *os.File
	seed  maphash.Seed
	ents  []fileEntry // sorted by h
	limit int64
	used  atomic.Int64
}

// take counts n more bytes against the limit.
func (fb *fileBlocks) take(n int) error {
	if u := fb.used.Add(int64(n)); u > fb.limit {
		fb.used.Add(-int64(n))
		return verifyErr(ErrOverBudget, nil, "%d bytes in use, %d more asked, budget %d", u-int64(n), n, fb.limit)
	}
	return nil
}

// give returns n bytes; nil-safe for in-memory snapshots.
func (fb *fileBlocks) give(n int) {
	if fb != nil {
		fb.used.Add(-int64(n))
	}
}

// grow returns *buf resized to n bytes, reallocated within the limit when
// it is too small.
func (fb *fileBlocks) grow(buf *[]byte, n int) ([]byte, error) {
	if cap(*buf) < n {
		if err := fb.take(n - cap(*buf)); err != nil {
			return nil, err
		}
		*buf = make([]byte, n)
	}
	return (*buf)[:n], nil
}

// get reads the block with CID bytes c into *buf.
func (fb *fileBlocks) get(c []byte, buf *[]byte) ([]byte, bool, error) {
	h := maphash.Bytes(fb.seed, c)
	i, _ := slices.BinarySearchFunc(fb.ents, h, func(e fileEntry, h uint64) int { return cmp.Compare(e.h, h) })
	for ; i < len(fb.ents) && fb.ents[i].h == h; i++ {
		e := fb.ents[i]
		sec, err := fb.grow(buf, int(e.end-e.off))
		if err != nil {
			return nil, false, err
		}
		if _, err := fb.f.ReadAt(sec, int64(e.off)); err != nil {
			return nil, false, fmt.Errorf("backfill: verify: read scratch at %d: %w", e.off, err)
		}
		// A CID is self-delimiting: a section that starts with c holds c.
		if bytes.HasPrefix(sec, c) {
			return sec[len(c):], true, nil
		}
	}
	return nil, false, nil
}

// VerifyFile verifies the repository CAR in f as VerifyBytes does, without
// reading it into memory: the Snapshot reads its blocks from f, which must
// stay open and unchanged until the Snapshot is no longer used. Its index,
// read buffers and walks hold at most limit bytes; beyond that the error
// wraps ErrOverBudget. sections sizes the index when known (0: grown).
// Record.CBOR is valid only during the Records callback.
func VerifyFile(ctx context.Context, f *os.File, wantDID string, opts VerifyOptions, limit, sections int64) (*Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("backfill: verify: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("backfill: verify: stat scratch: %w", err)
	}
	if fi.Size() > maxCARBytes {
		return nil, verifyErr(ErrMalformedCAR, nil, "CAR of %d bytes exceeds %d", fi.Size(), maxCARBytes)
	}
	fb := &fileBlocks{f: f, seed: maphash.MakeSeed(), limit: limit}
	root, blocks, err := fb.index(ctx, fi.Size(), sections)
	if err != nil {
		return nil, err
	}
	s := &Snapshot{CommitCID: root, Blocks: blocks, Bytes: int(fi.Size()), file: fb}
	return s.verify(ctx, wantDID, opts)
}

// index reads the CAR once: the header, then every section re-hashed
// against its CID (car.CheckSection) and entered in the index.
func (fb *fileBlocks) index(ctx context.Context, size, sections int64) (cid.Cid, int, error) {
	if err := fb.take(fileReadBuffer); err != nil {
		return cid.Undef, 0, err
	}
	defer fb.give(fileReadBuffer)
	cr := &countingReader{r: io.NewSectionReader(fb.f, 0, maxCARBytes)}
	br := bufio.NewReaderSize(cr, fileReadBuffer)
	pos := func() int64 { return cr.n - int64(br.Buffered()) }
	root, err := fb.header(br, size)
	if err != nil {
		return cid.Undef, 0, err
	}
	if sections > 0 {
		if err := fb.take(int(sections) * fileEntryBytes); err != nil {
			return cid.Undef, 0, err
		}
		fb.ents = make([]fileEntry, 0, sections)
	}
	var sec []byte
	defer func() { fb.give(cap(sec)) }()
	for blocks := 0; ; blocks++ {
		if blocks%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return cid.Undef, 0, fmt.Errorf("backfill: verify: %w", err)
			}
		}
		off := pos()
		slen, err := binary.ReadUvarint(br)
		switch {
		case err == io.EOF:
			slices.SortFunc(fb.ents, func(a, b fileEntry) int { return cmp.Compare(a.h, b.h) })
			return root, blocks, nil
		case err != nil:
			return cid.Undef, 0, carError(varintError(err, "section length at offset %d", off), fmt.Sprintf("section %d: ", blocks))
		}
		start := pos()
		if slen > uint64(size-start) {
			return cid.Undef, 0, carError(fmt.Errorf("%w: section of %d bytes at offset %d, %d present", car.ErrTruncated, slen, start, size-start), fmt.Sprintf("section %d: ", blocks))
		}
		b, err := fb.grow(&sec, int(slen))
		if err != nil {
			return cid.Undef, 0, err
		}
		if _, err := io.ReadFull(br, b); err != nil {
			return cid.Undef, 0, carError(fmt.Errorf("%w: section of %d bytes at offset %d", car.ErrTruncated, slen, start), fmt.Sprintf("section %d: ", blocks))
		}
		clen, err := car.CheckSection(b)
		if err != nil {
			return cid.Undef, 0, carError(fmt.Errorf("%w (section at offset %d)", err, start), fmt.Sprintf("section %d: ", blocks))
		}
		if err := fb.room(); err != nil {
			return cid.Undef, 0, err
		}
		fb.ents = append(fb.ents, fileEntry{h: maphash.Bytes(fb.seed, b[:clen]), off: uint32(start), end: uint32(pos())})
	}
}

// room makes space for one more index entry, doubling the index within the
// limit (the old and the new array both count while one is copied).
func (fb *fileBlocks) room() error {
	if len(fb.ents) < cap(fb.ents) {
		return nil
	}
	old := cap(fb.ents)
	next := max(2*old, 1024)
	if err := fb.take(next * fileEntryBytes); err != nil {
		return err
	}
	fb.ents = append(make([]fileEntry, 0, next), fb.ents...)
	fb.give(old * fileEntryBytes)
	return nil
}

// header reads and parses the CAR header (car.Open on its bytes) and
// returns the first root.
func (fb *fileBlocks) header(br *bufio.Reader, size int64) (cid.Cid, error) {
	hlen, err := binary.ReadUvarint(br)
	if err != nil {
		return cid.Undef, carError(varintError(err, "header length"), "")
	}
	if hlen > uint64(size-int64(binary.PutUvarint(make([]byte, binary.MaxVarintLen64), hlen))) {
		return cid.Undef, carError(fmt.Errorf("%w: header of %d bytes", car.ErrTruncated, hlen), "")
	}
	if hlen > maxHeaderBytes { // car.Open would refuse it too: no valid header is this long
		return cid.Undef, verifyErr(ErrMalformedCAR, nil, "header of %d bytes", hlen)
	}
	hdr := binary.AppendUvarint(make([]byte, 0, binary.MaxVarintLen64+int(hlen)), hlen)
	hdr = hdr[:len(hdr)+int(hlen)]
	if _, err := io.ReadFull(br, hdr[len(hdr)-int(hlen):]); err != nil {
		return cid.Undef, carError(fmt.Errorf("%w: header of %d bytes", car.ErrTruncated, hlen), "")
	}
	r, err := car.Open(hdr)
	if err != nil {
		return cid.Undef, carError(err, "")
	}
	roots := r.Roots()
	if len(roots) == 0 {
		return cid.Undef, verifyErr(ErrMalformedCAR, nil, "no root")
	}
	root, err := cid.Cast(roots[0])
	if err != nil {
		return cid.Undef, verifyErr(ErrMalformedCAR, err, "root")
	}
	return root, nil
}

// varintError is a varint that could not be read: cut short (internal/car's
// ErrTruncated) or overflowing (ErrMalformed), as car.Reader reports them.
func varintError(err error, format string, args ...any) error {
	kind := car.ErrMalformed
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		kind = car.ErrTruncated
	}
	return fmt.Errorf("%w: "+format, append([]any{kind}, args...)...)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
