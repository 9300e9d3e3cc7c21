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
//   - New(Config) / Run(ctx): every Period, the open gaps in id order get
//     their pass (resumed from audit/<gap id>); a gap whose pass is done
//     closes once every replacement it scheduled has finished. With
//     AuditInterval, a GapAudit gap is recorded on that schedule, so the
//     same comparison catches what no gap announced.
//   - Status: the pass in progress, for /status.
//   - NewMetrics.
//
// # Invariants kept here
//
//   - A pass pages listRepos from audit/<id> (archive.Audit), one unit per
//     page holding its marks and the position after it, so a crash resumes
//     where the last durable unit ended and marks nothing twice. In hosts
//     mode (Config.Fleet set and a roster in the store, as for discovery)
//     it pages every roster host's own listRepos instead (but banned and
//     left ones: bootstrap.ListedHosts; idle, offline and throttled hosts
//     too), each from
//     its own position (audit/<id>/<host>), so an account the relay's index
//     misses is compared too; a host whose listing fails transiently is
//     tried again next Period while the others go on, and after
//     bootstrap.DefaultHostRetries such steps in a row it is cut (counted,
//     logged) so a dead host cannot hold its gap open (a host cut before
//     it listed any entry in the pass is as a host not listed: the pass
//     stays complete and its accounts are checked as absent); so is a host's
//     listing that names more than upstream.HostListingBound entries of its
//     roster account count in the pass (one that never ends; the count its
//     host/ row holds). When no host listed
//     anything (every one refused or failing for good), or some host's
//     listing was cut for naming more than that bound (no other host lists
//     the accounts past its cut), the relay's listing is compared after the
//     hosts' from the pass's own position, resumed after a restart once
//     begun; a cut made before a restart is read from the host's durable
//     position, which lists more entries than the bound
//     (backstream_repair_relay_fallback_total). A roster recorded
//     without an account count for any host it lists is not listed by host
//     in the default mode: the pass compares the relay's listing,
//     bootstrap's rule (bootstrap.ListedHosts; Config.Enumerate hosts lists
//     the hosts anyway). Config.Enumerate relay (the operator's
//     --enumerate relay) lists the relay whatever roster an earlier
//     hosts-mode run recorded: no roster read, no host asked, no WARN,
//     the host/ rows left as they are.
//     The per-host rows are deleted before the gap closes.
//   - A pass in hosts mode (Config.Roster set too, Config.Enumerate not
//     relay) reads the relay's
//     listHosts roster again when it begins, with bootstrap.RereadRoster
//     (ReadRoster and RecordRoster, as discovery does): host/ rows through
//     the writer (status, account count: the bound above), hosts a whole
//     read no longer names marked bootstrap.RosterLeft and listed no more.
//     A failed read leaves the rows as they were and the pass lists them
//     (counted, logged: backstream_repair_roster_reads_total{result}).
//     Read only at a pass's beginning, before any position of it is
//     durable, with one pass listing at a time, the roster is fixed for a
//     pass across restarts: a host joining meanwhile is the next pass's. An active
//     account whose listed rev (a valid TID) is newer than its archived rev
//     (rev/<did>, or the complete repo's snapshot rev: a snapshot without
//     records moves no ratchet), one listed active but stored inactive, and
//     an unknown one with a rev are marked (archive.RefetchAudit, due now);
//     a roster host's entry about an account whose recorded host is
//     another roster host the pass lists (any status but banned or left)
//     is ignored, counted (reason foreign): a
//     host's word does not take down, delete or refetch what it does not
//     hold;
//     a repo the directory said does not exist (archive.ClassUnknownDID,
//     unavailable for good) is never marked however active a listing says
//     it is, counted (reason unknown_did), so a host listing fabricated
//     DIDs costs no resolution per audit (E15); listed inactive, it gets
//     the account row below like any other;
//     one listed inactive whose stored state differs gets the account row
//     a live #account event would have archived (firehose.Effects on its
//     repo), nothing fetched.
//   - After a complete pass (listed from its start in this process, no
//     listing cut), each account the archive keeps the records of (active,
//     or inactive but neither deleted nor taken down: deactivated,
//     suspended; a deactivated account's deletion lost in a gap shows only
//     as its absence too) that no listing named is asked
//     (Config.Status: the relay's getRepoStatus; its own
//     host's when the relay does not know it: with verification on
//     (Config.Identity) the PDS its DID document names, not the host it
//     was last downloaded from, which it may have left), and the answer is decided
//     as a listing entry saying the same would be: inactive or gone
//     (deleted, takendown, ...) gets its account row, active is marked
//     only at a newer rev (an account a relay's index misses is not
//     fetched again at every audit). The relay's
//     RepoNotFound alone is never taken as a deletion (its index may miss
//     a live account). More absent accounts than MaxAbsent (a listing that
//     went wrong, a host that left, a relay index missing accounts): the
//     pass asks MaxAbsent of them, those after the ones the previous pass
//     of this process asked, in DID order wrapping round, counted and
//     logged once a pass; later passes ask the rest. The DIDs listed
//     are held as 64-bit hashes in a slice, sorted once (about 8 bytes an
//     account: some 320 MiB for 40 million), and dropped once the pass
//     has checked its absent accounts.
//   - A pass's start ends its gap's extension by later holes
//     (archive.GapIDs.Begin), waits for a unit of its own, and reads the
//     gap again: one a hole extended meanwhile waits for the stream to
//     catch up past that hole, like a new gap.
//   - A pass starts only once the live stream (Config.Stream) has caught
//     up past its gap: it accepted a frame after the gap was found (a
//     listing taken before would miss what changed between it and the
//     resume), and then an event the relay stamped after that moment, or
//     no frame for a whole Period; and only once a unit of its own is
//     durable behind everything the stream accepted. So the relay's
//     replayed backlog is in the ratchet before any account is compared,
//     and an account whose commit the relay replays is not fetched again.
//     A scheduled audit follows no outage and starts at once. "When the
//     gap was found" is its FirstSeenUS, unless that was ahead of the
//     clock when this runner first read the gap (found while the wall
//     clock ran ahead, read after it was put right): then the moment of
//     that first read, which the finding preceded (foundAt). The next
//     scheduled audit counts from the same time. Otherwise the pass, and
//     /readyz with it, would wait as long as the clock was wrong.
//   - A gap closes (its ClosedUS written, audit/<id> deleted, in one unit;
//     the same unit deletes the gap/ rows of the closed gaps older than the
//     newest keptClosedGaps, 100: every /readyz probe, scrape and step reads
//     every gap/ row, and a scheduled audit a day would add one for ever;
//     the newest gap stays, so gap ids and the audit schedule follow it)
//     only when its pass is done and no active account that is not failed
//     still carries the audit mark: a failed replacement is the retry
//     runner's, on its schedule, and shows in /status's failed repos.
//     Every Period while it waits, a look counts those marks among the
//     due index's repos due now (a mark is due at the time it was made),
//     never the failed repos waiting for a later attempt; only when none
//     is due now does it read on past now, stopping at the first mark (a
//     429's park, or a clock that stepped back, puts a mark ahead), so
//     the gap never closes before every mark is fetched.
//   - Upstream trouble never stops Run: a listRepos page whose retries are
//     spent is tried again next Period from the durable cursor; a page that
//     cannot be used (malformed, a cursor over 64 KiB) ends the listing
//     there, counted and logged once. Store and writer failures end Run.
//
// # Tricky bits
//
// Rev comparison alone misses an account changed both in the gap and after
// the stream resumed: its ratchet equals its listed rev, yet the gap's
// commits are missing. The writer catches those as they arrive: a live or
// merged commit whose since is newer than the archived rev marks its
// account (archive.Event.Since). The two together heal every commit hole. An account
// deleted in the gap is listed nowhere, so only its absence shows it; a
// pass resumed after a restart did not see every listing and leaves the
// absences to the next audit (a crash during the checks too).
//
// # Not here
//
// Fetching is retry's (its workers, host caps and backoff are the pass's
// rate limit); detecting gaps is firehose's and the relay check's.
package repair
