// Package repair owns the repair pass that heals a gap in the archive: a
// stretch of the relay's stream it may be missing (archive.Gap: the relay
// said OutdatedCursor or FutureCursor, restarted its sequence, skipped
// seqs, the operator reset the cursor, or a scheduled audit). The relay
// knows the truth as each account's head rev (listRepos); the archive knows
// its own as the rev ratchet (rev/<did>). A pass marks for a whole-repo
// replacement exactly the accounts that may differ, and the retry runner
// fetches them.
//
// # What it provides
//
//   - New(Config) / Run(ctx): every Period, the oldest open gap gets its
//     pass (resumed from audit/<gap id>); a gap whose pass is done closes
//     once every replacement it scheduled has finished. With
//     AuditInterval, a GapAudit gap is recorded on that schedule, so the
//     same comparison catches what no gap announced.
//   - Status: the pass in progress, for /status.
//   - NewMetrics.
//
// # Invariants kept here
//
//   - A pass has three phases, each unit durable with its position
//     (audit/<id>, archive.Audit) and its marks in the same unit, so a
//     crash resumes where the last durable unit ended and marks nothing
//     twice: (1) scan: every account with a live commit or sync row
//     archived after the gap was found (ev/ from the first seq at its
//     first-seen time to the tip when the pass started): a change in the
//     gap may hide under a newer rev archived since; (2) list: listRepos
//     page by page, and an active account whose listed rev (a valid TID) is
//     newer than rev/<did>, an account listed active but stored inactive,
//     and an account the store does not know are marked
//     (archive.RefetchAudit, due now); one listed inactive has its account
//     state refreshed, nothing fetched; (3) done.
//   - A gap closes (its ClosedUS written, audit/<id> deleted, in one unit)
//     only in phase done and when no active account that is not failed
//     still carries the audit mark: a failed replacement is the retry
//     runner's, on its schedule, and shows in /status's failed repos.
//   - Upstream trouble never stops Run: a listRepos page whose retries are
//     spent is tried again next Period from the durable cursor; a page that
//     cannot be used (malformed, a cursor loop or over 64 KiB) ends the
//     listing there, counted and logged once. Store and writer failures
//     end Run with the error.
//
// # Tricky bits
//
// The scan phase is what makes rev comparison sound after the stream
// resumed: an account changed both in the gap and after it has a ratchet
// equal to its listed rev, yet misses the gap's records. It marks every
// account active since the gap (a superset of those that changed in it),
// bounded by the accounts active between the gap and the pass.
//
// # Not here
//
// Fetching is retry's (its workers, host caps and backoff are the pass's
// rate limit); detecting gaps is firehose's and the relay check's.
package repair
