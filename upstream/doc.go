// Package upstream owns every conversation with the relay and the PDS hosts
// it redirects to: listRepos paging, getRepo streaming to scratch files,
// redirect policy, error classification, and dialing and framing
// subscribeRepos.
//
// # What it provides
//
//   - Client (New, Options): ListRepos and GetRepo over one guarded HTTP
//     transport; for a fleet bootstrap, ListHosts (the relay's roster,
//     hostnames validated as bare host[:port]) and HostListRepos /
//     HostGetRepo, which ask a PDS host directly (hosts.go). Every error is an *Error; Classify maps any error onto one
//     Class (not found, unavailable, rate limited, transient, permanent,
//     canceled, local) and RetryAfter gives the server-directed wait.
//   - Listing bounds the callers (bootstrap, discovery, repair) share:
//     CutReasons is the closed set of reasons a listing is cut for
//     (CutReason maps an error onto one), CursorSet remembers cursors as
//     16 bytes each, and HostListingBound is how many entries one listing
//     of a PDS host may name — twice the accountCount listHosts gave it
//     plus HostListingSlack (10,000), so 10,000 when the relay gave no
//     count — before it is cut (CutTooManyEntries).
//   - SubscribeURL, DialFirehose: the websocket to subscribeRepos with a read
//     limit. Reading frames, cursors and reconnects live in package firehose.
//   - DecodeFrame / EncodeFrame: the two-object DAG-CBOR framing, decoded by
//     hand (no indigo events package, hence no gorm). CommitOps extracts a
//     #commit's record operations from its hash-checked blocks.
//
// # Invariants kept here
//
//   - E4: getRepo goes to the relay and follows its redirects (HostGetRepo:
//     to the named host, with the relay's scheme, through the same guarded
//     dialer); the final host is reported in Download.FinalHost.
//   - Pacing (hosts.go): a host whose answers announce ratelimit-remaining
//     and ratelimit-reset, or whose 429 names a wait (Retry-After, else
//     ratelimit-reset: its budget spent until then), is paced by
//     HostListRepos and HostGetRepo — a listRepos that would overspend the
//     budget (remaining less the requests already in flight) waits for the
//     reset instead of meeting a 429 (counted as limit ratelimit_pace,
//     logged at most once a minute); a getRepo fails at once, rate limited
//     with the wait, the host not asked. HostPaceWait says how long.
//   - E5: the body is streamed to a file in the scratch dir (or, up to
//     MemoryBodyBytes, kept in memory), capped at Options.MaxCARBytes
//     (ErrTooLarge); on every error the file is removed before GetRepo
//     returns. On success the caller owns it (Download.Remove).
//   - Download limits (limits.go): every spill draws on one scratch budget
//     shared by all downloads and held until Download.Remove (a body larger
//     than the whole budget is ErrTooLarge; one refused because others hold
//     the budget is ErrLocal); the scratch volume's free-space floor is
//     checked before a spill and every MiB of it, with room for the next
//     MiB (ErrLocal); a failed
//     scratch write (ENOSPC) is ErrLocal too — ClassLocal, never permanent,
//     never the upstream's fault. A body under MinBodyBytes per BodyWindow is
//     cut (ErrSlowBody, transient), a getRepo's and every small JSON read's, an error
//     answer's body too; a redirect target already serving
//     HostWorkers downloads is refused before it is requested (ErrHostBusy,
//     transient: the worker moves on). Each trip is counted and logged at
//     most once a minute per limit.
//   - Hosts that do not answer (breaker.go, H14): a host that answered
//     none of its last 3 tries (connect timeout, refused or reset
//     connection, no address) is down for a cool-off of 30 s doubling to
//     10 min; its requests (a redirect to it, HostGetRepo, HostListRepos,
//     GetRepoStatus) fail at once without a dial (ErrHostDown, transient;
//     HostDownUntil gives the cool-off's end), one probe at each end (another
//     one connect timeout on while its outcome is late; a round's probes
//     reopen it once). Any answer resets it; the relay is never broken.
//   - E14: at most MaxRedirects redirects, only to http(s); every address a
//     non-relay host resolves to is checked at dial time (private, ULA,
//     link-local, metadata, multicast, unspecified, reserved ranges refused;
//     loopback allowed only when the relay itself is on loopback, and then
//     only on the relay's own port or a declared Options.LoopbackHosts
//     port, so a relay cannot send getRepo to another local server, such
//     as backstream's own /debug/pprof), and redirect URLs are checked
//     before any dial. Client.GuardedDial hands the same dial-time check to
//     package ident for DID documents and handles (did:web and handle
//     hosts are anyone's), with the operator's PLC directory exempt too.
//   - Timeouts: connect (resolve+dial+TLS), response header, and idle body
//     (no byte for IdleBodyTimeout → ErrIdleTimeout, transient). The caller's
//     ctx deadline covers the whole attempt and, when it ends, the error is
//     ClassCanceled (errors.Is(err, context.DeadlineExceeded) tells a
//     deadline from a cancel).
//   - Hostile upstream data never panics: DecodeFrame and CommitOps are
//     fuzzed and guarded.
//   - A #commit's blocks are read by internal/car (strict CAR v1, every
//     block hash-checked against its CID, the single root equal to the
//     commit). A #commit frame in the canonical form producers send takes a
//     fast decoder (frame_commit.go); anything else takes cbor-gen, and a
//     fuzz target holds the two to the same answers (the fast decoder reads
//     heads with internal/cborhead and links with car.ReadLink). ValidDID,
//     ValidTID, ValidNSID and ValidRecordKey (frame_syntax.go; the last two
//     also serve backfill's per-record checks) accept exactly what
//     atproto/syntax accepts, without its regular expressions (fuzzed
//     against it).
//
// # What it must not do
//
// It never writes to the store and holds no per-repo state. Retry budgets,
// backoff and 429 parking (E9, E10) belong to the callers (backfill, retry),
// which decide from Classify and RetryAfter. CAR verification belongs to
// backfill.
//
// # Tricky bits
//
// The relay's own host:port is exempt from the address policy (it is the
// operator's configuration, and may be on a private network); every other
// host is reachable only through a redirect and is checked. The idle-body
// watch cancels a per-request context with the cause ErrIdleTimeout, so an
// idle timeout and the caller's cancellation are told apart by checking the
// caller's ctx first; the throughput watch does the same with ErrSlowBody.
package upstream
