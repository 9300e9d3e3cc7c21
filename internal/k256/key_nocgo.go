//go:build !cgo

package k256

import "github.com/bluesky-social/indigo/atproto/atcrypto"

// Native: this build checks K-256 signatures with libsecp256k1.
const Native = false

// Prepare returns pub: without cgo every key is checked by atcrypto.
func Prepare(pub atcrypto.PublicKey) atcrypto.PublicKey { return pub }
