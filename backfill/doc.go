// Package backfill owns one repository, start to finish: fetch it through
// the relay (package upstream), verify the CAR completely (verify*.go,
// record*.go), emit its records as archive rows through the writer, and make
// its terminal state durable (job*.go). It does not enumerate or schedule
// repositories (package bootstrap, later retry) and never writes the store
// except through units submitted to archive.Writer.
//
// # What it provides
//
//   - Verify / VerifyBytes / VerifyFile → *Snapshot: every block re-hashed (the CAR is
//     read by internal/car, MST links by car.ReadLink, heads by
//     internal/cborhead), the commit decoded and checked, its DID equal to the requested one, the whole MST
//     walked with no node or record block missing, every record validated
//     (drops by DropReason). A snapshot in memory keeps a table of the
//     entries its walk found (verify_entries.go), so Records reads them
//     without walking the tree again.
//   - Identity checks (job_ident.go, Options.Identity, package ident): the
//     account's DID document is resolved before the download (failure class
//     identity; a 404 from the directory is class unknown_did, E15), the
//     host that served the repo must be the document's PDS or a trusted
//     host, the relay (class authority) — and so must a host that answered
//     the account is not found or inactive, before that answer counts
//     (V2: a roster host listing another's account) — and the commit
//     signature must verify with the document's key, re-resolved once on a
//     mismatch (class signature) — all before any row is emitted. Warn mode
//     counts and archives; off skips it all.
//   - Runner.Run(ctx, Request) → Result: one job. It returns once the
//     terminal state is durable, or with ErrCanceled / ErrStale / a writer
//     error when no terminal state was written by this call.
//   - Memory: the byte budget of concurrent CAR preparation.
//   - Metrics: backstream_backfill_* and backstream_getrepo_*.
//
// # Invariants kept here
//
//   - E5: the body streams to a scratch file (upstream); the job removes it
//     on every outcome; concurrent CARs in memory are bounded by Memory,
//     held from verification until the job's last unit is durable. A job is
//     charged its CAR plus its block index and entry table (memoryCost:
//     sections counted from the framing first), so the budget is a true
//     bound. A CAR whose
//     charge exceeds the whole budget takes the whole budget and runs
//     alone (the semaphore is FIFO, so it is never starved) and is verified
//     from its scratch file (VerifyFile: a 16-byte-per-block index, blocks
//     read on demand, everything counted against the budget), never read
//     whole into memory; if even its index does not fit, it fails too_large
//     (ErrOverBudget). A body upstream kept in memory (at most
//     MemoryBodyBytes) is verified in memory.
//   - E6, E7: nothing is submitted before Verify has passed for the whole CAR.
//   - E8: one deadline per attempt covers download and verification; the
//     wait for memory pauses it and store writes are outside it. An expired
//     deadline fails the repo for this run (class timeout), without retry.
//   - E9: transient failures (5xx, resets, idle or slow body, a PDS host
//     at its download cap, our own scratch space refusing the spill (class
//     local), incomplete or invalid CAR) get Retries (3) more attempts,
//     waiting exponentially from 1 s, capped at 30 s, jittered by the
//     project's one backoff rule (package internal/backoff: ±25 %, never
//     above the cap).
//   - E10: 429 has its own budget (20), waits RetryAfter bounded by
//     RateLimitCeiling, and never consumes the ordinary budget.
//   - E11: RepoNotFound → complete with no rows; deactivated / suspended /
//     takendown → unavailable with active=false (in strict mode only from
//     a host with authority over the account, else failed authority, V2);
//     anything else after the budgets → failed with class, message and
//     next attempt.
//   - E15 (strict mode): a DID the PLC directory answers 404 for
//     (ident.UnknownDID; a did:web whose host answers 404 or whose name
//     does not resolve too) → failed with class unknown_did; such an
//     answer when Request.UnknownDIDs + 1 reaches UnknownDIDAttempts →
//     unavailable with active=false, no next attempt and no mark: a
//     fabricated DID costs a few resolutions, not one a day for ever. The
//     retry runner sets UnknownDIDs to the repo's attempts when its last
//     failure was unknown_did; the first 404 after failures of other
//     classes stores 1 attempt, so the attempts then count the 404s in a
//     row.
//   - R1: a record failing per-record validation is dropped alone; drops are
//     counted by reason when the repo's completion is durable.
//   - R2: completion stores the snapshot's head rev as BackfillRev.
//   - R3: rows are submitted in chunks of at most 1024 and at most
//     ChunksInFlight chunks are queued and not yet durable, so a huge repo
//     never has all its rows in memory.
//   - R4: the completion rides in the last chunk; units apply in order, so it
//     is durable with the last rows and never before any of them.
//   - R8: counters of stored state move only from writer receipts, waited
//     for with archive.Acks.Wait (a receipt that arrived before the writer
//     stopped still counts).
//
// Request.Host (a fleet bootstrap) downloads the repo from that PDS host
// directly through a HostSource (upstream.Client.HostGetRepo) instead of
// the relay's redirect; the host that answered is kept in repo/<did> as
// for any download.
//
// # Whole-repo replacement
//
// Request.Replace runs the same job as a replacement: its first unit is a
// sync row at the snapshot rev alone, every unit carries Unit.Replace so
// the writer refuses it whole over newer data (ErrStale), and rows are
// SourceRetry. Once the sync row is durable the writer's barrier keeps
// every other producer's units of the account waiting until the final
// unit, so the job then reads the account's archived records
// (Options.Current) and emits only what changes them: a create for each new
// record, an update for each changed CID, a delete for each record the
// snapshot lacks, nothing for unchanged ones (job_replace.go). A resync
// that changed k records costs k + 1 rows; a reactivated account whose repo
// did not change, its sync row alone. While the store's record index is
// still being backfilled (a store archived before it) a replacement is
// deferred before it fetches anything (archive.ErrIndexPending): the
// index would not show the records of the older rows.
//
// # Not here
//
// Page enumeration, dispatch, the completion watermark and the listRepos
// checkpoint are bootstrap's; steady-state retry scheduling is retry's; the
// network client and error classification are upstream's.
package backfill
