// Package oracle owns the simulated atproto network that backstream is tested
// against: one relay listener and one listener per PDS host on loopback —
// each host on the relay's port at a loopback address of its own (127.0.0.2
// onwards), since a client following a loopback relay may be redirected
// only to the relay's port — serving a deterministic world (package oracle/world) over real HTTP and
// websocket, with live traffic and programmable faults.
//
// What it serves:
//   - the relay: com.atproto.sync.listRepos (opaque cursor, limit ≤ 1000),
//     getRepo (302 to the account's PDS host), getRepoStatus, listHosts,
//     subscribeRepos (atproto event-stream framing), DID documents the way a
//     PLC directory serves them (GET /<did>; 404 for a tombstoned DID), the
//     directory's operation log the way plc.directory pages it (GET
//     /export: JSON Lines, count ≤ 1000, after a createdAt; the log is
//     brought up to date with the world before each page, so it folds to
//     what GET /<did> serves; one account in 16 has a legacy create
//     genesis, one in 16 a nullified fork, and RetiredDIDs, one per 100
//     accounts, were created and tombstoned), and GET /_devnet/status
//     (with the DID document and export requests answered);
//   - every PDS host: getRepo (the world's prepared CAR bytes, or the atproto
//     error names RepoNotFound / RepoDeactivated / RepoSuspended /
//     RepoTakendown) and listRepos for the accounts it hosts.
//
// Fleet faults: Config.RelayIndexMissing makes the relay's listRepos leave
// out a fixed fraction of the accounts (RelayIndexOmits; each PDS still
// lists them); Faults.SlowHost delays every answer of a host (SlowDownloads its getRepo
// answers only), DownHost makes
// it answer 503 for a while; a LimitHost window limit is announced in
// ratelimit-* headers on every served getRepo, not only on the 429; and
// PeakConcurrency is the most getRepo requests a host answered at once.
//
// Faults.GateBody holds one getRepo of an account mid-body until the test
// releases it: the CAR is the repo as it was when the request arrived, so
// a test can change the world while a download of the older state runs.
//
// listRepos (relay and PDS) lists every account except deleted ones (a
// deleted account has no repo left, as on a real PDS); inactive accounts are
// listed with active=false and their status. getRepo ignores `since` and
// always serves the whole current repo.
//
// Invariants it keeps:
//   - firehose seqs start at 1 and increase by one (unless the SeqGaps fault
//     is armed, or the relay's sequence is restarted (RestartSequence) or
//     rewound (Faults.RewindSequence, a relay restored from a backup: its
//     next events reuse the seqs of the last n, which leave the history));
//     every emitted event is encoded once and kept in the history (bounded
//     by Config.Retention);
//   - subscribeRepos cursor rules: cursor=N replays retained seq > N then goes
//     live; cursor=0 replays from the oldest retained event; no cursor starts at
//     the live tip; a cursor older than the retained history gets #info
//     OutdatedCursor and then everything retained; a cursor above the head gets
//     a FutureCursor error frame and the connection closes (after
//     RewindSequence, until Clear, it starts at the live tip instead);
//   - a subscriber is a position in the history, so it is registered for live
//     events at the instant its replay starts: no gap, no duplicate; a
//     subscriber that falls more than Config.SubscriberBuffer live events behind
//     gets a ConsumerTooSlow error frame and is closed;
//   - a world mutation and the append of its event happen under one lock
//     (Network.Emit and the traffic goroutine share it), so per-account event
//     order in the firehose is mutation order and getRepo serves the state
//     after the latest emitted event;
//   - listeners open only after the world is built and the preload is
//     generated; traffic starts after that; Close stops every goroutine and
//     listener and waits for them.
//
// Hostile listRepos pages (Faults.HostileListRepos, every page but the
// first): a 10 MiB cursor on the page's real repos, a 33 MiB body, a body
// that is not JSON, one with fields of the wrong type, one cut in half.
//
// Faults are explicit and counted: every injected fault increments a fired
// counter (Faults.Fired) so a test can prove its fault happened. Hostile
// CARs that re-sign a commit (InvalidRev, InvalidRecordPaths) use the
// account's own key (world.SigningKey), so they fail only for the intended
// reason. HostileCommits follows a #commit with a one-off invalid #commit
// (a rev that is not a TID, or an op under an invalid NSID / rkey) that the
// world builds but does not apply: it is in the history (Emitted.Invalid
// names the reason) and the account's next valid commit chains from the
// last valid state, so a strict fold skips it; an invalid-path commit is
// followed by a valid commit re-creating its valid op, so a lenient fold
// (drop only the invalid op) gives the same records.
//
// Identity faults (for a consumer that verifies against DID documents): a
// getRepo CAR re-signed by world.ForeignKey (ForgedSignature); a relay
// redirect to a PDS host that is not the account's, which serves the
// account's genuine repo (Misattribute); a host an account has migrated
// away from that still lists it, with a rev newer-looking than the
// account's, and serves its old copy while the DID document names its new
// host (Migrating; getRepo requests are counted per host, FetchedFrom); a
// host whose listRepos also names DIDs it does not hold, which no
// directory knows (FabricatedListing;
// document requests for them counted, DocRequestsFor) or other hosts'
// accounts, claimed inactive or at a newer rev (ClaimAccount); a host whose
// listRepos never ends, each page naming as many entries as asked with a
// cursor never seen before (EndlessListing, pages counted EndlessPages);
// a host left out of listHosts (HideHost: one that joins, or leaves, the
// network after a node read the roster); listHosts answered with an
// error status (FailListHosts); a host grown by deactivated
// accounts its listing names and listHosts counts (GrowHost); a host
// listHosts gives a status other than active, e.g. banned
// (SetHostStatus); listHosts without accountCount (OmitAccountCounts);
// DID documents answered 404
// (DIDNotFound), without a verification method (DIDNoKey), naming
// ForeignKey's public key (DIDWrongKey), or writing the PDS endpoint in
// another spelling of the same host (DIDSpelledPDS, not a fault of the
// network: its documents are written so); every document request delayed
// (SlowPLC) or answered 500 (FailPLC); export pages answered 500
// (FailExport) or carrying malformed lines (HostileExport); and, on the firehose, one-off
// #commits signed by ForeignKey or whose ops do not invert to their
// prevData (ForgedCommits; world.ForgedSignatureCommit,
// world.NonInvertingCommit), not applied to the world, and genuine
// #commits whose delete ops the relay leaves out, stripping their prevData
// and prevs so they look legacy (HideDeletes; the world applied them), or
// genuine #commits sent as a PDS predating sync 1.1 sends them, without
// prevData and prevs (LegacyCommits). world.RotateKey
// gives an account a new key, announced by an #identity event. The relay
// also answers what a resolver asks a did:web or handle host, by the
// request's Host (ident.Config.Web): /.well-known/did.json for the
// did:web accounts (Config.WebDIDs) and /.well-known/atproto-did for every
// current handle; BadHandles follows an #identity with a one-off one naming
// a handle that fails the bidirectional check (EmitBadHandle: another
// account's handle that the document claims, or an alias resolving to the
// account that its document does not declare). The hostile profile arms
// all of them.
//
// It must not be imported by production packages (only cmd/backstream wires
// it, for `devnet`); it holds no global state. World data and mutations live
// in oracle/world; this package only serves them and never edits a repo
// itself, except for hostile copies of a CAR built for a fault (the one-off
// hostile #commit bodies are built by oracle/world).
package oracle
