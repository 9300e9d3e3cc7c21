package firehose

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/upstream"
)

// referenceCommit is what indigo makes of a commit block: cbor-gen's
// decode, its encoding again (the block when canonical) and the unsigned
// bytes UnsignedBytes encodes.
func referenceCommit(b []byte) (c *repo.Commit, again, unsigned []byte, err error) {
	c = new(repo.Commit)
	if err = c.UnmarshalCBOR(bytes.NewReader(b)); err != nil {
		return nil, nil, nil, err
	}
	var buf bytes.Buffer
	if err = c.MarshalCBOR(&buf); err != nil {
		return nil, nil, nil, err
	}
	if unsigned, err = c.UnsignedBytes(); err != nil {
		return nil, nil, nil, err
	}
	return c, buf.Bytes(), unsigned, nil
}

// checkSignedCommit fails t when decodeSignedCommit took b and differs from
// indigo: the same commit as cbor-gen's decode, b exactly its encoding, and
// the same unsigned bytes as UnsignedBytes. It reports whether b was taken.
func checkSignedCommit(t *testing.T, b []byte) bool {
	t.Helper()
	s, ok := decodeSignedCommit(b)
	if !ok {
		return false
	}
	want, again, unsigned, err := referenceCommit(b)
	switch {
	case err != nil:
		t.Fatalf("taken, but cbor-gen refuses it: %v (block %x)", err, b)
	case !reflect.DeepEqual(s.commit, want):
		t.Fatalf("decoded %+v, cbor-gen %+v (block %x)", s.commit, want, b)
	case !bytes.Equal(again, b):
		t.Fatalf("taken, but not cbor-gen's encoding of its commit: %x, encodes as %x", b, again)
	case !bytes.Equal(s.unsigned, unsigned):
		t.Fatalf("unsigned bytes %x, UnsignedBytes %x (block %x)", s.unsigned, unsigned, b)
	}
	return true
}

