// Package ident owns identity resolution: a DID (did:plc through the PLC
// directory named by --plc, did:web over HTTPS) resolved to the parts of
// its document backstream trusts — the atproto signing key, the
// atproto_pds endpoint, the handle it declares — and the commit-signature
// check built on them.
//
// Resolution goes through indigo's atproto/identity BaseDirectory (no
// handle check on a lookup: the archive needs keys and endpoints; handles
// are checked when an #identity names one, CheckIdentity); a did:plc is
// requested by the resolver itself with BaseDirectory's request and
// outcomes, its document read by a scanner of the directory's plain JSON
// shape that falls back to encoding/json for anything else (the same
// documents accepted and the same fields read, held by a differential test
// and a fuzzer), and its Multikey parsed by k256.ParsePublicMultibase. All
// of it sits behind
//
//   - a bounded in-memory cache (CacheSize entries, least recently used
//     evicted) whose entries are trusted for TTL;
//   - the durable copy in the store, ident/<did> (archive.Ident), read on a
//     memory miss; every network resolution is written back through
//     Config.Persist, which node wires to a writer unit (the writer writes
//     it in its batches);
//   - stale-while-revalidate: a document past its TTL (in memory or in the
//     store) is still returned at once, as not fresh, while one background
//     refresh replaces it (owned goroutines, at most Concurrency, stopped by
//     Close). A check that fails with a document that is not fresh resolves
//     again first, so a stale key or PDS costs one re-resolution, never a
//     wrong verdict; only a DID never seen, or invalidated, waits for the
//     network;
//   - one network flight per DID at a time (concurrent lookups of a DID
//     share it), at most Concurrency flights in all (a lookup past the
//     limit waits, counted), each request under Timeout, a failed request
//     retried Retries times with the project's backoff; a DID the
//     directory does not know is not retried. Resolutions per second are
//     at most Concurrency over the directory's latency (64 at 50 ms:
//     1,280/s); requests to the PLC directory may also be held to Rate per
//     second (a burst of Concurrency; a wait is counted): serve holds the
//     public directory to DefaultRate.
//
// ReadExport reads the PLC directory's export (GET /export, its operation
// log in createdAt order, pages of 1000 after a createdAt cursor) and hands
// each DID's latest non-nullified op to the resolver as the identity GET
// /<did> gives: the document rendered as the directory renders it, then
// read by the same code as a resolution (parseIdentity, the key parsing),
// kept in memory and through Persist (the row marked as the export's:
// archive.Ident.Exported), fetched now, so a later Lookup
// needs no request. A tombstone, or an op without an atproto key, drops
// the DID (an invalidation). An op never replaces what the resolver holds
// of its DID, in memory or else in ident/, when that is an invalidation or
// a document resolved at or after the op's createdAt; the export's later
// ops replace its earlier ones. Malformed lines are dropped and counted
// (backstream_ident_export_total{result}), never logged one by one; a page
// is one request under the slots, the PLC rate, Timeout and the retry
// budget, and a page failing past them is ErrExportUnavailable. An
// exported document is not fresh: a check that fails with it resolves the
// DID once more, as with any cached document.
//
// Failures are typed: ErrUnresolvable (the DID could not be resolved, or
// its document is unusable — no signing key); callers record it as the
// failure class "identity", which is retryable (the retry runner tries the
// repo again later). UnknownDID tells the definite "no such DID" among
// them (the directory's 404, a did:web host's 404 or a name that does not
// resolve), which backfill records as class "unknown_did" and gives up on
// after a few in a row. ErrBadSignature says a commit's signature did not
// verify with the current key even after one forced re-resolution (a key
// rotated since the cached copy).
//
// Verify checks a commit's signature with a looked-up document's key and,
// unless that document came from the network in the same lookup, resolves
// once more on a mismatch: at most one extra resolution per failed check.
// VerifyCommit is Lookup then Verify. CheckAuthority refuses a repository
// served by a host that is neither the document's PDS nor a trusted one.
//
// Invalidate marks an entry stale (an #identity event) and refreshes it in
// the background; a lookup before that refresh is done goes to the network
// (sharing its flight), never to the durable copy, so a changed document is
// seen at once, and one resolution follows an invalidation whatever the
// interleaving (a flight finds a document fetched since it was wanted and
// does not resolve again).
//
// CheckIdentity is an #identity event's part: Invalidate, then the handle
// the event names verified both ways, as atproto specifies — the fresh
// document declares it (first at:// alsoKnownAs) and it resolves back to
// the DID (DNS TXT, then https://<handle>/.well-known/atproto-did), under
// the same concurrency limit, in one attempt bounded by HandleTimeout
// (--handle-timeout, DefaultHandleTimeout: it runs on the firehose's path,
// whose one sequencer waits for it, and a handle host is anyone's). That
// resolution's result is kept per (DID, handle) for HandleTTL in a bounded
// cache (CacheSize entries), so a repeated #identity naming the same pair
// costs no request (backstream_ident_handle_cache_hits_total); the DID
// document is still refreshed and must still declare the handle. It returns the
// handle or HandleInvalid, which the firehose archives (strict), counted
// by result (backstream_ident_handles_total). Info.Handle, and the handle
// of ident/<did>, is that verdict ("" until an #identity named one; a
// resolution in between keeps it).
//
// Every request of the resolver's own client goes through Config.Dial:
// node wires upstream's address policy (upstream.Client.GuardedDial), so a
// did:web or handle host on a private, loopback, link-local or metadata
// address is refused (not retried) unless it is the relay's or the
// configured PLC's own address. Config.Web sends every did:web and
// handle request to one base URL, naming the host in the Host header: the
// simulated network on loopback answers them there.
//
// Log lines: one Warn line per minute per kind of trip (verification
// failures by path and outcome, resolutions failed past their retries,
// waits for a slot or for the PLC rate, failed ident/ submissions), counting the occurrences
// it stands for.
//
// Mode is the operator's verification mode (--verify): strict drops and
// refuses what fails, warn archives it and counts, off resolves nothing.
package ident
