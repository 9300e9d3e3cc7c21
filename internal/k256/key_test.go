package k256_test

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/big"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/internal/k256"
)

// n is the order of secp256k1's group.
var n, _ = new(big.Int).SetString("fffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141", 16)

// scalar is v as 32 big-endian bytes (v < 2^256).
func scalar(v *big.Int) []byte { return v.FillBytes(make([]byte, 32)) }

// highS is sig's other valid form: s replaced by n - s (valid for a
// lenient check, refused by a low-S one).
func highS(sig []byte) []byte {
	s := new(big.Int).SetBytes(sig[32:])
	return append(bytes.Clone(sig[:32]), scalar(new(big.Int).Sub(n, s))...)
}

type sigCase struct {
	name    string
	content []byte
	sig     []byte
	// valid: atproto accepts it (the expected verdict, asserted apart
	// from the differential one).
	valid bool
}

// sigCases are signatures of content by priv: valid, high-S, malformed in
// each field, over other content, and by another key.
func sigCases(t testing.TB, priv *atcrypto.PrivateKeyK256, other atcrypto.PrivateKey, content []byte) []sigCase {
	t.Helper()
	sig, err := priv.HashAndSign(content)
	if err != nil {
		t.Fatal(err)
	}
	otherSig, err := other.HashAndSign(content)
	if err != nil {
		t.Fatal(err)
	}
	r, s := sig[:32], sig[32:]
	cat := func(a, b []byte) []byte { return append(bytes.Clone(a), b...) }
	big1 := big.NewInt(1)
	flipped := bytes.Clone(sig)
	flipped[17] ^= 0x04
	half := new(big.Int).Rsh(n, 1)
	return []sigCase{
		{"valid", content, sig, true},
		{"high-S", content, highS(sig), false},
		{"other content", append(bytes.Clone(content), 'x'), sig, false},
		{"other key", content, otherSig, false},
		{"bit flipped", content, flipped, false},
		{"empty", content, nil, false},
		{"63 bytes", content, sig[:63], false},
		{"65 bytes", content, append(bytes.Clone(sig), 0), false},
		{"r zero", content, cat(make([]byte, 32), s), false},
		{"s zero", content, cat(r, make([]byte, 32)), false},
		{"r = n", content, cat(scalar(n), s), false},
		{"s = n", content, cat(r, scalar(n)), false},
		{"r = n + 1", content, cat(scalar(new(big.Int).Add(n, big1)), s), false},
		{"s = n/2 + 1", content, cat(r, scalar(new(big.Int).Add(half, big1))), false},
		{"s = n/2", content, cat(r, scalar(half)), false},
		{"all ones", content, bytes.Repeat([]byte{0xff}, 64), false},
		{"DER", content, append([]byte{0x30, 0x44, 0x02, 0x20}, sig...), false},
	}
}

// TestPrepareMatchesAtcrypto: over many keys, a prepared key accepts and
// refuses exactly what atcrypto's HashAndVerify does, and that is atproto's
// rule (valid low-S r||s only). The high-S case is a real signature
// (atcrypto's lenient check accepts it).
func TestPrepareMatchesAtcrypto(t *testing.T) {
	other, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	prepared := 0
	for i := range 64 {
		priv, err := atcrypto.GeneratePrivateKeyK256()
		if err != nil {
			t.Fatal(err)
		}
		pubI, err := priv.PublicKey()
		if err != nil {
			t.Fatal(err)
		}
		pub := k256.Prepare(pubI)
		if pub != pubI {
			prepared++
		}
		content := fmt.Appendf(nil, "commit bytes %d", i)
		for _, c := range sigCases(t, priv, other, content) {
			want := pubI.HashAndVerify(c.content, c.sig) == nil
			got := pub.HashAndVerify(c.content, c.sig) == nil
			if got != want || got != c.valid {
				t.Errorf("key %d, %s: prepared %v, atcrypto %v, atproto %v", i, c.name, got, want, c.valid)
			}
			if c.name == "high-S" && pubI.HashAndVerifyLenient(c.content, c.sig) != nil {
				t.Errorf("key %d: the high-S case is not a valid signature", i)
			}
		}
	}
	if want := map[bool]int{true: 64, false: 0}[k256.Native]; prepared != want {
		t.Errorf("%d of 64 keys prepared for libsecp256k1 (Native %v), want %d", prepared, k256.Native, want)
	}
}

// FuzzPrepareMatchesAtcrypto: any signature bytes get the same verdict
// from a prepared key and from atcrypto.
func FuzzPrepareMatchesAtcrypto(f *testing.F) {
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		f.Fatal(err)
	}
	other, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		f.Fatal(err)
	}
	pubI, _ := priv.PublicKey()
	pub := k256.Prepare(pubI)
	content := []byte("fuzzed commit")
	for _, c := range sigCases(f, priv, other, content) {
		f.Add(c.content, c.sig)
	}
	f.Fuzz(func(t *testing.T, content, sig []byte) {
		want := pubI.HashAndVerify(content, sig) == nil
		if got := pub.HashAndVerify(content, sig) == nil; got != want {
			t.Fatalf("prepared %v, atcrypto %v (content %x, sig %x)", got, want, content, sig)
		}
	})
}

// TestPrepareOtherKeys: P-256 keys and nil are returned as they are
// (atcrypto checks them), and a prepared key equals its original both ways.
func TestPrepareOtherKeys(t *testing.T) {
	p256, err := atcrypto.GeneratePrivateKeyP256()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := p256.PublicKey()
	if got := k256.Prepare(pub); got != pub {
		t.Errorf("P-256 key prepared as %T", got)
	}
	if k256.Prepare(nil) != nil {
		t.Error("nil key prepared as non-nil")
	}
	priv, _ := atcrypto.GeneratePrivateKeyK256()
	kpub, _ := priv.PublicKey()
	prepared := k256.Prepare(kpub)
	again, _ := atcrypto.ParsePublicMultibase(kpub.Multibase())
	if !prepared.Equal(kpub) || !prepared.Equal(k256.Prepare(again)) || !prepared.Equal(again) {
		t.Error("a prepared key differs from its original")
	}
	if prepared.Multibase() != kpub.Multibase() {
		t.Error("a prepared key's multibase differs")
	}
}

// TestPreparedCommit: a signed commit verifies through
// repo.Commit.VerifySignature with a prepared key; altered, it does not.
func TestPreparedCommit(t *testing.T) {
	priv, _ := atcrypto.GeneratePrivateKeyK256()
	pubI, _ := priv.PublicKey()
	pub := k256.Prepare(pubI)
	data, err := cid.Prefix{Version: 1, Codec: cid.DagCBOR, MhType: 0x12, MhLength: -1}.Sum([]byte("mst root"))
	if err != nil {
		t.Fatal(err)
	}
	c := repo.Commit{DID: "did:plc:abc", Version: 3, Data: data, Rev: syntax.NewTIDNow(0).String()}
	if err := c.Sign(priv); err != nil {
		t.Fatal(err)
	}
	if err := c.VerifySignature(pub); err != nil {
		t.Fatalf("signed commit: %v", err)
	}
	c.Rev = syntax.NewTIDNow(1).String()
	if err := c.VerifySignature(pub); err == nil {
		t.Fatal("altered commit verified")
	}
	h := sha256.Sum256([]byte("x"))
	if pub.HashAndVerify(h[:], c.Sig) == nil {
		t.Fatal("signature verified over other content")
	}
}
