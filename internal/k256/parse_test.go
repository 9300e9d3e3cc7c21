package k256_test

import (
	"bytes"
	"fmt"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/mr-tron/base58"

	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/internal/k256"
)

// p is the order of secp256k1's base field.
var p, _ = new(big.Int).SetString("fffffffffffffffffffffffffffffffffffffffffffffffffffffffefffffc2f", 16)

// k256String is the multibase string of raw key bytes with the
// secp256k1-pub multicodec prefix.
func k256String(key []byte) string {
	return "z" + base58.Encode(append([]byte{0xE7, 0x01}, key...))
}

// parseCases are multibase strings atcrypto accepts and refuses: real
// K-256 and P-256 keys, compressed points whose x is not on the curve or
// not below p, every other prefix byte and length, and broken encodings.
func parseCases(t testing.TB) []string {
	t.Helper()
	var cases []string
	for range 16 {
		priv, err := atcrypto.GeneratePrivateKeyK256()
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := priv.PublicKey()
		cases = append(cases, pub.Multibase(), k256String(pub.UncompressedBytes()))
		c := pub.Bytes()
		for _, prefix := range []byte{0x00, 0x01, 0x04, 0x05, 0x06, 0x07, 0xff, c[0] ^ 1} {
			cases = append(cases, k256String(append([]byte{prefix}, c[1:]...)))
		}
		cases = append(cases, k256String(c[:32]), k256String(append(bytes.Clone(c), 0)), "z"+base58.Encode(c))
		p256, err := atcrypto.GeneratePrivateKeyP256()
		if err != nil {
			t.Fatal(err)
		}
		ppub, _ := p256.PublicKey()
		cases = append(cases, ppub.Multibase())
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 64 { // about half of the x are on the curve
		key := make([]byte, 33)
		for i := range key {
			key[i] = byte(rng.Uint32())
		}
		key[0] = 2 + byte(rng.IntN(2))
		cases = append(cases, k256String(key))
	}
	big1 := big.NewInt(1)
	for _, x := range []*big.Int{new(big.Int), big1, big.NewInt(7), new(big.Int).Sub(p, big1), p, new(big.Int).Add(p, big1),
		new(big.Int).Sub(new(big.Int).Lsh(big1, 256), big1)} {
		for _, prefix := range []byte{2, 3} {
			cases = append(cases, k256String(append([]byte{prefix}, x.FillBytes(make([]byte, 32))...)))
		}
	}
	return append(cases, "", "z", "zz", "z1", "m"+cases[0][1:], "z0OIl", cases[0]+"0", "z"+base58.Encode([]byte{0xE7, 0x01}),
		"z"+base58.Encode([]byte{0xE7, 0x01, 0x02}), "z1"+cases[0][1:], "z"+base58.Encode([]byte{0xE7, 0x02, 0x02}))
}

// checkParse fails unless k256.ParsePublicMultibase and atcrypto's give
// encoded the same verdict and, accepted, the same key: equal both ways,
// same encodings, same verdict on a signature of it.
func checkParse(t *testing.T, encoded string) (accepted bool) {
	t.Helper()
	want, wantErr := atcrypto.ParsePublicMultibase(encoded)
	got, err := k256.ParsePublicMultibase(encoded)
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("%q: k256 error %v, atcrypto error %v", encoded, err, wantErr)
	}
	if err != nil {
		return false
	}
	if !got.Equal(want) || !k256.Prepare(want).Equal(got) || !got.Equal(k256.Prepare(want)) || !got.Equal(got) {
		t.Fatalf("%q: the parsed keys differ", encoded)
	}
	if got.Multibase() != want.Multibase() || got.DIDKey() != want.DIDKey() ||
		!bytes.Equal(got.Bytes(), want.Bytes()) || !bytes.Equal(got.UncompressedBytes(), want.UncompressedBytes()) {
		t.Fatalf("%q: encodings differ: %s, want %s", encoded, got.Multibase(), want.Multibase())
	}
	sig := bytes.Repeat([]byte{1}, 64)
	if (got.HashAndVerify([]byte("x"), sig) == nil) != (want.HashAndVerify([]byte("x"), sig) == nil) ||
		(got.HashAndVerifyLenient([]byte("x"), sig) == nil) != (want.HashAndVerifyLenient([]byte("x"), sig) == nil) {
		t.Fatalf("%q: verdicts differ", encoded)
	}
	return true
}

// TestParseMatchesAtcrypto: k256.ParsePublicMultibase accepts and refuses
// exactly the strings atcrypto does, and an accepted key is atcrypto's.
func TestParseMatchesAtcrypto(t *testing.T) {
	accepted := 0
	for _, c := range parseCases(t) {
		if checkParse(t, c) {
			accepted++
		}
	}
	if accepted < 40 {
		t.Errorf("only %d cases accepted: the differential covers too few keys", accepted)
	}
}

// TestParsedKeyChecks: a parsed K-256 key is native in a cgo build and
// gives atcrypto's verdict on every signature case, the lenient check and
// JWK included.
func TestParsedKeyChecks(t *testing.T) {
	priv, _ := atcrypto.GeneratePrivateKeyK256()
	other, _ := atcrypto.GeneratePrivateKeyK256()
	pubI, _ := priv.PublicKey()
	pub, err := k256.ParsePublicMultibase(pubI.Multibase())
	if err != nil {
		t.Fatal(err)
	}
	if _, isAtcrypto := pub.(*atcrypto.PublicKeyK256); isAtcrypto == k256.Native {
		t.Errorf("parsed as %T with Native %v", pub, k256.Native)
	}
	for _, c := range sigCases(t, priv, other, []byte("commit")) {
		if got := pub.HashAndVerify(c.content, c.sig) == nil; got != c.valid {
			t.Errorf("%s: parsed key says %v, atproto %v", c.name, got, c.valid)
		}
		if got, want := pub.HashAndVerifyLenient(c.content, c.sig) == nil, pubI.HashAndVerifyLenient(c.content, c.sig) == nil; got != want {
			t.Errorf("%s: lenient %v, atcrypto %v", c.name, got, want)
		}
	}
	got, err := pub.JWK()
	want, _ := pubI.JWK()
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("JWK %v (%v), want %v", got, err, want)
	}
}

// FuzzParseMatchesAtcrypto: any string gets atcrypto's verdict.
func FuzzParseMatchesAtcrypto(f *testing.F) {
	for _, c := range parseCases(f) {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, encoded string) { checkParse(t, encoded) })
}

// BenchmarkParsePublicMultibase: a resolution's key parse, atcrypto's and
// then Prepare (what ident did) against k256's.
func BenchmarkParsePublicMultibase(b *testing.B) {
	priv, _ := atcrypto.GeneratePrivateKeyK256()
	pub, _ := priv.PublicKey()
	s := pub.Multibase()
	b.Run("atcrypto+prepare", func(b *testing.B) {
		cpu0 := cputime.Process(b)
		for b.Loop() {
			k, err := atcrypto.ParsePublicMultibase(s)
			if err != nil {
				b.Fatal(err)
			}
			k256.Prepare(k)
		}
		b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
	})
	b.Run("k256", func(b *testing.B) {
		cpu0 := cputime.Process(b)
		for b.Loop() {
			if _, err := k256.ParsePublicMultibase(s); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
	})
}
