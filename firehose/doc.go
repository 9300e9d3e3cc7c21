// Package firehose owns the subscribeRepos consumer: it reads the relay's
// firehose, turns each frame into one archive.Unit (its rows plus
// cursor/relay), and submits it to a writer: the capture writer during
// bootstrap (ModeCapture, rows into cap/), the archive writer in steady state
// (ModeLive, rows into ev/ plus the repo side effects of #account and #sync).
//
// # What it provides
//
//   - New(Config) / Run(ctx): dial, read, reconnect with capped, jittered
//     exponential backoff (250 ms → 30 s by default, internal/backoff's
//     rule), until ctx ends or the writer fails.
//   - Handle(ctx, msg): the synchronous step for one websocket message, so
//     tests drive the consumer frame by frame.
//   - Rows(frame, seq, metrics): a frame's archive rows after validation.
//   - Effects(event, nowUS): the conditional repo mutation of an #account or
//     #sync row. The merge walker applies exactly this to captured rows (M8).
//     A #sync row reaches cap/ (the merge walk needs it) but never ev/: the
//     archive writer takes its rev into the ratchet and archives no row, so
//     the replacement it schedules is the one sync row of the reset.
//   - Verification (verify.go, Config.Identity, package ident): every
//     #commit and #sync is checked before its rows are built — the commit in
//     its blocks names the frame's DID and rev, a #commit's ops match its
//     MST and invert to its prevData (sync 1.1; skipped for legacy ops
//     without prev or a null prevData), and the signature verifies with the
//     account's key, re-resolved once on a mismatch. A #commit that passes
//     without being inverted is archived, counted (anomaly uninverted) and
//     its complete account scheduled for a replacement (RefetchUninverted,
//     at most one per Config.UninvertedInterval after its last snapshot):
//     a relay can leave a delete op out and strip prevData. Strict: a failing
//     frame keeps only its cursor, is counted
//     (backstream_verify_total{path="live"}), and live marks its known,
//     active account due for a replacement (RefetchUnverified); capture
//     submits that mark to the archive writer (Config.MarkWriter), since the
//     account's snapshot may predate the dropped commit. Warn counts and
//     archives. #identity frames invalidate the cached document, and the
//     handle one names is verified both ways (ident.Resolver.CheckIdentity):
//     strict archives the verdict, the handle or handle.invalid (what
//     /subscribe's identity events then carry); warn archives the handle as
//     sent and counts. The rev order of sync 1.1 is the writer's ratchet.
//   - Parallel verification (pipeline.go): with verification on, Run
//     checks frames on 64 lanes, an account always on the same one so its
//     frames are checked in order; at most Config.Verifiers checks compute
//     at once (default ident.Config.Verifiers, GOMAXPROCS), and a check
//     waiting for the network (an #identity's handle, a DID resolution)
//     holds up only its lane, not a verifier. One sequencer takes the
//     frames back in read order and does the rest of Handle. The window of
//     frames read and not yet submitted is bounded (1024 frames, 32 MiB); a
//     read that waits for it is counted in
//     backstream_firehose_verify_waits_total. A frame whose account has no
//     document in memory (never seen, or invalidated) has it resolved as
//     soon as it is read, by 64 look-ahead goroutines, so the resolutions
//     of a window run together. A commit block in cbor-gen's canonical form
//     has the bytes its signature covers cut from it (verify_commit.go)
//     instead of decoded and encoded again.
//   - LastAccepted, LastDurable, Started, OutdatedCursor, Behind,
//     AcceptedSince; NewMetrics.
//
// # Invariants kept here
//
//   - C1: every unit carries cursor/relay = its frame's seq in Puts, so the
//     cursor is durable in the same batch as the rows it covers. A frame
//     whose every row is dropped still submits a unit with just the cursor:
//     every processed frame advances the cursor (S1).
//   - S1: the start cursor comes from the caller (nil: live tip). A reconnect
//     resumes from the last seq accepted in memory (submitted; the writer
//     applies units in order, so it is durable unless the process dies, and
//     then the restart resumes from the durable cursor/relay). A frame at
//     or below the last accepted seq is dropped and counted (duplicate)
//     when it is the frame accepted under its seq, or lies below the
//     window of the frames accepted under the last GapThreshold seqs
//     (checkSeq); within the window, one under a seq never accepted is
//     late (archived, cursor/relay unmoved, a gap recorded), and another
//     event under an accepted seq is a regression (below); below it, live,
//     a #commit or #sync whose rev is newer than the account's archived
//     one (Config.Store) is a regression too when it brings rows, so the
//     frames after it of any type are the new sequence's (one that brings
//     none, maybe a replay of a frame that failed before, is late). An
//     invalid DID or rev (the grammars of syntax.ParseDID / ParseTID, checked
//     by upstream.ValidDID / ValidTID) drops the whole event; an invalid
//     collection, rkey, action, a missing record block, or one that is not
//     a well-formed DAG-CBOR map (backfill.WellFormedRecord, the check a
//     downloaded repo's records pass) drops that op only; a row over the
//     archive's field limits drops that row. Drops are counted
//     in backstream_firehose_dropped_total{reason}, never logged per event.
//     Two outsider strings are bounded instead of refused, so the event
//     still reaches the archive and every subscriber: an #account's status
//     is cut to upstream.MaxAccountStatus, and an #identity's handle longer
//     than archive.MaxHandle (no handle is) becomes handle.invalid, counted
//     in backstream_firehose_invalid_handles_total.
//   - Frames without a seq advance nothing: #info (OutdatedCursor raises
//     backstream_firehose_outdated_cursor), error frames, undecodable and
//     unknown frames are counted in backstream_firehose_anomalies_total{kind}
//     and skipped; a seq gap is counted and the frame processed.
//   - Gaps (gap.go): OutdatedCursor, FutureCursor, frames of a connection
//     that stay below the last accepted seq (its dialed cursor, or a frame
//     it brought) past GapThreshold in a row (a relay that restarted its
//     sequence unannounced), a frame under an accepted seq that is not the
//     one accepted there (a relay gone back in its sequence, followed at
//     once), a late frame (its own unit records the gap, cursor unmoved)
//     and a seq skip above GapThreshold are holes,
//     each written to a gap/<id> row by the unit of the first frame
//     accepted after it, the unit that moves cursor/relay past it (a
//     FutureCursor gap is also recorded at once, cursor unmoved). A hole
//     found while the newest gap the consumers recorded has no repair pass
//     begun (in this process, or open with no audit/ position when it
//     started: archive.NewGapIDs) extends that gap instead of adding a
//     row (archive.GapIDs.Record: same id, kind and FromSeq; the new
//     hole's ToSeq and found time). A
//     relay that restarted its sequence is followed from its live tip, and
//     that unit resets cursor/relay (SeqCursor.Reset) at once: the writer
//     keeps the cursor in the old sequence until every earlier unit is
//     applied (some may wait behind a replacement), and the stream never
//     waits for that. Each hole counts in
//     backstream_firehose_gaps_total{kind} (the kind of the row it is
//     recorded in) and is logged at ERROR, at most once a minute per kind.
//   - Behind: the upstream time of the last accepted event (or a pong on an
//     idle connection, or Run's start; a late frame stamped later brings
//     it forward, an older one leaves it) against now: /readyz's staleness
//     and the repair pass's wait for the stream.
//   - A commit carries its since on its first row (archive.Event.Since):
//     live, the writer marks the account for a replacement when it is
//     newer than the archived rev; captured, cap/ keeps it and merging
//     checks it the same way, per commit, against the account's snapshot
//     too. Capture also checks the chain itself (chain.go), to mark at
//     once: a commit whose since is newer than the account's last captured
//     commit marks the account through Config.MarkWriter (anomaly
//     chain_break). Each account's last captured rev is held for the
//     capture, DefaultChainAccounts at most.
//   - M1: Started is closed once a starting cursor is durable (the first
//     frame's unit, or at once when Config.Cursor was given).
//   - M2: upstream trouble never ends Run; a writer failure (its fatal error
//     or archive.ErrClosed) or a refused unit (ErrUnitRefused) ends it with
//     that error. No degraded mode.
//   - Every goroutine is owned: Run returns only after the receipt drainer
//     and the per-connection watcher have stopped.
//
// # Tricky bits
//
// "Accepted" and "durable" are different cursors. Accepted moves when Submit
// returns; durable moves when the writer's receipt arrives (Acks mailbox,
// drained by a goroutine of Run and by LastDurable), to the cursor/relay the
// receipt reports: while a replacement holds an account, a later frame's
// unit may be durable before an earlier one of that account, and the
// durable cursor stays below the one still waiting. Resuming a reconnect
// from the durable cursor would re-read frames already queued in the writer;
// they would be dropped as duplicates, but only because of the seq rule, and
// the relay would send them again for nothing. Resuming from accepted is
// exact. A process restart has only the durable cursor, and that is also
// exact: what was accepted but not durable was lost with the process.
//
// A refused unit (which validation should make impossible) is fatal, and
// LastDurable never moves past it; but units already queued behind it still
// commit, so cursor/relay in the store may pass it. The consumer stops loudly
// rather than continue over the hole.
//
// # Not here
//
// Deciding phases, waiting on Started, stopping capture at merging, and
// choosing the start cursor are lifecycle's. Applying side effects to
// captured rows is merge's (with Effects). Fetching repos marked for
// replacement is retry's. Dialing and frame decoding are upstream's; seq
// allocation, the rev ratchet and repo mutations are the archive writer's.
package firehose
