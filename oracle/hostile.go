package oracle

// hostile.go owns the CAR-shaped getRepo faults: cutting, pacing and
// resetting bodies, and hostile copies of a repo (a dropped or corrupted
// block, a re-signed commit with an invalid rev, extra records under invalid
// paths). Copies are built from the world's CAR with indigo and cached per
// (fault, DID, head); re-signed commits are signed with the account's own
// key (world.SigningKey), so they fail only for the intended reason.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/repo/mst"
	"github.com/bluesky-social/indigo/atproto/syntax"
	blocks "github.com/ipfs/go-block-format"
	"github.com/ipfs/go-cid"
	ipld "github.com/ipfs/go-ipld-format"
	car "github.com/ipld/go-car"
	carutil "github.com/ipld/go-car/util"
	"github.com/multiformats/go-multihash"

	"github.com/backstream/backstream/oracle/world"
)

// InvalidRevValue is the rev an InvalidRev commit carries (as in the
// firehose's invalid-rev commits).
const InvalidRevValue = world.InvalidRevValue

// FutureRev is the rev a FutureRev CAR carries when served at now: a TID a
// year later.
func FutureRev(now time.Time) string {
	return syntax.NewTID(now.AddDate(1, 0, 0).UnixMicro(), 0).String()
}

// InvalidRecordPathKeys are the MST keys InvalidRecordPaths adds: an invalid
// NSID, an invalid rkey, an over-long rkey, and a key that is not a path
// (world.InvalidRecordPaths).
func InvalidRecordPathKeys() []string { return world.InvalidRecordPaths() }

// hostileCache holds built hostile CARs.
type hostileCache struct {
	mu sync.Mutex
	m  map[string][]byte
}

const hostileCacheMax = 1024

func (c *hostileCache) get(key string) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[key]
	return b, ok
}

func (c *hostileCache) put(key string, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= hostileCacheMax {
		c.m = make(map[string][]byte)
	}
	c.m[key] = b
}

// serveFaultedCAR answers a getRepo with the CAR-shaped fault st.
func (n *Network) serveFaultedCAR(w http.ResponseWriter, r *http.Request, did string, b []byte, acct world.Account, st step) {
	switch st.kind {
	case FaultTruncateCAR:
		writeCAR(w, b[:len(b)/2])
	case FaultTruncateCARAtBlock:
		cut, err := blockBoundaryCut(b)
		if err != nil {
			n.internalError(w, err)
			return
		}
		writeCAR(w, b[:cut])
	case FaultHangBody:
		hdr(w, len(b))
		_, _ = w.Write(b[:len(b)/2])
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-n.ctx.Done():
		}
	case FaultSlowBody:
		n.slowBody(w, r, b, st.bytesPerSec)
	case FaultGatedBody:
		hdr(w, len(b))
		_, _ = w.Write(b[:len(b)/2])
		_ = http.NewResponseController(w).Flush()
		st.gate.reachOnce.Do(func() { close(st.gate.reached) })
		select {
		case <-st.gate.release:
			_, _ = w.Write(b[len(b)/2:])
		case <-r.Context().Done():
		case <-n.ctx.Done():
		}
	case FaultResetMidBody:
		hdr(w, len(b))
		_, _ = w.Write(b[:len(b)/2])
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		conn, _, err := rc.Hijack()
		if err != nil {
			return
		}
		resetConn(conn)
	case FaultCommitForOtherDID:
		other, err := n.otherCAR(did)
		if err != nil {
			n.internalError(w, err)
			return
		}
		writeCAR(w, other)
	case FaultDropBlock, FaultCorruptBlock, FaultInvalidRev, FaultFutureRev, FaultInvalidRecordPaths, FaultForgedSignature:
		key := string(st.kind) + " " + did + " " + acct.Head.String()
		out, ok := n.hostile.get(key)
		if !ok {
			var err error
			out, err = n.buildHostile(r.Context(), st.kind, did, b)
			if err != nil {
				n.internalError(w, err)
				return
			}
			n.hostile.put(key, out)
		}
		writeCAR(w, out)
	default:
		n.internalError(w, fmt.Errorf("oracle: unknown getRepo fault %q", st.kind))
	}
}

func hdr(w http.ResponseWriter, length int) {
	w.Header().Set("Content-Type", carContentType)
	w.Header().Set("Content-Length", strconv.Itoa(length))
	w.WriteHeader(http.StatusOK)
}

