// Package car owns a small, strict, allocation-light reader of CAR v1 files
// held in memory: the varint-framed header, the header's DAG-CBOR map
// {roots: [CID], version: 1}, and the block sections, each checked against
// its CID's multihash.
//
// # What it provides
//
//   - Open(b): parses the header and returns a Reader positioned at the
//     first block; Reader.Roots lists the root CIDs' bytes.
//   - Reader.Next: the next block's CID bytes and data, both sub-slices of
//     b (no copies), after the block's bytes were hashed and compared with
//     the CID (sha2-256 on a fast path, any multihash go-cid knows
//     otherwise); io.EOF after the last block. Reader.Offset: where the
//     last block ends in b, for callers that index blocks by offset.
//   - ReadLink: a DAG-CBOR CID link (tag 42, minimal heads, at most
//     MaxLinkBytes), as cbor-gen reads one; ValidCID: "exactly one CID"
//     without allocating for the atproto shape; CIDString for error
//     messages. The header, backfill's MST node decoder and upstream's fast
//     #commit decoder read links with them.
//
// # Invariants kept here
//
//   - Never panics on hostile input and never allocates in proportion to a
//     declared length: every length is checked against the bytes present.
//   - Fail-closed: a bad header, a truncated section, an undecodable CID or a
//     block that does not hash to its CID is an error (ErrMalformed,
//     ErrTruncated, ErrBadBlock), never skipped.
//   - The returned slices alias the input; callers that keep them keep the
//     whole input alive and must not mutate it.
//
// # Not here
//
// Resolving blocks into a repository (commit, MST, records) is the caller's:
// upstream.CommitOps for firehose commits, backfill.VerifyBytes for whole
// repository CARs (it indexes the blocks by CID and checks its context
// between them).
package car
