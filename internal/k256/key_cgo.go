//go:build cgo

package k256

import (
	"crypto/sha256"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/ethereum/go-ethereum/crypto/secp256k1"
)

// Native: this build checks K-256 signatures with libsecp256k1.
const Native = true

// Key is a K-256 public key whose HashAndVerify runs libsecp256k1; its
// other methods are atcrypto's.
type Key struct {
	*atcrypto.PublicKeyK256
	// point is the uncompressed point (65 bytes), which libsecp256k1
	// parses without a square root.
	point []byte
}

// Prepare returns pub ready for repeated checks: a K-256 key as a *Key,
// any other key (P-256, nil) as it is.
func Prepare(pub atcrypto.PublicKey) atcrypto.PublicKey {
	k, ok := pub.(*atcrypto.PublicKeyK256)
	if !ok {
		return pub
	}
	return &Key{PublicKeyK256: k, point: k.UncompressedBytes()}
}

// HashAndVerify checks a low-S 64-byte r||s signature of SHA-256(content):
// libsecp256k1's parse rejects r or s >= n, its verify rejects r or s zero
// and s > n/2, which is atcrypto's HashAndVerify.
func (k *Key) HashAndVerify(content, sig []byte) error {
	h := sha256.Sum256(content)
	if !secp256k1.VerifySignature(k.point, h[:], sig) {
		return atcrypto.ErrInvalidSignature
	}
	return nil
}

// Equal compares the keys, prepared or not.
func (k *Key) Equal(other atcrypto.PublicKey) bool {
	if o, ok := other.(*Key); ok {
		other = o.PublicKeyK256
	}
	return k.PublicKeyK256.Equal(other)
}
