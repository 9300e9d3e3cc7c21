// frame_commit.go owns the fast decoder of #commit frames: the canonical
// header compared as bytes, then a direct walk over the body's bytes for the
// shape every producer writes (canonical DAG-CBOR, each known field at most
// once, no unknown field). It decides nothing about any other frame: it
// reports !ok and DecodeFrame runs the header reader and cbor-gen's
// generated decoder instead, so the accepted language and every error stay
// theirs. Whenever it succeeds, the result is exactly what cbor-gen returns
// (FuzzCommitFastMatchesCborGen; TestCommitFastPathTaken checks that real
// frames take it).

package upstream

import (
	"math"

	"github.com/backstream/backstream/internal/car"
	"github.com/backstream/backstream/internal/cborhead"
	comatproto "github.com/bluesky-social/indigo/api/atproto"
	lexutil "github.com/bluesky-social/indigo/lex/util"
	"github.com/ipfs/go-cid"
)

// commitHeader is the DAG-CBOR frame header {t: "#commit", op: 1} as every
// producer writes it (keys in canonical order, as EncodeFrame writes them).
const commitHeader = "\xa2\x61t\x67#commit\x62op\x01"

// cbor-gen's limits for SyncSubscribeRepos_Commit (api/atproto/cbor_gen.go);
// the fast path hands anything beyond them to cbor-gen.
const (
	cbgMaxString = 1000000
	cbgMaxOps    = 8192
	cbgMaxBlobs  = 8192
	cbgMaxBlocks = 2097152
)

// commitAlloc puts a commit and its optional prevData link in one
// allocation.
type commitAlloc struct {
	c        comatproto.SyncSubscribeRepos_Commit
	prevData lexutil.LexLink
}

// opAlloc puts an op and its optional links in one allocation.
type opAlloc struct {
	op        comatproto.SyncSubscribeRepos_RepoOp
	cid, prev lexutil.LexLink
}

// fastReader walks DAG-CBOR in a byte slice. Every method checks the bytes
// present; ok is false on anything outside the fast shape.
type fastReader struct {
	b   []byte
	pos int
}

// head reads a minimally encoded definite-length head.
func (r *fastReader) head() (major byte, arg uint64, ok bool) {
	major, arg, r.pos, ok = cborhead.Read(r.b, r.pos)
	return major, arg, ok
}

// raw reads the n bytes after a string head, aliasing the input.
func (r *fastReader) raw(n uint64) ([]byte, bool) {
	if n > uint64(len(r.b)-r.pos) {
		return nil, false
	}
	s := r.b[r.pos : r.pos+int(n)]
	r.pos += int(n)
	return s, true
}

// textBytes reads a text string of at most cbgMaxString bytes, aliasing.
func (r *fastReader) textBytes() ([]byte, bool) {
	m, n, ok := r.head()
	if !ok || m != 3 || n > cbgMaxString {
		return nil, false
	}
	return r.raw(n)
}

// text reads a text string into a new string.
func (r *fastReader) text() (string, bool) {
	b, ok := r.textBytes()
	return string(b), ok
}

// null consumes a CBOR null if one is next.
func (r *fastReader) null() bool {
	if r.pos < len(r.b) && r.b[r.pos] == 0xf6 {
		r.pos++
		return true
	}
	return false
}

// link reads a CID link as cbg.ReadCid does (car.ReadLink holds the two
// equal).
func (r *fastReader) link() (lexutil.LexLink, bool) {
	b, next, ok := car.ReadLink(r.b, r.pos)
	if !ok {
		return lexutil.LexLink{}, false
	}
	c, err := cid.Cast(b)
	if err != nil {
		return lexutil.LexLink{}, false
	}
	r.pos = next
	return lexutil.LexLink(c), true
}

// boolean reads CBOR false or true.
func (r *fastReader) boolean() (bool, bool) {
	if r.pos >= len(r.b) {
		return false, false
	}
	c := r.b[r.pos]
	r.pos++
	switch c {
	case 0xf4:
		return false, true
	case 0xf5:
		return true, true
	}
	return false, false
}

// int64 reads a CBOR integer that fits an int64.
func (r *fastReader) int64() (int64, bool) {
	m, v, ok := r.head()
	if !ok || v > math.MaxInt64 {
		return 0, false
	}
	switch m {
	case 0:
		return int64(v), true
	case 1:
		return -1 - int64(v), true
	}
	return 0, false
}

// Commit field bits, for "each field at most once".
const (
	cfOps = 1 << iota
	cfRev
	cfSeq
	cfRepo
	cfTime
	cfBlobs
	cfSince
	cfBlocks
	cfCommit
	cfRebase
	cfTooBig
	cfPrevData
)