func (n *Network) internalError(w http.ResponseWriter, err error) {
	n.cfg.Logger.Error("oracle: getRepo fault", "err", err)
	writeXRPCError(w, http.StatusInternalServerError, "InternalServerError", err.Error())
}

// slowBody writes b at bytesPerSec in 100 ms slices.
func (n *Network) slowBody(w http.ResponseWriter, r *http.Request, b []byte, bytesPerSec int) {
	hdr(w, len(b))
	rc := http.NewResponseController(w)
	chunk := max(bytesPerSec/10, 1)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for len(b) > 0 {
		k := min(chunk, len(b))
		if _, err := w.Write(b[:k]); err != nil {
			return
		}
		_ = rc.Flush()
		b = b[k:]
		if len(b) == 0 {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-n.ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// otherCAR returns the CAR of the next active account after did (by DID order).
func (n *Network) otherCAR(did string) ([]byte, error) {
	accts := n.w.Accounts()
	i := sort.Search(len(accts), func(i int) bool { return accts[i].DID > did })
	for k := 0; k < len(accts); k++ {
		a := accts[(i+k)%len(accts)]
		if a.DID == did || !a.Active {
			continue
		}
		b, _, err := n.w.RepoCAR(a.DID)
		if err != nil {
			return nil, fmt.Errorf("oracle: other DID's CAR: %w", err)
		}
		return b, nil
	}
	return nil, fmt.Errorf("oracle: other DID's CAR for %s: no other active account", did)
}

// carBlock is one block of a CAR v1 and where it sits in the bytes.
type carBlock struct {
	c       cid.Cid
	data    []byte
	off     int // start of its length prefix
	dataOff int // start of data
	end     int // end of data
}

// splitCAR parses a CAR v1 into its root and blocks without re-hashing.
func splitCAR(b []byte) (cid.Cid, []carBlock, error) {
	hl, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < hl {
		return cid.Undef, nil, errors.New("oracle: split CAR: bad header length")
	}
	h, err := car.ReadHeader(bufioReader(b[:k+int(hl)]))
	if err != nil {
		return cid.Undef, nil, fmt.Errorf("oracle: split CAR: %w", err)
	}
	if len(h.Roots) != 1 {
		return cid.Undef, nil, fmt.Errorf("oracle: split CAR: %d roots", len(h.Roots))
	}
	var out []carBlock
	pos := k + int(hl)
	for pos < len(b) {
		l, k := binary.Uvarint(b[pos:])
		if k <= 0 || uint64(len(b)-pos-k) < l {
			return cid.Undef, nil, errors.New("oracle: split CAR: bad block length")
		}
		sec := b[pos+k : pos+k+int(l)]
		cl, c, err := cid.CidFromBytes(sec)
		if err != nil {
			return cid.Undef, nil, fmt.Errorf("oracle: split CAR: %w", err)
		}
		out = append(out, carBlock{c: c, data: sec[cl:], off: pos, dataOff: pos + k + cl, end: pos + k + int(l)})
		pos += k + int(l)
	}
	return h.Roots[0], out, nil
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

// writeCARBytes encodes a CAR v1 with one root.
func writeCARBytes(root cid.Cid, bs []carBlock) ([]byte, error) {
	var buf bytes.Buffer
	if err := car.WriteHeader(&car.CarHeader{Roots: []cid.Cid{root}, Version: 1}, &buf); err != nil {
		return nil, fmt.Errorf("oracle: write CAR header: %w", err)
	}
	for _, blk := range bs {
		if err := carutil.LdWrite(&buf, blk.c.Bytes(), blk.data); err != nil {
			return nil, fmt.Errorf("oracle: write CAR block: %w", err)
		}
	}
	return buf.Bytes(), nil
}

// blockBoundaryCut is the block boundary nearest the middle of the CAR that
// keeps the commit block and drops at least one block.
func blockBoundaryCut(b []byte) (int, error) {
	_, bs, err := splitCAR(b)
	if err != nil {
		return 0, err
	}
	if len(bs) < 2 {
		return bs[0].off, nil // header only: the root is missing
	}
	best := bs[1].off
	for _, blk := range bs[1:] {
		if abs(blk.off-len(b)/2) < abs(best-len(b)/2) {
			best = blk.off
		}
	}
	return best, nil
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// victim picks the block DropBlock / CorruptBlock targets: the middle record
// block, or the MST root node of a repo without records.
func victim(ctx context.Context, b []byte, bs []carBlock) (int, error) {
	commit, rp, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(b))
	if err != nil {
		return 0, fmt.Errorf("oracle: load world CAR: %w", err)
	}
	records := map[cid.Cid]bool{}
	if err := rp.MST.Walk(func(_ []byte, v cid.Cid) error { records[v] = true; return nil }); err != nil {
		return 0, fmt.Errorf("oracle: walk world CAR: %w", err)
	}
	var idx []int
	for i, blk := range bs {
		if records[blk.c] {
			idx = append(idx, i)
		}
	}
	if len(idx) > 0 {
		return idx[len(idx)/2], nil
	}
	for i, blk := range bs {
		if blk.c == commit.Data {
			return i, nil
		}
	}
	return 0, errors.New("oracle: no block to damage")
}

// buildHostile builds the hostile copy of did's CAR b for kind.
func (n *Network) buildHostile(ctx context.Context, kind FaultKind, did string, b []byte) ([]byte, error) {
	root, bs, err := splitCAR(b)
	if err != nil {
		return nil, err
	}
	switch kind {
	case FaultDropBlock:
		i, err := victim(ctx, b, bs)
		if err != nil {
			return nil, err
		}
		return writeCARBytes(root, append(append([]carBlock(nil), bs[:i]...), bs[i+1:]...))
	case FaultCorruptBlock:
		i, err := victim(ctx, b, bs)
		if err != nil {
			return nil, err
		}
		out := append([]byte(nil), b...)
		out[bs[i].dataOff+(bs[i].end-bs[i].dataOff)/2] ^= 0x01
		return out, nil
	case FaultInvalidRev:
		return n.resign(did, root, bs, nil, func(c *repo.Commit) { c.Rev = InvalidRevValue })
	case FaultFutureRev:
		return n.resign(did, root, bs, nil, func(c *repo.Commit) { c.Rev = FutureRev(time.Now()) })
	case FaultForgedSignature:
		return resignWith(world.ForeignKey(), root, bs, nil, func(*repo.Commit) {})
	case FaultInvalidRecordPaths:
		return n.withInvalidPaths(ctx, did, b, root, bs)
	}
	return nil, fmt.Errorf("oracle: no hostile CAR for %q", kind)
}

// resign replaces the commit block with edit(commit) signed by did's key. When
// tree is non-nil the CAR's other blocks are replaced by tree (in order).
func (n *Network) resign(did string, root cid.Cid, bs []carBlock, tree []carBlock, edit func(*repo.Commit)) ([]byte, error) {
	key, ok := n.w.SigningKey(did)
	if !ok {
		return nil, fmt.Errorf("oracle: resign %s: %w", did, world.ErrUnknownDID)
	}
	return resignWith(key, root, bs, tree, edit)
}

// resignWith is resign with a given key (world.ForeignKey for a forgery).
func resignWith(key atcrypto.PrivateKey, root cid.Cid, bs []carBlock, tree []carBlock, edit func(*repo.Commit)) ([]byte, error) {
	ci := slices.IndexFunc(bs, func(b carBlock) bool { return b.c == root })
	if ci < 0 {
		return nil, errors.New("oracle: resign: commit block missing")
	}
	var c repo.Commit
	if err := c.UnmarshalCBOR(bytes.NewReader(bs[ci].data)); err != nil {
		return nil, fmt.Errorf("oracle: resign: decode commit: %w", err)
	}
	edit(&c)
	return signedCAR(&c, key, bs, ci, tree)
}

// signedCAR signs c with key and writes it as the root of a CAR holding
// tree, or (tree nil) the other blocks of bs (bs[ci] is the old commit).
func signedCAR(c *repo.Commit, key atcrypto.PrivateKey, bs []carBlock, ci int, tree []carBlock) ([]byte, error) {
	if err := c.Sign(key); err != nil {
		return nil, fmt.Errorf("oracle: resign: %w", err)
	}
	var buf bytes.Buffer
	if err := c.MarshalCBOR(&buf); err != nil {
		return nil, fmt.Errorf("oracle: resign: encode commit: %w", err)
	}
	cc, err := cborCID(buf.Bytes())
	if err != nil {
		return nil, err
	}
	out := []carBlock{{c: cc, data: buf.Bytes()}}
	if tree != nil {
		out = append(out, tree...)
	} else {
		out = append(out, bs[:ci]...)
		out = append(out, bs[ci+1:]...)
	}
	return writeCARBytes(cc, out)
}

// cborCID is the sha2-256 dag-cbor CID of b.
func cborCID(b []byte) (cid.Cid, error) {
	c, err := cid.NewPrefixV1(cid.DagCBOR, multihash.SHA2_256).Sum(b)
	if err != nil {
		return cid.Undef, fmt.Errorf("oracle: cid: %w", err)
	}
	return c, nil
}

// withInvalidPaths rebuilds did's repo with the records of
// InvalidRecordPathKeys added, and re-signs the commit at the same rev.
func (n *Network) withInvalidPaths(ctx context.Context, did string, b []byte, root cid.Cid, bs []carBlock) ([]byte, error) {
	_, rp, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("oracle: load world CAR: %w", err)
	}
	entries := map[string]cid.Cid{}
	if err := rp.MST.Walk(func(k []byte, v cid.Cid) error { entries[string(k)] = v; return nil }); err != nil {
		return nil, fmt.Errorf("oracle: walk world CAR: %w", err)
	}
	junk, err := atdata.MarshalCBOR(map[string]any{
		"$type": "app.bsky.feed.post", "text": "hostile record", "createdAt": "2024-01-01T00:00:00.000Z",
	})
	if err != nil {
		return nil, fmt.Errorf("oracle: junk record: %w", err)
	}
	jc, err := cborCID(junk)
	if err != nil {
		return nil, err
	}
	for _, k := range InvalidRecordPathKeys() {
		entries[k] = jc
	}
	tree, err := mst.LoadTreeFromMap(entries)
	if err != nil {
		return nil, fmt.Errorf("oracle: hostile MST: %w", err)
	}
	mbs := newMemBlockstore()
	data, err := tree.WriteDiffBlocks(ctx, mbs)
	if err != nil {
		return nil, fmt.Errorf("oracle: hostile MST blocks: %w", err)
	}
	var out []carBlock
	for _, blk := range mbs.sorted() {
		out = append(out, carBlock{c: blk.Cid(), data: blk.RawData()})
	}
	seen := map[cid.Cid]bool{jc: true}
	out = append(out, carBlock{c: jc, data: junk})
	keys := make([]string, 0, len(entries))
	for k := range entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := entries[k]
		if seen[v] {
			continue
		}
		seen[v] = true
		blk, err := rp.RecordStore.Get(ctx, v)
		if err != nil {
			return nil, fmt.Errorf("oracle: record block %s: %w", k, err)
		}
		out = append(out, carBlock{c: v, data: blk.RawData()})
	}
	return n.resign(did, root, bs, out, func(c *repo.Commit) { c.Data = *data })
}

// memBlockstore is the minimal in-memory blockstore mst.WriteDiffBlocks needs.
type memBlockstore struct {
	mu sync.Mutex
	m  map[cid.Cid]blocks.Block
}

func newMemBlockstore() *memBlockstore { return &memBlockstore{m: make(map[cid.Cid]blocks.Block)} }

func (s *memBlockstore) DeleteBlock(_ context.Context, c cid.Cid) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, c)
	return nil
}

