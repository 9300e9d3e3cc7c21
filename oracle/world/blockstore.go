package world

// blockstore.go owns memBlockstore, the per-account in-memory block store
// that mst.Tree.WriteDiffBlocks writes to. It records which blocks each
// WriteDiffBlocks call put, which is exactly the MST part of a #commit diff.

import (
	"context"

	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	blockstore "github.com/ipfs/go-ipfs-blockstore"
	ipld "github.com/ipfs/go-ipld-format"
)

// memBlockstore is a map of blocks. Not safe for concurrent use: the owning
// account's mutex guards it.
type memBlockstore struct {
	m        map[cid.Cid][]byte
	record   bool      // when set, Put appends the CID to puts
	puts     []cid.Cid // CIDs put while record was set, in order
	putBytes int       // bytes put while record was set
}

var _ blockstore.Blockstore = (*memBlockstore)(nil)

func newMemBlockstore(sizeHint int) *memBlockstore {
	return &memBlockstore{m: make(map[cid.Cid][]byte, sizeHint)}
}

func (s *memBlockstore) get(c cid.Cid) ([]byte, bool) {
	b, ok := s.m[c]
	return b, ok
}

func (s *memBlockstore) put(c cid.Cid, b []byte) { s.m[c] = b }

// startDiff clears the recorded put list and starts recording.
func (s *memBlockstore) startDiff() {
	s.record = true
	s.puts = s.puts[:0]
	s.putBytes = 0
}

// stopDiff stops recording and returns the recorded CIDs (valid until the
// next startDiff).
func (s *memBlockstore) stopDiff() []cid.Cid {
	s.record = false
	return s.puts
}

// DeleteBlock removes a block.
func (s *memBlockstore) DeleteBlock(_ context.Context, c cid.Cid) error {
	delete(s.m, c)
	return nil
}

// Has reports whether the block is present.
func (s *memBlockstore) Has(_ context.Context, c cid.Cid) (bool, error) {
	_, ok := s.m[c]
	return ok, nil
}

// Get returns the block, or *ipld.ErrNotFound (mst relies on ipld.IsNotFound).
func (s *memBlockstore) Get(_ context.Context, c cid.Cid) (blocks.Block, error) {
	b, ok := s.m[c]
	if !ok {
		return nil, &ipld.ErrNotFound{Cid: c}
	}
	return blocks.NewBlockWithCid(b, c)
}

// GetSize returns the block size, or *ipld.ErrNotFound.
func (s *memBlockstore) GetSize(_ context.Context, c cid.Cid) (int, error) {
	b, ok := s.m[c]
	if !ok {
		return -1, &ipld.ErrNotFound{Cid: c}
	}
	return len(b), nil
}

// Put stores a block (and records its CID while a diff is being recorded).
func (s *memBlockstore) Put(_ context.Context, blk blocks.Block) error {
	c := blk.Cid()
	s.m[c] = blk.RawData()
	if s.record {
		s.puts = append(s.puts, c)
		s.putBytes += len(blk.RawData())
	}
	return nil
}

// PutMany stores blocks.
func (s *memBlockstore) PutMany(ctx context.Context, blks []blocks.Block) error {
	for _, b := range blks {
		if err := s.Put(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// AllKeysChan lists every CID; the channel is filled before it is returned,
// so no goroutine is started.
func (s *memBlockstore) AllKeysChan(_ context.Context) (<-chan cid.Cid, error) {
	ch := make(chan cid.Cid, len(s.m))
	for c := range s.m {
		ch <- c
	}
	close(ch)
	return ch, nil
}

// HashOnRead is a no-op: blocks are hashed when they are created.
func (s *memBlockstore) HashOnRead(bool) {}