// decodeCommitFast decodes a #commit body at the start of b. ok is false
// when the body is not in the fast shape (the caller then uses cbor-gen);
// n is the number of bytes the body took.
func decodeCommitFast(b []byte) (c *comatproto.SyncSubscribeRepos_Commit, n int, ok bool) {
	r := fastReader{b: b}
	m, count, ok := r.head()
	if !ok || m != 5 || count > 12 {
		return nil, 0, false
	}
	a := new(commitAlloc)
	c = &a.c
	var seen uint
	for range count {
		key, ok := r.textBytes()
		if !ok {
			return nil, 0, false
		}
		var bit uint
		switch string(key) {
		case "ops":
			bit = cfOps
			ok = r.ops(c)
		case "rev":
			bit = cfRev
			c.Rev, ok = r.text()
		case "seq":
			bit = cfSeq
			c.Seq, ok = r.int64()
		case "repo":
			bit = cfRepo
			c.Repo, ok = r.text()
		case "time":
			bit = cfTime
			c.Time, ok = r.text()
		case "blobs":
			bit = cfBlobs
			ok = r.blobs(c)
		case "since":
			bit = cfSince
			if !r.null() {
				var s string
				s, ok = r.text()
				c.Since = &s
			}
		case "blocks":
			bit = cfBlocks
			var m byte
			var l uint64
			m, l, ok = r.head()
			if ok && m == 2 && l <= cbgMaxBlocks {
				var raw []byte
				if raw, ok = r.raw(l); ok && l > 0 {
					c.Blocks = append(make([]byte, 0, l), raw...)
				}
			} else {
				ok = false
			}
		case "commit":
			bit = cfCommit
			c.Commit, ok = r.link()
		case "rebase":
			bit = cfRebase
			c.Rebase, ok = r.boolean()
		case "tooBig":
			bit = cfTooBig
			c.TooBig, ok = r.boolean()
		case "prevData":
			bit = cfPrevData
			if !r.null() {
				a.prevData, ok = r.link()
				c.PrevData = &a.prevData
			}
		default:
			return nil, 0, false // unknown field: cbor-gen skips it
		}
		if !ok || seen&bit != 0 {
			return nil, 0, false // cbor-gen lets a repeated field overwrite
		}
		seen |= bit
	}
	return c, r.pos, true
}

func (r *fastReader) ops(c *comatproto.SyncSubscribeRepos_Commit) bool {
	m, n, ok := r.head()
	if !ok || m != 4 || n > cbgMaxOps {
		return false
	}
	if n == 0 {
		c.Ops = nil
		return true
	}
	// Bound the allocation by the bytes present: an op takes at least one.
	if n > uint64(len(r.b)-r.pos) {
		return false
	}
	c.Ops = make([]*comatproto.SyncSubscribeRepos_RepoOp, n)
	for i := range c.Ops {
		if r.null() {
			continue
		}
		op, ok := r.op()
		if !ok {
			return false
		}
		c.Ops[i] = op
	}
	return true
}

// Op field bits.
const (
	ofAction = 1 << iota
	ofCid
	ofPath
	ofPrev
)

func (r *fastReader) op() (*comatproto.SyncSubscribeRepos_RepoOp, bool) {
	m, count, ok := r.head()
	if !ok || m != 5 || count > 4 {
		return nil, false
	}
	a := new(opAlloc)
	var seen uint
	for range count {
		key, ok := r.textBytes()
		if !ok {
			return nil, false
		}
		var bit uint
		switch string(key) {
		case "action":
			bit = ofAction
			var v []byte
			if v, ok = r.textBytes(); ok {
				a.op.Action = internAction(v)
			}
		case "cid":
			bit = ofCid
			if !r.null() {
				a.cid, ok = r.link()
				a.op.Cid = &a.cid
			}
		case "path":
			bit = ofPath
			a.op.Path, ok = r.text()
		case "prev":
			bit = ofPrev
			if !r.null() {
				a.prev, ok = r.link()
				a.op.Prev = &a.prev
			}
		default:
			return nil, false
		}
		if !ok || seen&bit != 0 {
			return nil, false
		}
		seen |= bit
	}
	return &a.op, true
}

// internAction returns the three known actions without allocating.
func internAction(v []byte) string {
	switch string(v) {
	case ActionCreate:
		return ActionCreate
	case ActionUpdate:
		return ActionUpdate
	case ActionDelete:
		return ActionDelete
	}
	return string(v)
}

func (r *fastReader) blobs(c *comatproto.SyncSubscribeRepos_Commit) bool {
	m, n, ok := r.head()
	if !ok || m != 4 || n > cbgMaxBlobs {
		return false
	}
	if n == 0 {
		c.Blobs = nil
		return true
	}
	// Bound the allocation by the bytes present: a link takes > 4 bytes.
	if n > uint64(len(r.b)-r.pos)/4 {
		return false
	}
	c.Blobs = make([]lexutil.LexLink, n)
	for i := range c.Blobs {
		if c.Blobs[i], ok = r.link(); !ok {
			return false
		}
	}
	return true
}