// testCID is a dag-cbor sha-256 CID of data.
func testCID(t testing.TB, data string) cid.Cid {
	t.Helper()
	c, err := cid.Prefix{Version: 1, Codec: cid.DagCBOR, MhType: 0x12, MhLength: -1}.Sum([]byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// encodeCommit is c's block as cbor-gen writes it.
func encodeCommit(t testing.TB, c *repo.Commit) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := c.MarshalCBOR(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestDecodeSignedCommitMatchesIndigo: every signed commit cbor-gen writes
// — real ones of the simulated network's traffic, and made ones whose
// strings, signature and version cross each width of a CBOR head, with
// and without prev — is taken, decodes as cbor-gen decodes it, and its
// unsigned bytes are UnsignedBytes'; a real commit's signature verifies
// over them.
func TestDecodeSignedCommitMatchesIndigo(t *testing.T) {
	for i, ev := range trafficCommits(t, 100) {
		m := ev.Commit
		bs, err := upstream.ReadCommitBlocks(m.Blocks, cid.Cid(m.Commit))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := bs.Get(cid.Cid(m.Commit))
		if !checkSignedCommit(t, b) {
			t.Fatalf("commit %d: a real commit block is not taken: %x", i, b)
		}
	}
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := priv.PublicKey()
	prev := testCID(t, "prev")
	for _, n := range []int{1, 23, 24, 255, 256, 65535, 65536} {
		for _, withPrev := range []bool{false, true} {
			c := &repo.Commit{DID: "did:plc:" + strings.Repeat("a", n), Version: 3, Data: testCID(t, "data"),
				Rev: syntax.NewTIDNow(uint(n % 1024)).String()}
			if withPrev {
				c.Prev = &prev
			}
			if err := c.Sign(priv); err != nil {
				t.Fatal(err)
			}
			b := encodeCommit(t, c)
			if !checkSignedCommit(t, b) {
				t.Fatalf("DID of %d bytes, prev %v: not taken", n, withPrev)
			}
			s, _ := decodeSignedCommit(b)
			if !s.verifiedBy(pub) {
				t.Fatalf("DID of %d bytes: the signature does not verify over the cut bytes", n)
			}
			for _, v := range []int64{0, 23, 24, 1 << 40} {
				c.Version, c.Rev, c.Sig = v, strings.Repeat("r", n), bytes.Repeat([]byte{7}, n)
				if !checkSignedCommit(t, encodeCommit(t, c)) {
					t.Fatalf("version %d, rev and sig of %d bytes: not taken", v, n)
				}
			}
		}
	}
}

// malformedCommits are blocks decodeSignedCommit must refuse (cbor-gen
// decides them: some it reads, some it refuses), made from the signed
// commit block b.
func malformedCommits(t testing.TB, b []byte) map[string][]byte {
	t.Helper()
	at := func(key string) int {
		i := bytes.Index(b, []byte(key))
		if i < 0 {
			t.Fatalf("no %q in %x", key, b)
		}
		return i
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	did, rev, sig, data, prev, version := at(keyDID), at(keyRev), at(keySig), at(keyData), at(keyPrev), at(keyVersion)
	out := map[string][]byte{
		"empty":               {},
		"trailing byte":       cat(b, []byte{0}),
		"a map of 7":          cat([]byte{0xa7}, b[1:]),
		"non-minimal map":     cat([]byte{0xb8, 6}, b[1:]),
		"indefinite map":      cat([]byte{0xbf}, b[1:], []byte{0xff}),
		"did and rev swapped": cat(b[:1], b[rev:sig], b[did:rev], b[sig:]),
		"rev missing":         cat([]byte{0xa5}, b[did:rev], b[sig:]),
		"sig missing":         cat([]byte{0xa5}, b[did:sig], b[data:]),
		"sig twice":           cat([]byte{0xa7}, b[did:data], b[sig:data], b[data:]),
		"empty rev":           cat(b[:rev], []byte(keyRev), []byte{0x60}, b[sig:]),
		"empty sig":           cat(b[:sig], []byte(keySig), []byte{0x40}, b[data:]),
		"sig as text":         cat(b[:sig+4], []byte{b[sig+4] ^ 0x20}, b[sig+5:]),
		"non-minimal did":     cat(b[:did+4], []byte{0x78, b[did+4] & 0x1f}, b[did+5:]),
		"unknown key":         cat([]byte{0xa7}, b[1:version], []byte("\x64zzzz\x00"), b[version:]),
		"prev not a link":     cat(b[:prev+5], []byte{0x00}, b[version:]),
		"version negative":    cat(b[:len(b)-1], []byte{0x22}),
		"version text":        cat(b[:len(b)-1], []byte{0x60}),
		"data not a CID":      cat(b[:data+5], []byte{0xd8, 0x2a, 0x42, 0x00, 0x01}, b[prev:]),
	}
	for i := range len(b) {
		out[fmt.Sprintf("truncated to %d bytes", i)] = b[:i]
	}
	return out
}

// TestDecodeSignedCommitRefuses: blocks that are not exactly cbor-gen's
// encoding of a signed commit — truncated, trailing bytes, keys out of
// order, twice, missing or unknown, heads not minimal, fields of the wrong
// type, an empty signature — are refused (never a panic), so cbor-gen
// decides each as before.
func TestDecodeSignedCommitRefuses(t *testing.T) {
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	prev := testCID(t, "prev")
	c := &repo.Commit{DID: "did:web:a.b", Version: 3, Data: testCID(t, "data"), Prev: &prev,
		Rev: syntax.NewTIDNow(0).String()}
	if err := c.Sign(priv); err != nil {
		t.Fatal(err)
	}
	b := encodeCommit(t, c)
	if _, ok := decodeSignedCommit(b); !ok {
		t.Fatal("the well-formed block is not taken")
	}
	for name, m := range malformedCommits(t, b) {
		if s, ok := decodeSignedCommit(m); ok {
			t.Errorf("%s: taken as %+v (block %x)", name, s.commit, m)
		}
	}
}

// FuzzDecodeSignedCommit: whatever decodeSignedCommit takes, cbor-gen
// decodes to the same commit, encodes to exactly the block, and its
// UnsignedBytes are the cut bytes; nothing panics. Run with:
// go test ./firehose -fuzz FuzzDecodeSignedCommit
func FuzzDecodeSignedCommit(f *testing.F) {
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		f.Fatal(err)
	}
	prev := testCID(f, "prev")
	c := &repo.Commit{DID: "did:plc:abcdefghijklmnopqrstuvwx", Version: 3, Data: testCID(f, "data"),
		Rev: syntax.NewTIDNow(0).String()}
	if err := c.Sign(priv); err != nil {
		f.Fatal(err)
	}
	f.Add(encodeCommit(f, c))
	c.Prev = &prev
	b := encodeCommit(f, c)
	f.Add(b)
	for _, m := range malformedCommits(f, b) {
		f.Add(m)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkSignedCommit(t, b)
	})
}
