//go:build cgo

package k256

import (
	"bytes"
	"testing"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
)

// TestPreparedKeyIsParsedOnce: a prepared key holds the uncompressed point
// (libsecp256k1 parses it without a square root), and a check does no
// work per call beyond the digest: at most one allocation (the digest
// handed to C), none for the key.
func TestPreparedKeyIsParsedOnce(t *testing.T) {
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		t.Fatal(err)
	}
	pubI, _ := priv.PublicKey()
	k, ok := Prepare(pubI).(*Key)
	if !ok {
		t.Fatalf("a K-256 key prepared as %T", Prepare(pubI))
	}
	if len(k.point) != 65 || k.point[0] != 0x04 || !bytes.Equal(k.point, pubI.(*atcrypto.PublicKeyK256).UncompressedBytes()) {
		t.Fatalf("prepared point %x: not the uncompressed point", k.point)
	}
	content := make([]byte, 150)
	sig, err := priv.HashAndSign(content)
	if err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() {
		if k.HashAndVerify(content, sig) != nil {
			t.Fatal("a valid signature refused")
		}
	}); n > 1 {
		t.Fatalf("%v allocations per check, want at most 1", n)
	}
}
