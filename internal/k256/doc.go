// Package k256 prepares resolved public keys for repeated commit signature
// checks: ident prepares every key it resolves or reads back, so the live
// firehose's and backfill's checks (through ident's Verify) all use it.
//
// A K-256 (secp256k1) key prepared with Prepare is checked by
// libsecp256k1 (through go-ethereum's cgo binding) in builds with cgo:
// about 2.2 times less CPU per check than atcrypto's pure-Go check
// (gitlab.com/yawning/secp256k1-voi), which dominates the live path's cost.
// Prepare keeps the key's uncompressed point, so no check decompresses it
// again. Builds without cgo (CGO_ENABLED=0: the container image) and every
// other key (P-256) use atcrypto's check. Both accept exactly the same
// signatures: a 64-byte r||s with r and s in [1, n) and s <= n/2 (low-S,
// as atproto requires) over the SHA-256 of the unsigned commit's CBOR.
//
// ParsePublicMultibase is atcrypto's parse of a multibase key, prepared:
// with cgo a K-256 key is decompressed by libsecp256k1 (about a third of
// the CPU of atcrypto's parse and Prepare), accepting and refusing exactly
// the strings atcrypto does (a differential test and fuzzer hold it).
package k256
