// Package subscribe owns backstream's client edge: the Jetstream-compatible
// JSON wire format, and the /subscribe websocket that serves it from the
// archive and the live tail, with /status, /healthz, /readyz and
// /zstd-dictionary. JSON exists only here: the store keeps events in their
// binary encoding and records as DAG-CBOR; they are rendered at
// the edge, once per live event.
//
// # The server (server.go, subscriber.go, params.go, conn.go, frames.go)
//
// New(Config) builds a Server over the store and the archive Writer (or
// Attach gives them later); Handler serves the routes; Close ends every
// subscriber with close code 1001 and waits. Before Ready() (steady_state)
// /subscribe answers 503 with the status JSON, an "error" and Retry-After.
// With Config.PublicStatus Handler is the public listener's: its /status
// and that 503 show the report as PublicStatus makes it, and /healthz
// withholds the fatal error's text; StatusHandler(nil) and
// HealthHandler(false) serve them whole for the operator's listener.
//
// StatusCache (status_cache.go) builds the /status report at most once per
// DefaultStatusTTL (a second) and phase, one build shared by the requests
// that arrive during it, and never caches while the process has a fatal
// error; serve's report goes through it. /healthz and /readyz are never
// cached.
//
// A browser (Accept: text/html) gets the status page instead of the JSON
// (status_html.go): status_page.html, embedded, with the report inlined so
// it renders at once and offline, then polling /status?format=json every
// 5 s. It draws bars and charts only from fields of the report, formats
// every value by its key (durations, bytes, times, rates, percentages) and
// shows a section it does not know as a labelled table. StatusHistory
// (status_history.go) is the ring of rates the charts draw, kept by the
// server so a page opened now shows the last minutes.
//
// GET /subscribe parameters, validated before the upgrade (D5; an invalid
// value is a 400 {"error":"InvalidParameter","param":P,"message":"P: …"}):
//
//	wantedCollections  repeatable; an NSID or "prefix.*" at a segment boundary; ≤ 100 distinct
//	wantedDids         repeatable; DIDs; ≤ 10,000 distinct
//	cursor             archive seq, inclusive (0 = the start); ≥ 10^15 = unix µs (first event at or after);
//	                   beyond the tip, or absent = live from the tip at connect time
//	maxMessageSizeBytes (alias maxSize) events whose payload (compressed if compressing) is
//	                   larger are skipped; 0 = no limit, and so is a negative, malformed or
//	                   overflowing value (Jetstream's reading: never a refusal)
//	compress           exactly "true" turns it on, anything else leaves it off (Jetstream's
//	                   reading); the Socket-Encoding header containing "zstd" also turns it on
//	zstdDictionary     the current dictionary's id (implies compression); anything else is a 400
//	                   naming the current id
//	requireHello       exactly "true" holds the stream until the first options_update
//	includeSync        exactly "true" also sends "sync" events (backstream's; Jetstream v1
//	                   never sends that kind and strict v1 clients refuse it), off by default
//
// Empty values are ignored; for scalars the first value counts; unknown
// parameters are ignored and counted. docs/jetstream-compat.md compares
// every parameter with Jetstream v1's. The query is split here, not by
// net/url, whose parser silently drops everything above 10,000 parameters.
// Text messages {"type":"options_update","payload":{"wantedCollections":[…],
// "wantedDids":[…],"maxMessageSizeBytes":N,"includeSync":B}} replace the filter; other types
// are ignored, as Jetstream does; a malformed one (bad JSON, a bad value, a
// size that is not a JSON integer) closes with 1008 and the reason, and so
// does one whose filter does not fit in the buffer budget; a negative size
// is 0 (no limit).
//
// permessage-deflate (RFC 7692) is accepted when a client offers it, as
// Jetstream does; gorilla negotiates it, always with no context takeover
// either way, and inflates client messages; the subscriber deflates its own
// event frames (deflate.go, klauspost's stateless encoder: no window kept
// between messages). Each message stands alone, so a live event is deflated
// once, in its live-log slot, and shared by every deflate subscriber; a
// replayed one is deflated by its subscriber. A zstd subscriber's frames are
// never deflated again. maxMessageSizeBytes compares the JSON's size for a
// deflate subscriber (the size the client's message has once inflated).
//
// Every JSON event carries "cursor":<seq>. With compression each event is
// one binary message holding one zstd frame (no checksum); without a
// dictionary id the frame has no dictionary, so any decoder reads it,
// including a Jetstream client's decoder preloaded with Jetstream's own
// dictionary. GET /zstd-dictionary serves backstream's dictionary (header
// X-Zstd-Dictionary-Id); it is trained from the archive's first
// DictSamples events the first time it is asked for and stored
// (meta/zstd_dictionary, through the writer) before it is served, so it and
// its id outlive restarts and compaction passes; before the archive holds
// that many events there is none (404).
//
// # Invariants kept here
//
//   - D1: nothing past the writer's durable tip is sent. Pebble makes a
//     batch visible to iterators before its WAL sync completes, so ev/ may
//     briefly show rows a crash would take back; replay therefore never
//     reads at or past the live log's floor, which is at most the durable
//     tip + 1 (the live log publishes only after the sync).
//   - D2: a subscriber is one cursor, next. Below the live log's floor it
//     reads ev/ (Store.Events) and stops at the floor it saw; at or above
//     the floor it reads the live log, whose entries must have exactly seq
//     next (anything else closes the connection with 1011 rather than skip
//     or repeat). An exhausted iterator is closed and the floor re-read, not
//     taken as caught up; iterators are reopened every 10 s so none pins old
//     sstables, and closed before any socket write that would wait (the
//     socket is first offered what it takes at once), so a client that does
//     not read pins none. At most ReplayReaders subscribers replay at once
//     — from the archive, or from live-log entries older than a second
//     (catching up) — each one batch (≤ 512 events or a full buffer) per
//     turn, in arrival order, writing within its turn only what the socket
//     takes at once; while another subscriber waits for a turn, a slot is
//     busy at most ReplayDuty of the time (half: it rests, in quanta of
//     5 ms, for as long as it was held), so replay takes at most that share
//     of a CPU per slot whatever the number of replaying clients (a replay
//     that waits for no one never rests). Subscribers following the tip never wait for a
//     turn.
//     Within a connection cursors strictly increase.
//   - D4: account, identity and sync events pass every collection filter;
//     every kind is gated by wantedDids; sync events only with includeSync.
//   - Replay plans (plan.go): when a subscriber first replays from the
//     archive, and after each options_update, it plans: with wantedDids
//     and/or wantedCollections whose estimated rows (an exact count of the
//     replay index's ranges, bounded at 1/planRatio of the span) are under
//     1/planRatio (16) of the seqs to the live floor, it reads the index —
//     the accounts' ranges, or the collections' (a prefix: every
//     collection the index lists under it, listed again at each iterator
//     opened, at most planMaxPrefixRanges of them and planMaxPrefixBytes
//     of names, else it scans: those names are anyone's on the network)
//     with the account and identity markers and, with includeSync, the
//     sync markers, whichever is smaller — merged by seq, each row
//     point-read (or read from its entry's covering copy), bounded by the
//     floor; otherwise it scans ev/. Every row
//     read goes through the same filter either way, so both plans send the
//     same events (TestIndexedReplayMatchesScan, FuzzIndexedReplay); the
//     cursor, the floor, strict increase, the reopen on a compaction batch
//     and the reader slots are the scan's. The planner scans while the
//     store's replay index backfill is unfinished or its marker
//     (meta/index_replay) is malformed, and always with
//     Config.ScanReplays.
//   - D5: as above; nothing is upgraded before the request is valid.
//   - D6: the archive is the buffer: a subscriber that falls behind the live
//     log reads the archive. Only one more than SlowLag events behind the
//     tip whose cursor advanced slower than SlowRate events/s over a whole
//     SlowWindow is closed (1008, reason too_slow, counted). The writer
//     never waits for a subscriber; subscribers never wait for each other.
//     Whatever its lag, a subscriber whose socket write has not completed
//     for StallTimeout (60 s) is closed (1008, stalled): it does not read.
//     Pongs are not awaited, so a busy client is never dropped for a late
//     pong queued behind data; TCP keepalive finds dead peers, and a write
//     that blocks wakes every WriteTick to re-apply both rules.
//
// # Limits (limits.go)
//
// Admission, before the upgrade: at most MaxSubscribers (503) and
// MaxSubscribersPerIP per client IP (429; the remote address, or the last
// X-Forwarded-For address only with TrustForwardedFor); each subscriber
// reserves FlushBytes + 64 KiB of output buffers from BufferBudget and
// keeps within it (frames over 16 KiB are written from where they lie),
// and what its filter holds (filter.held, an upper bound of its strings,
// map entries and replay plan ranges), beyond which new subscribers get
// 503. An options_update reserves its new filter and gives back the old
// one's; one that does not fit closes its connection (1008,
// buffer_budget), other connected subscribers are never closed for it.
// Refusals carry a JSON error and Retry-After, are counted by
// reason and logged once a minute per reason. requireHello waits at most
// HelloTimeout (hello_timeout). Client messages and pings are rationed
// per connection (MessageRate, MessageBurst; beyond: 1008,
// too_many_messages). Client-influenced details in logs are clipped to
// 256 bytes.
//   - Render once: a live event's JSON and zstd frames live in its live-log
//     memo slot (archive.LiveEntry), made by the first subscriber that
//     needs them and shared by all. Replayed events are rendered by the
//     subscriber reading them.
//
// # Output path
//
// Each subscriber is one goroutine that appends whole websocket frames to
// its buffer and writes it in one call when it reaches FlushBytes or the
// subscriber has caught up (one syscall per ~100 replayed events, one per
// live batch). gorilla/websocket does the handshake and all reading; the
// few frames it writes itself (handshake response, pongs, close echoes)
// are queued whole by sockConn and sent with the next flush, so only the
// subscriber goroutine writes to the socket. Whether deflate was negotiated is read
// from the handshake response gorilla queued there.
//
// # Metrics
//
// backstream_subscribers, backstream_subscribe_events_sent_total{path=replay|live}
// (replay: the event was more than a second old when the subscriber read it,
// whether the archive or the live log served it; live: it was following the
// tip),
// backstream_subscribe_replay_plans_total{plan=index|scan},
// backstream_subscribe_replay_rows_read_total{plan} and
// backstream_subscribe_replay_rows_sent_total{plan} (rows read per row sent),
// backstream_subscribe_bytes_sent_total, backstream_subscribe_disconnects_total{reason},
// backstream_subscribe_unknown_params_total, backstream_subscribe_refused_total{reason},
// backstream_subscribe_render_errors_total{reason}, backstream_subscribe_skipped_too_large_total,
// backstream_subscribe_buffer_reserved_bytes,
// backstream_live_delivery_seconds (the path="live" events only: archive
// TimeUS, stamped before the synced commit, to the socket write). Stats'
// Replaying counts subscribers below the live floor, reading the archive,
// or catching up through the live log, so a cursor-0 replay of an archive
// that fits in the live log is one. An event that cannot be rendered is
// skipped and counted in render_errors each time it is rendered (once for
// the live log, again by each replay from the archive), and logged once a
// minute per reason, not per event: reason upstream_record for a record its
// PDS wrote outside the atproto data model (a non-integral float; the
// archive keeps only well-formed DAG-CBOR, so one that then does not render
// is the PDS's data; WARN), internal for anything else (bad archived data
// or our bug; ERROR, and the alert BackstreamRenderErrors).
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
//   - kind "sync" (backstream's, only with includeSync=true): "this
//     account's repo was reset", one per whole-repo replacement (an
//     upstream #sync is not archived by itself: the replacement it schedules
//     is its sync event, R the snapshot's rev, S 0). It is a marker: the archive stores a
//     replacement as the rows that change the account's records (a delete
//     for each record the new snapshot lacks, an update for each changed
//     CID, a create for each new record, nothing for unchanged ones), so a
//     consumer folds it by ignoring it, with or without includeSync;
//     Jetstream never sends it. Its body follows
//     comatproto.SyncSubscribeRepos_Sync without blocks.
//   - "cursor":<archive seq>, right after time_us, when Renderer.Cursor is
//     set: where a client resumes (sent on every event).
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
// archive.Event; render JSON anywhere but here; write to the store.
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
