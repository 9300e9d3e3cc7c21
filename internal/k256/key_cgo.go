//go:build cgo

package k256

import "github.com/bluesky-social/indigo/atproto/atcrypto"

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

// HashAndVerify is atcrypto's low-S check, run by libsecp256k1
// (verifyPoint).
func (k *Key) HashAndVerify(content, sig []byte) error {
	return verifyPoint(k.point, content, sig)
}

// Equal compares the keys, prepared or not.
func (k *Key) Equal(other atcrypto.PublicKey) bool {
	switch o := other.(type) {
	case *Key:
		other = o.PublicKeyK256
	case *parsedKey:
		return o.Equal(k)
	}
	return k.PublicKeyK256.Equal(other)
}
