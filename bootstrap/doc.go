// Package bootstrap owns the whole-network first pass: enumeration of the
// relay's repositories (listRepos) or, in hosts mode, of every PDS host of
// the relay's listHosts roster on the host itself (fleet.go), dispatch to a pool of backfill jobs
// (package backfill), the completion watermark and the durable listRepos
// checkpoint, the restart pass, progress reporting, and the bootstrap →
// merging commit point (EnterMerging). It does not download or verify a
// repository itself, serves no clients, and writes the store only through
// units submitted to archive.Writer.
//
// # What it provides
//
//   - New(Config) → *Bootstrap; Run(ctx) returns nil when bootstrap is done:
//     the listing has ended or was cut short (or the debug list is
//     exhausted), every repo it
//     dispatched is durably terminal, the final checkpoint is durable.
//   - Progress() for /status; a progress log line every 10 s.
//   - EnterMerging(ctx, store, writer, now): phase=merging with both backfill
//     timestamps in one synced unit (C3), for the caller to invoke.
//   - Shuffle, the production dispatch-order helper (E2).
//   - ReadRoster and RecordRoster (roster.go): the relay's listHosts roster
//     read (paged, retried, bounded at 1,000,000 hosts, a repeating cursor
//     ending it) and recorded in host/ rows; bootstrap's read is these
//     two, and RereadRoster (the same two, when a roster is recorded and
//     the mode asked is not relay; a failed read leaves the rows as they
//     were) is hosts-mode discovery's
//     (package merge) and every hosts-mode repair pass's (package repair).
//
// # Invariants kept here
//
//   - E1: listRepos is paged with limit 1000 from the last durable page
//     cursor; every listed entry (terminal or not) belongs to its page.
//   - E2: each page's repos are dispatched in a shuffled order.
//   - E3: Workers goroutines each run one job at a time, so N workers are at
//     most (and under load exactly) N concurrent getRepo requests.
//   - E12: an inactive entry is stored active=false and never dispatched; a
//     later listing that flips activity changes only that field.
//   - E13: Repos backfills exactly those DIDs in order, with no enumeration
//     and no cursor; MaxRepos stops after N listed repos and never commits a
//     cursor. Neither runs discovery (that is merge's; the caller must not
//     start it in these modes).
//   - R5: a job's terminal state is its own writer unit; one straggler holds
//     back only the checkpoint, never its siblings' completions.
//   - R6: the checkpoint covers page p only when every repo of pages ≤ p is
//     durably terminal; it is submitted after those outcomes were reported
//     durable, so it is durable in a later batch (or the same).
//   - R7: before enumeration resumes, every active not_started repo becomes
//     pending in one pass (durable before the first page is read); terminal
//     repos (complete, failed, unavailable, pending, inactive) are never
//     dispatched; a repo's not_started row is durable before it is
//     dispatched, hence before its first row.
//
// # Commit points
//
//   - the restart pass: units of ≤1024 repo mutations, all durable first;
//   - one unit per page: its new inactive DIDs (not_started, active=false)
//     and activity flips;
//   - one unit per dispatch batch (max(Workers, 16) repos): new active DIDs
//     as not_started, written just before they are handed to workers (with
//     Config.Resolve, the batch's DIDs go to Workers look-ahead resolvers
//     first, so their documents are cached before their jobs start: the
//     directory's latency overlaps the downloads; with Config.Preload,
//     which runs beside the whole run, node reads the PLC directory's
//     export into the resolver, and no job starts before its first page is
//     in or PreloadWait has passed);
//   - per repo: the job's units (backfill);
//   - cursor/listrepos (+ cursor/listrepos_last): one unit per watermark
//     move, at most one outstanding;
//   - EnterMerging: phase, phase_entered_at, both backfill timestamps.
//
// # Tricky bits: the completion watermark without a batch barrier
//
// Pages are numbered as read. Each page counts its dispatched repos not yet
// durably terminal; a job returns only once its terminal state is durable,
// and then its page's count drops. The leading pages whose counts are zero
// are popped and the checkpoint moves to the cursor after the last one
// ("finished" after the final page). Enumeration holds window credit for
// every entry of every page not yet popped (Window, default 50,000), so it
// runs far ahead of a straggler without idling workers; a page longer than
// its lane's whole window takes all of it (credit, coordinator.go). In
// hosts mode a page takes credit twice: from its host's share (below), at
// least a page, so one large host cannot hold the whole window, and from
// the whole window, which every host's lane draws on, so what all the
// hosts' listings hold ahead of their checkpoints together is at most
// Window however many hosts the roster names (the shares alone sum to
// far more: at 30,000 hosts, each share a page, Σ min(host size, 1,000)).
// A lane runner waiting for credit holds the page it listed, so the
// entries in memory are at most Window plus a page per runner (16 ×
// Workers runners), whatever the roster.
//
// Active repos are written not_started lazily, a batch at a time just ahead
// of the workers, not when their page is read: a repo listed but not yet
// written is simply listed again after a crash (its page is not
// checkpointed). So a crash leaves at most about two batches plus the
// in-flight jobs not_started — the repos that become pending on restart —
// instead of the whole window. A DID
// listed again while in flight is not counted in the later page: the
// earlier page, which must be covered first, already counts it. The
// in-flight set is consulted before the store, an active DID reserved in
// it by the same check (two lanes may list it at once), and a DID leaves it
// only after its outcome is durable, so a re-listed DID is never dispatched
// twice.
//
// A listRepos cursor that repeats any cursor of this run ends the listing
// as if on the last page (counted: backstream_listrepos_cursor_loops_total).
//
// # Hosts mode (the fleet bootstrap)
//
// When every listed roster host's listing ends failing (refused, e.g. by
// the address policy, or failing past its retries), or the roster has no
// host to list (every one banned), hosts mode would archive nothing; when some host's listing
// is cut for naming more entries than its bound (too_many_entries, below),
// no other host lists the accounts past the cut. The run then lists the
// relay's listRepos after the hosts' lanes, as relay mode does, from its
// own checkpoint (relayNeeded; one warning saying why,
// backstream_bootstrap_relay_fallback_total, /status
// hosts.fell_back_to_relay).
//
// In the default mode (Config.Enumerate ""), a roster that gives no host
// it lists an account count (Roster.ListsRelay) is not listed by host at all:
// each host's listing would be cut at upstream.HostListingSlack entries.
// The run enumerates the relay's listRepos and records no roster;
// discovery and every repair pass go by the same rule on the roster as
// they last recorded it (ListedHosts). Config.Enumerate "relay" lists the
// relay in all of them (ListsRelay): after a hosts-mode run recorded a
// roster, discovery and the repair passes neither read it again
// (RereadRoster reads nothing) nor list its hosts, and the host/ rows stay
// as recorded for a later run in another mode.
//
// Config.Enumerate "hosts" (or "" when the relay answers listHosts) pages
// the roster (retried on the listing budgets; a 501 means the relay has no
// listHosts), records every entry in its host/<host> row (status, account
// count, seq: HostUpdates, the writer the only writer of host/; a host a
// whole read no longer names gets status RosterLeft), skips and
// counts banned hosts, and runs one lane per other host, whatever its
// status (listable: active, idle, offline, throttled, or a word listHosts
// does not name; the relay still indexes their accounts, and in hosts
// mode nothing else lists them): its own enumerator (HostListRepos), its own
// watermark, its own share of the window (Window / hosts, at least a page)
// and its own checkpoint, cursor/hostlist/<host> (with its last non-empty
// cursor in cursor/hostlist_last/<host>, where hosts-mode discovery lists
// the host again), with the same completion-watermark rule as the relay's
// cursor/listrepos (and cursor/listrepos_last). Every
// invariant above holds per lane; the restart pass, the recorder and the
// in-flight set are shared. The lanes are listed by a pool of at most
// 16 × Workers runners (lanes.go), each taking the next lane not yet begun,
// in roster order, so a roster of a million hosts costs at most that many
// goroutines, not one per host; Workers of them hold a listRepos request
// at once (listOnce), the others wait for a request slot or window credit.
// A slot that frees goes to a waiting request of a host that has answered
// in the run before any of a host that has not (prioritySlots), and none
// is held back while a request waits: before each next page a host that
// has answered waits for the hosts that have not at most until the first
// slot frees (and in turn with the other hosts that have answered),
// however many blackholed hosts try and retry.
// A host's page that failed waits for its next try (its page budgets,
// listPage) parked, holding no runner, and every lane not yet begun is
// taken before a parked one is tried again (lanePool.next): hosts that are
// down, however many, delay a healthy host's first page by at most their
// own first tries. A runner takes the parked lane due first and waits for
// it; the runner that parks a lane takes the one due first next, so a lane
// parked later with a shorter wait is never left behind runners asleep on
// longer ones. A host's first page is never waited for: a
// host that is down or slow past its budgets is cut alone (HostFailing on
// /status, its checkpoint left where it was) and the others go on; it is
// listed again in the same run from where it was cut, HostRetries times
// after 5 s doubling to 5 min (listLane; /status shows its retries and
// next attempt, the next try of its page while that page fails again
// after it is listed again; it waits parked too, and is taken again once
// due), so
// bootstrap's end waits for it about 15 minutes at most.
// Still cut after that, it is left failing
// (backstream_bootstrap_hosts_gave_up_total; one warning a minute across
// hosts): discovery lists
// it again after bootstrap, a restart before merging from its checkpoint.
// A host whose page cannot be used (garbage, a 4xx, a cursor too long), or
// whose listing names more entries in the run than
// upstream.HostListingBound of the account count its host/ row holds (a
// listing that never ends: the page that spends the bound is recorded,
// then cut too_many_entries), is cut alone the same way but not listed
// again in the run: discovery lists it after bootstrap (the relay's listing
// follows the hosts' for a host cut too_many_entries, above). A host whose
// cursor repeats ends its listing there, as the relay's does. A repo is
// fetched from the host that listed it (backfill.Request.Host; in strict
// verification that host's not-found or inactive answer counts only when
// the DID document names it, else the repo fails authority and the retry
// runner fetches it through the relay); listed by a
// second host before a worker took it (a migration in flight), it is
// fetched from the host its DID document names as its PDS (Config.Identity)
// or, with identity resolution off (--verify off), failing, or naming
// neither host, from the one whose listing has the newer rev
// (Progress.Hosts.Reattributed, AttributedByRev,
// backstream_bootstrap_double_listed_total{by}). Once fetched from one
// roster host, another roster host's entry about it changes nothing
// (Foreign, as in every repair pass: by="foreign"). Dispatch is round-robin
// over the hosts with ready repos, each under HostWorkers concurrent jobs,
// so a slow host holds at most its cap of workers. Only hosts with ready
// repos are in the round (a host leaves it when its queue empties), so a
// dispatch costs the same at 30,000 roster hosts as at three.
//
// # Tricky bits: a listing cut short
//
// Upstream data is never fatal. A page that cannot be used — a cursor over
// 64 KiB (its repos are kept), a body over the cap, a body that does not
// parse, another 4xx — ends the listing at once; transient failures and
// 429s first spend their retry budgets. Either way the listing ends after
// the last usable page, logged once at ERROR and counted
// (backstream_listrepos_cut_total{reason}), and bootstrap finishes what it
// listed and goes on to merging. The cut page is an empty last page marked
// cut: the checkpoint never becomes "finished" but stays at the cursor the
// bad page was requested with, so a restart before merging asks for it
// again (a healed relay loses nothing, a still-bad one is cut again, never
// a crash loop), and discovery resumes there (cursor/listrepos_last)
// after bootstrap. Only a listing that has listed nothing yet (no
// checkpoint, no page this run) waits for the relay instead of giving up
// on transient failures: ending it would archive nothing.
package bootstrap