func (s *memBlockstore) Has(_ context.Context, c cid.Cid) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[c]
	return ok, nil
}

func (s *memBlockstore) Get(_ context.Context, c cid.Cid) (blocks.Block, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b, ok := s.m[c]; ok {
		return b, nil
	}
	return nil, &ipld.ErrNotFound{Cid: c}
}

func (s *memBlockstore) GetSize(ctx context.Context, c cid.Cid) (int, error) {
	b, err := s.Get(ctx, c)
	if err != nil {
		return 0, err
	}
	return len(b.RawData()), nil
}

func (s *memBlockstore) Put(_ context.Context, b blocks.Block) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[b.Cid()] = b
	return nil
}

func (s *memBlockstore) PutMany(ctx context.Context, bs []blocks.Block) error {
	for _, b := range bs {
		if err := s.Put(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

func (s *memBlockstore) AllKeysChan(ctx context.Context) (<-chan cid.Cid, error) {
	bs := s.sorted()
	ch := make(chan cid.Cid, len(bs))
	for _, b := range bs {
		ch <- b.Cid()
	}
	close(ch)
	return ch, nil
}

func (s *memBlockstore) HashOnRead(bool) {}

// sorted returns the blocks ordered by CID string (deterministic output).
func (s *memBlockstore) sorted() []blocks.Block {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]blocks.Block, 0, len(s.m))
	for _, b := range s.m {
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cid().KeyString() < out[j].Cid().KeyString() })
	return out
}
