package firehose

// verify_commit.go owns the bytes a commit's signature covers. atproto
// signs the commit's DAG-CBOR without its "sig" entry; indigo gets them by
// decoding the block and encoding the commit again without the signature
// (repo.Commit.UnsignedBytes). A block in the canonical form cbor-gen
// writes is read here field by field and its unsigned bytes are cut out of
// it: the "sig" entry removed and the map head counting one entry less
// (FuzzDecodeSignedCommit holds both equal to cbor-gen's decode and
// UnsignedBytes). Any other block is left to cbor-gen, as before.

import (
	"math"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/ipfs/go-cid"
)

// signed is a decoded commit and the bytes its signature covers (nil when
// not cut from the block: UnsignedBytes encodes them).
type signed struct {
	commit   *repo.Commit
	unsigned []byte
	// uninverted: a #commit whose ops were not inverted (no prevData, or
	// an update or delete without its prev), so nothing proves they are
	// all of the commit's changes.
	uninverted bool
}

// verifiedBy reports whether key verifies s's signature.
func (s signed) verifiedBy(key atcrypto.PublicKey) bool {
	unsigned := s.unsigned
	if unsigned == nil {
		var err error
		if unsigned, err = s.commit.UnsignedBytes(); err != nil {
			return false
		}
	}
	return key.HashAndVerify(unsigned, s.commit.Sig) == nil
}

// A signed commit's keys in DAG-CBOR's order (shorter first, then
// bytewise), each with its text head: the order cbor-gen writes them.
const (
	keyDID     = "\x63did"
	keyRev     = "\x63rev"
	keySig     = "\x63sig"
	keyData    = "\x64data"
	keyPrev    = "\x64prev"
	keyVersion = "\x67version"
)

// maxCommitText is cbor-gen's limit of a commit's strings (a longer one it
// refuses; it is left to it). Its limit of the signature is maxKeySuffix,
// its limit of every byte string.
const maxCommitText = 1_000_000

// The map heads of a signed and of an unsigned commit.
const (
	signedCommitHead   = 0xa6
	unsignedCommitHead = 0xa5
)

// decodeSignedCommit reads b when it is exactly what cbor-gen writes for a
// signed repo.Commit with a rev: one map of six entries — did, rev, sig,
// data, prev, version, in that order — every head minimal, did and rev
// text, rev and sig not empty, data a link, prev a link or null, version an
// unsigned integer, nothing after the map. It returns the commit and the
// bytes its signature covers: b without the sig entry, its map head
// counting five. ok is false for any other b.
func decodeSignedCommit(b []byte) (s signed, ok bool) {
	if len(b) == 0 || b[0] != signedCommitHead {
		return signed{}, false
	}
	r := nodeReader{b: b, pos: 1}
	c := new(repo.Commit)
	var did, rev, sig []byte
	ok = r.key(keyDID)
	if ok {
		did, ok = r.text()
	}
	ok = ok && r.key(keyRev)
	if ok {
		rev, ok = r.text()
	}
	sigStart := r.pos
	ok = ok && len(rev) > 0 && r.key(keySig)
	if ok {
		sig, ok = r.bytes()
	}
	sigEnd := r.pos
	ok = ok && len(sig) > 0 && r.key(keyData)
	if ok {
		c.Data, ok = r.link(false)
	}
	var prev cid.Cid
	if ok = ok && r.key(keyPrev); ok {
		prev, ok = r.link(true)
	}
	ok = ok && r.key(keyVersion)
	if ok {
		c.Version, ok = r.int64()
	}
	if !ok || r.pos != len(b) {
		return signed{}, false
	}
	c.DID, c.Rev, c.Sig = string(did), string(rev), append([]byte(nil), sig...)
	if prev.Defined() {
		c.Prev = &prev
	}
	unsigned := make([]byte, 0, len(b)-(sigEnd-sigStart))
	unsigned = append(unsigned, unsignedCommitHead)
	unsigned = append(unsigned, b[1:sigStart]...)
	unsigned = append(unsigned, b[sigEnd:]...)
	return signed{commit: c, unsigned: unsigned}, true
}

// key reads the text key k, its head included.
func (r *nodeReader) key(k string) bool {
	if len(r.b)-r.pos < len(k) || string(r.b[r.pos:r.pos+len(k)]) != k {
		return false
	}
	r.pos += len(k)
	return true
}

// text reads a text string of at most maxCommitText bytes, aliasing the
// block.
func (r *nodeReader) text() ([]byte, bool) { return r.str(3, maxCommitText) }

// int64 reads an unsigned integer that fits an int64.
func (r *nodeReader) int64() (int64, bool) {
	v, ok := r.arg(0)
	if !ok || v > math.MaxInt64 {
		return 0, false
	}
	return int64(v), true
}
