// Package retry owns the steady-state replacement runner:
// it brings in, as whole-repo replacements, every repo that is failed with
// its next attempt due, pending (an interrupted bootstrap), or marked for a
// replacement (a #sync, a reactivation, discovery) — without hammering any
// host. Merge's pending pass (merge.PendingPass) runs its own jobs.
//
// # What it provides
//
//   - New(Config) → *Runner; Run(ctx) passes over the store until ctx ends
//     (nil) or the machinery fails (ErrFatal); Wake asks a running Run for
//     a pass now; Status is the /status view. One Run at a time per Runner
//     (ErrRunning). The tests drive one pass plus its jobs at a time with
//     RunOnce (export_test.go), repeated while a pass left repos of a full
//     host share behind.
//   - Due(state, now, horizon): the candidate rule.
//   - Backoff: the durable schedule. Backoff.JobOptions(opts) prepares the
//     job runner's backfill.Options (NextAttempt from this schedule, no
//     in-job 429 budget) so a failed job writes its next attempt with the
//     failure and a 429 comes back here to park its host.
//   - Metrics: backstream_retry_attempts_total{result}, _replacements_refused_total,
//     _fatal_total, _due, _parked_hosts, _inflight, _queued, _passes_total,
//     _deferred_total{reason}.
//
// # Invariants kept here
//
//   - S3: candidates stream from the due index (due/, kept by the archive
//     writer in the batch of each repo/ row) in pages of PageKeys keys,
//     each read by its own short-lived iterator, soonest due first and
//     only up to now, then past the horizon below (where only a wall clock
//     that ran ahead puts an entry): a pass reads the repos due, never the
//     repos known.
//     A Wake's pass, and the one ScanPeriod after the last full or
//     Wake's pass, reads less still: only what was written or came due
//     since the last pass, from where that pass stopped reading or from
//     the earliest due/ entry the writer made durable since
//     (archive.Store.TakeDueWritten), whichever is earlier: a mark
//     stamped before a slow commit, or by a clock since stepped back, is
//     read at once. What a pass leaves behind has its own trigger. A full
//     host's due repos: the runner keeps, per host whose share a pass
//     found full, the due/ key of the first repo it left behind; when that
//     share drains to half, a resume pass reads on from there (in pages
//     starting at HostQueue keys), up to now, and stops as soon as each
//     resumed host is full again, so a backlog of H repos on one host is
//     read about once while it drains, not once per share (H²/HostQueue
//     keys). A parked host's due repos (every one while the relay is
//     parked): a full pass when the park ends. A job deferred for the
//     record index (archive.ErrIndexPending: its repo stays due where the
//     pass read it): a full pass at the next Wake (every Wake's pass is
//     full while the index backfill runs) or timer. A full pass is also
//     the run's first, and the timer's once the jobs finished since the
//     last full pass reach half the keys that pass read (fullReadPerJob):
//     it recounts the due repos (backstream_retry_due) and reads past the
//     horizon, at most 2 keys per job finished. The wakes that #sync and
//     #account effects send, several a second, and the scan period's
//     timer thus never reread a backlog that cannot move; draining one
//     host's backlog reads about 4 due/ keys per repo retried, whatever
//     its size (TestOneHostBacklogReadsLinearly).
//     Due repos go into a queue bounded by Queue (the scan blocks when it
//     is full). What is held in memory is one
//     page, the queue, the DIDs queued or running (deduplication: a DID is
//     never queued twice), the gates of hosts with something queued or
//     running, one due/ key per host a pass found full, and the hosts
//     parked right now. Never the candidate set nor
//     the host set.
//   - S2: Workers goroutines are the global gate; a host gate admits at most
//     HostWorkers running jobs. The gate key is the final host after
//     redirects recorded on the repo (RepoState.Host). Gates are created when
//     a host's first repo is queued and dropped when it has nothing queued or
//     running. A repo with no recorded host (never downloaded: discovered,
//     or pending before its first terminal state) cannot be attributed to a
//     host before its download; such repos share only the global gate (DID
//     order scatters them across hosts). One host's share of the queue is
//     bounded by HostQueue, so a slow host never fills the queue in front of
//     the others; what a pass leaves behind for that reason is picked up by
//     a resume pass as soon as the host's share has drained to half (S3).
//   - Backoff: a failed job writes attempts, class, message (≤ 1 KiB) and
//     the next attempt — exponential from Interval to MaxDelay, ±25 %
//     jitter (the rule of package internal/backoff) — in the same unit as
//     the failure (through the job runner's NextAttempt). Failures the
//     runner writes itself use the same schedule, and every unit it writes
//     is waited for with archive.Acks.Wait.
//   - S4: a job that ends on a 429 parks the host that answered it until
//     its reset (Retry-After / ratelimit-reset, or Interval when absent):
//     the host's queued repos are dropped from the queue and its due repos
//     are skipped by passes until the reset, neither counted as failures nor
//     written. The 429'd repo's next attempt moves to the reset and its
//     attempt count is put back, in the same unit as the park. Other hosts
//     keep their slots. A park never shortens an existing one. Every
//     download is asked of the relay first (Config.Relay), so a park of
//     the relay drops every queued repo and skips every due repo until its
//     reset.
//   - Parking survives a restart: it is written to host/<host> (ParkedUntilUS)
//     and Run loads the hosts still parked when it starts (one
//     streaming read of host/, keeping only the parked ones). Without this a
//     restart during a rate-limit window would hit the host again at once.
//     A park that has ended is cleared from host/ (with the class it
//     wrote) after the pass that found it ended, or the run's first pass
//     for one that ended before the run: host/ keeps no row for a host
//     parked once and with nothing else to keep.
//   - Written times are bounded when read: a park ending further ahead of
//     now than the longest park the runner writes (max(RetryAfterCeiling,
//     Interval)) is over, and a next attempt further ahead than MaxDelay
//     plus that park is due now (a pass also reads due/ past that horizon).
//     Only a wall clock that ran ahead when they were written puts them
//     there; read after the clock was put right they would otherwise wait
//     as long as it was wrong.
//   - S5, S9: success is the job's whole-repo replacement (backfill Request
//     with Replace): sync row, records, completion — which sets the repo
//     complete and clears attempts, error, next attempt and the replacement
//     mark. A replacement refused because the account's ratchet moved past
//     the snapshot (backfill.ErrStale: nothing was applied; also an
//     account the archive holds inactive, archive.ErrInactiveReplacement)
//     is fetched again at once, at most MaxRefetch (3) times in a row; the
//     next refusal makes the repo failed (class stale_replacement) with
//     backoff, keeping its replacement mark. After each refusal the state
//     is read again: an account now inactive is left alone (S8). Each refusal is counted
//     (backstream_retry_replacements_refused_total).
//   - E11 terminal answers are the job's: deactivated / suspended /
//     takendown → unavailable; RepoNotFound → the replacement's sync row and
//     complete. Its jobs go through the relay, so a repo failed authority
//     for a roster host's not-found answer (V2) is fetched from whoever
//     holds it.
//   - E15: a repo whose last failure was unknown_did (the directory has no
//     document for its DID) is run with its attempts as
//     backfill.Request.UnknownDIDs, so the job ends it unavailable at
//     backfill.UnknownDIDAttempts; inactive then, it is never a candidate
//     again until an #account event makes it active (counted as result
//     unavailable).
//   - S6: a failure of the machinery — a store read or decode error, the
//     writer stopped or refusing a unit, a job error that is neither a
//     per-repo outcome nor ErrStale, a panic — is counted
//     (backstream_retry_fatal_total), logged once, stops every worker, and
//     makes Run return an error wrapping ErrFatal. Per-repo remote failures
//     never take this path.
//   - S8: an inactive account is never fetched, whatever its mark; the state
//     is read again when a repo's turn comes, so one deactivated since the
//     scan is skipped.
//
// # Commit points
//
// The runner writes only through writer units, each waited for until
// durable: a park (host/<host> plus the 429'd repo's next attempt) and the
// failure after too many refusals. The job makes every other state durable.
//
// # Known limits
//
//   - backstream_retry_due and Status.Due are the last full pass's
//     count, less each job finished since whose repo left the due set,
//     plus the repos a Wake's pass reads due later than the previous pass
//     read (full passes come only as the jobs pay for them, above, so a
//     large backlog would otherwise show its first count for hours). A
//     full pass waits while the queue is full, so over a large backlog it
//     ends after many of the jobs it counted have finished: those are
//     taken off the count it makes as it ends (sched marks what each pass
//     counted). A repo a job finds no longer due is taken off only when a
//     pass counted it since it was queued (not when a pass only read it
//     again as its last job ended, which took it off already). A repo
//     whose mark is written with a time the runner had already read
//     past, or a repo marked again while queued, is off the count until
//     the next full pass, which counts again.
//   - The due index of a store written by a build without it is built
//     when the store opens (one read of repo/). A store that a build
//     without the index wrote to after that has an index missing those
//     changes: downgrading and upgrading again is not supported.
//
// # Not here
//
// Downloading, verifying and emitting a repo is backfill's; marking repos
// due is the firehose's and merge's (#sync, #account) and discovery's;
// holding an account's other rows while its replacement is written is the
// archive writer's; deciding when the runner runs is lifecycle's. The runner never touches the
// capture.
package retry
