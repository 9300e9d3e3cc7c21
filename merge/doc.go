// Package merge owns the merging phase, in four steps that lifecycle calls
// in order: Walk folds the firehose captured during bootstrap (cap/) into the
// archive (ev/); PendingPass replaces wholesale every repo a restart left
// pending; Discover lists the relay again and records the accounts that
// appeared meanwhile; Cleanup ends the phase. Each step is restartable: a
// crash redoes only what is not durable.
//
// # The walker (walker.go)
//
// Walk reads cap/ from cursor/merge (absent = from the start) and submits the
// captured rows to the archive writer as SourceMerge rows, with the same repo
// side effects a live row has (firehose.Effects; M8), and cursor/merge set to
// the last captured seq of each unit in the same unit (M4): a restart resumes
// exactly after the last durable unit, with no duplicate and no gap. It
// reads cap/ through a new iterator every iterMaxAge (10 s), opened where it
// stands at a unit's cut, so the walk pins no table compacted away since.
//
// Keeping or dropping a row is the writer's per-account rev ratchet (M3): a
// captured commit or sync row is kept exactly when its rev is newer than
// rev/<did> — for a complete repo, newer than its snapshot — and identity
// and account rows always pass. A snapshot without a record sets no rev/:
// its completed rev (BackfillRev) is the ratchet then, so a commit
// captured before it cannot bring back a record it no longer holds. A captured commit of an account the
// archive holds deleted or taken down (bootstrap's listing, later than the
// capture, may have recorded it so) is dropped whatever its rev, unless an
// #account row before it in the unit reactivated the account: with the
// #account that followed it lost, nothing would erase its records. A captured commit's since (cap/ keeps it on
// the commit's first row) is checked by the writer as a live one is: newer
// than the account's archived rev as it stands when that commit applies
// (or, with no rev/, than its completed snapshot), a commit the relay
// dropped is missing, and the unit marks the account for a replacement. A kept sync row moves the
// ratchet but is not archived (its replacement archives the account's sync
// row).
//
// Tricky bit: the ratchet lets the other ops of a commit through only when
// they arrive in the same unit as the first one (they share its rev). The
// walker therefore never splits the rows of one upstream event (one
// UpstreamSeq) across two units.
//
// # The pending pass (pending.go)
//
// A repo that was not_started when bootstrap was interrupted became pending
// at the restart: it may have partial rows at low seqs. PendingPass replaces
// each active pending repo wholesale through the backfill jobs, so its
// snapshot lands above the merged tail (M5). A job that cannot finish leaves
// the repo failed with a next attempt (the retry runner takes it in steady
// state); only a store or writer failure stops the pass. The pending repos
// are read as repo/ is walked, a page of archive.ScanReposPage (1,024)
// rows at a time, no iterator open while a DID waits for a worker: the
// walk creates pending every unlisted
// account whose captured commit had a since (after a listing cut short,
// millions over a bootstrap of days), and their DIDs held at once would be
// a hundred MB or more for hours.
//
// # Discovery (discovery.go)
//
// Discover pages listRepos from the last non-empty cursor of the bootstrap's
// listing and records every DID the store does not know as a failed repo due
// now, with refetch reason "discovered" (M6): the retry runner fetches them in
// steady state. Discovery uses the bootstrap's mode: after a hosts-mode
// bootstrap (a roster in host/, Config.Fleet set, and
// Config.Enumerate not relay) it first
// reads the relay's listHosts roster again (Config.Roster set:
// bootstrap.RereadRoster, as each repair pass does, counted in
// backstream_discovery_roster_reads_total{result}; a failed read leaves
// the host/ rows as bootstrap recorded them, one WARN), so a host that
// joined the network while bootstrap ran is listed too: its accounts that
// existed before it joined are on no firehose. Then it lists every
// roster host but banned and left ones (bootstrap.ListedHosts) on the host, from its own last non-empty cursor
// (cursor/hostlist_last/<host>, from the start when it has none), and
// never the relay's listRepos; a host whose listing cannot be used fails
// alone (counted by reason like a cut, one warning for all of them) and
// the other hosts are listed; a host whose cursor repeats fails so too
// (cursor_loop), and a host's listing past upstream.HostListingBound of its
// roster account count (its host/ row's, from bootstrap) is cut likewise
// after the page that went past is recorded (too_many_entries), so one
// that never ends cannot hold merging. Config.ListWorkers hosts (16) are
// listed at once: one after another, a roster of tens of thousands of hosts
// would hold merging for as many round trips in a row. When
// every host fails, or some host is cut too_many_entries (no other host
// lists the accounts past its cut), the relay's listRepos is listed after
// them (one warning, backstream_discovery_relay_fallback_total). A roster
// that, read again, gives no host it lists an account count is not listed by
// host in the default mode: discovery lists the relay instead, bootstrap's
// rule (bootstrap.ListedHosts; Config.Enumerate hosts lists the hosts anyway).
// Config.Enumerate relay (the operator's --enumerate relay) lists the
// relay whatever roster an earlier hosts-mode bootstrap recorded: it reads
// no roster, asks no host and logs no WARN; the host/ rows stay as they
// are, for a later run in another mode.
// Upstream trouble never fails merge (M8): a repeating cursor of the
// relay's listing ends discovery with a warning; a page it cannot use ends it with one error
// line and a count (backstream_discovery_cut_total{reason}): a transient
// failure or 429 after five retries (0.5 s doubling, internal/backoff's
// jitter), a malformed or oversized page or a 4xx at once (the same bytes
// again), a cursor over 64 KiB after the page's repos are recorded. A writer that stops before a page's
// unit is durable fails discovery with its error. Debug modes
// (--repos, --max-repos) skip it (lifecycle decides).
//
// # Commit points
//
// Each walker unit (rows + cursor/merge) is one synced batch, followed by
// crash point merge-batch. Each pending replacement is the job's own
// units, followed by crash point pending-replaced; each discovery page is
// one unit, followed by crash point discovery-page. Cleanup is one synced
// batch: range delete of cap/, delete of cursor/merge and the listRepos
// cursors (the relay's and every host's), and phase=steady_state (M7, C4), followed by crash point
// steady-committed.
//
// # Not here
//
// Which rows a frame produces is firehose's; fetching and verifying one repo
// is backfill's; retrying failed repos in steady state is retry's; deciding
// when each step runs is lifecycle's.
package merge
