// Package subscribe owns backstream's client edge: the Jetstream-compatible
// JSON wire format, and (issue 6) the /subscribe websocket that serves it
// from the archive and the live tail. JSON exists only here: the store keeps
// events in their binary encoding and records as DAG-CBOR (DESIGN §2); they
// are rendered at the edge, once per event.
//
// # Wire shapes (render.go)
//
// Renderer.AppendJSON / AppendJSON turn one archive.Event into one JSON
// object, byte-identical to what Jetstream's models (pkg/models) give through
// encoding/json: same key names, key order and omitempty rules.
//
//	create/update {"did":D,"time_us":T,"kind":"commit","commit":{"rev":R,"operation":"create"|"update","collection":C,"rkey":K,"record":{…},"cid":"bafy…"}}
//	delete        {"did":D,"time_us":T,"kind":"commit","commit":{"rev":R,"operation":"delete","collection":C,"rkey":K}}
//	identity      {"did":D,"time_us":T,"kind":"identity","identity":{"did":D,"handle":H,"seq":S,"time":W}}   (handle omitted when empty)
//	account       {"did":D,"time_us":T,"kind":"account","account":{"active":A,"did":D,"seq":S,"status":X,"time":W}} (status omitted when empty)
//	sync          {"did":D,"time_us":T,"kind":"sync","sync":{"did":D,"rev":R,"seq":S,"time":W}}
//
// T is Event.TimeUS. S is Event.UpstreamSeq (the relay seq; 0 for snapshot
// rows). W is TimeUS as RFC 3339 UTC with microseconds
// ("2024-11-05T10:11:12.345678Z"); Jetstream passes the upstream frame's
// time through instead, which the archive does not keep. Account fields
// follow comatproto.SyncSubscribeRepos_Account, so status comes before time.
//
// Extensions, which Jetstream clients ignore as unknown fields:
//   - kind "sync" (backstream's): "drop everything you hold for this account;
//     its full state follows". Folding consumers must honour it; Jetstream
//     never sends it. Its body follows comatproto.SyncSubscribeRepos_Sync
//     without blocks.
//   - "cursor":<archive seq>, right after time_us, when Renderer.Cursor is
//     set: where a client resumes (issue 6 sends it on every event).
//
// # Record JSON (cborjson.go)
//
// The record is DAG-CBOR → atproto JSON. The definition of correct output is
// indigo's generic path, AppendRecordJSONReference: atdata.UnmarshalCBOR,
// then encoding/json with HTML escaping OFF, trailing newline trimmed. HTML
// escaping is off because it is what indigo's own tooling writes for
// records, keeps text like "a & b" as written, and is smaller; Jetstream
// (goccy/go-json defaults) escapes <, > and & as \u003c… — both are the same
// JSON value to any parser. AppendRecordJSON is a streaming transcoder that
// appends to a byte slice without building maps (~0.3–0.6 µs and no
// allocation per typical record with a warm Renderer, against ~6–13 µs and
// 50–100 allocations for the reference) and gives the same bytes, and an
// error exactly when the reference errors. What that means, rule by rule (all
// mirrored on purpose, all covered by the differential tests):
//   - Object keys in encoding/json order (bytewise), not DAG-CBOR's
//     length-first order. Repeated keys are an error.
//   - Strings escaped as encoding/json does: \" \\ \b \f \n \r \t, \u00XX for
//     other control bytes, U+2028/U+2029 escaped, each byte of invalid UTF-8
//     replaced by \ufffd; <, > and & kept.
//   - Blobs ({"$type":"blob", ref, mimeType, size}, exactly four fields) come
//     out as {"$type":"blob","ref":{"$link":…},"mimeType":…,"size":N} in that
//     order, with mimeType HTML-escaped (atdata renders blobs with
//     json.Marshal). A blob with a negative size is re-emitted in the legacy
//     shape {"cid":…,"mimeType":…}, as atdata does.
//   - CID links (tag 42) → {"$link":"<base32 CIDv1 / base58 CIDv0>"}; bytes →
//     {"$bytes":"<base64 std, no padding>"}.
//   - Integers: a CBOR uint above 2^63-1 wraps to a negative int64 and the
//     negative-int argument 2^64-1 comes out as 0 (refmt's behaviour);
//     integers are not limited to ±2^53. Floats are accepted only when
//     integral (1.0 → 1), else an error. Simple values other than
//     true/false/null/undefined (undefined → null) are errors.
//   - A top-level null or undefined renders as {}; bytes after the first
//     data item are ignored; records over 1 MiB are refused.
//   - $type must be a non-empty string. Tags other than 42 are errors.
//
// Rare shapes are left to the reference path on purpose (errFallback): JSON
// style {"$link":"…"} / {"$bytes":"…"} objects inside CBOR, legacy blobs
// {"cid","mimeType"}, indefinite-length items, tags on map keys or on the
// top-level item.
//
// The one deliberate difference: a record nesting maps/arrays deeper than
// MaxRecordDepth (128; atproto suggests 32) is refused with ErrTooDeep. The
// reference recurses without a limit; a 1 MiB record of nested arrays
// overflows the goroutine stack and kills the process (measured), so a
// fallback is only taken after an iterative depth check (checkDepth).
//
// # Invariants
//
//   - Rendering is a pure function of the event: same event, same bytes, on
//     every call and for every subscriber (the live ring renders once).
//   - Bad archived data (undecodable record, bad CID bytes, unknown kind) is
//     an error wrapping ErrBadRecord / ErrBadCID / ErrUnknownKind, never a
//     panic; on error dst comes back unchanged.
//   - A Renderer is not safe for concurrent use; AppendJSON uses a sync.Pool
//     of Renderers (a cache, no state).
//
// # Must not
//
// Import indigo's events, repomgr, carstore, xrpc or api/bsky; change
// archive.Event; render JSON anywhere but here.
//
// # Tricky bits
//
// The transcoder writes each map's `"key":value` entries in CBOR order,
// remembering where each landed, then sorts the entries by key (a big-endian
// 8-byte key prefix decides most comparisons) and rewrites that stretch of
// the output in order through a scratch buffer; a map already in order is
// left alone. Whether a map is a blob is only known once "$type" has been
// read, so blob fields are noted as they pass and the map is rewritten in
// the blob shape at its end. Text strings are slices of the record, so the
// escaper tests eight bytes at a time and may read up to seven bytes past a
// string's end (never past the record) to test a short tail in one word.
package subscribe
