//go:build cgo

package k256

// parse_cgo.go owns the parsing of a multibase K-256 key by libsecp256k1:
// a resolution's key is decompressed once there, not through atcrypto's
// pure-Go point decompression and public-key setup (about 15 CPU-µs per
// DID resolved, a bootstrap's every account).

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"

	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/ethereum/go-ethereum/crypto/secp256k1"
	"github.com/mr-tron/base58"
)

// ParsePublicMultibase is atcrypto.ParsePublicMultibase with the result
// prepared (Prepare): the same strings accepted and refused, and a K-256
// key decompressed by libsecp256k1. A P-256 key is atcrypto's.
func ParsePublicMultibase(encoded string) (atcrypto.PublicKey, error) {
	data, ok := k256Multibase(encoded)
	if !ok {
		return atcrypto.ParsePublicMultibase(encoded) // P-256, or atcrypto's own error
	}
	k := &parsedKey{}
	if len(data) != len(k.compressed) {
		return nil, fmt.Errorf("invalid K-256/secp256k1 public key: %d bytes, want %d", len(data), len(k.compressed))
	}
	copy(k.compressed[:], data)
	x, y := secp256k1.DecompressPubkey(data) // nil unless 0x02/0x03, x < p and on the curve
	if x == nil {
		return nil, fmt.Errorf("invalid K-256/secp256k1 public key: not a compressed point of the curve")
	}
	k.point[0] = 4
	x.FillBytes(k.point[1:33])
	y.FillBytes(k.point[33:])
	return k, nil
}

// k256Multibase returns the key bytes of a well-formed multibase
// base58btc string with the secp256k1-pub multicodec prefix; ok is false
// for anything else (left to atcrypto).
func k256Multibase(encoded string) (data []byte, ok bool) {
	if len(encoded) < 2 || encoded[0] != 'z' {
		return nil, false
	}
	data, err := base58.Decode(encoded[1:])
	if err != nil || len(data) < 3 || data[0] != 0xE7 || data[1] != 0x01 {
		return nil, false
	}
	return data[2:], true
}

// parsedKey is a K-256 key parsed by libsecp256k1: its compressed and
// uncompressed points. HashAndVerify runs libsecp256k1; the methods that
// need atcrypto's key (HashAndVerifyLenient, JWK) build it on each call,
// which nothing on a hot path does.
type parsedKey struct {
	compressed [33]byte
	point      [65]byte
}

var _ atcrypto.PublicKey = (*parsedKey)(nil)

// HashAndVerify is Key's check (libsecp256k1, low-S).
func (k *parsedKey) HashAndVerify(content, sig []byte) error {
	return verifyPoint(k.point[:], content, sig)
}

// verifyPoint checks a low-S 64-byte r||s signature of SHA-256(content)
// with the uncompressed point: libsecp256k1's parse rejects r or s >= n,
// its verify rejects r or s zero and s > n/2, which is atcrypto's
// HashAndVerify.
func verifyPoint(point, content, sig []byte) error {
	h := sha256.Sum256(content)
	if !secp256k1.VerifySignature(point, h[:], sig) {
		return atcrypto.ErrInvalidSignature
	}
	return nil
}

// Equal is true for the same K-256 key, parsed, prepared or atcrypto's.
func (k *parsedKey) Equal(other atcrypto.PublicKey) bool {
	switch other.(type) {
	case *parsedKey, *Key, *atcrypto.PublicKeyK256:
		return bytes.Equal(k.point[:], other.UncompressedBytes())
	}
	return false
}

func (k *parsedKey) Bytes() []byte             { return bytes.Clone(k.compressed[:]) }
func (k *parsedKey) UncompressedBytes() []byte { return bytes.Clone(k.point[:]) }

// Multibase is atcrypto's encoding: "z", base58btc of the secp256k1-pub
// multicodec prefix and the compressed point.
func (k *parsedKey) Multibase() string {
	var b strings.Builder
	b.WriteByte('z')
	b.WriteString(base58.Encode(append([]byte{0xE7, 0x01}, k.compressed[:]...)))
	return b.String()
}

func (k *parsedKey) DIDKey() string { return "did:key:" + k.Multibase() }

func (k *parsedKey) HashAndVerifyLenient(content, sig []byte) error {
	full, err := k.atcrypto()
	if err != nil {
		return err
	}
	return full.HashAndVerifyLenient(content, sig)
}

func (k *parsedKey) JWK() (*atcrypto.JWK, error) {
	full, err := k.atcrypto()
	if err != nil {
		return nil, err
	}
	return full.JWK()
}

// atcrypto is the key as atcrypto parses it (which accepts every point
// libsecp256k1 does).
func (k *parsedKey) atcrypto() (*atcrypto.PublicKeyK256, error) {
	return atcrypto.ParsePublicBytesK256(k.compressed[:])
}
