//go:build !cgo

package k256

import "github.com/bluesky-social/indigo/atproto/atcrypto"

// ParsePublicMultibase is atcrypto.ParsePublicMultibase: without cgo every
// key is atcrypto's.
func ParsePublicMultibase(encoded string) (atcrypto.PublicKey, error) {
	return atcrypto.ParsePublicMultibase(encoded)
}
