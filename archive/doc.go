// Package archive owns backstream's one Pebble store at <data-dir>/store: the
// key layout (keys.go), the typed fail-closed codecs (codec.go, repo.go,
// event_codec.go), the event model (event.go), the single writer with group
// commit and the per-account rev ratchet (writer.go) and its per-account
// barrier of whole-repo replacements (barrier.go), the live log of recent
// durable events (live.go), the failure aggregates (aggregates.go), online
// checkpoints (checkpoint.go), readers (reader.go, read.go), and the
// compaction pass that physically removes superseded rows (compact.go,
// compact_codec.go).
//
// It knows nothing about HTTP or atproto: DIDs, revs and CIDs are opaque
// strings and bytes here; syntax is checked at the edges that receive them.
//
// A producer learns what became of its units through its Acks mailbox
// (acks.go): Acks.Wait is the one way to wait for n receipts — it returns
// the receipts that arrived plus the writer's error (never nil) when the
// writer stops first — and TokenOf reads a receipt's token back as the type
// the producer gave it, or fails.
//
// # Invariants kept here
//
//   - C1: cursor values are [0x01][uint64 LE]; wrong width, unknown version and
//     values above MaxInt64 are errors. cursor/relay and cursor/merge move
//     only through Unit.Cursor (a Put of them is refused), in the same batch
//     as the rows they cover (a Unit carries both), and never past a unit
//     still waiting for a replacement (see Replacement holds).
//   - C2: every read distinguishes absent (ErrNotFound), unreadable (ErrRead)
//     and malformed (ErrMalformed); the error names the key. Only absence may
//     take a default, and only where the caller knows it is legitimate.
//   - C5: Open refuses a store that holds keys but no readable identity and
//     phase (ErrRefused, saying what was found); an empty store is initialised
//     with meta/instance and meta/phase=bootstrap in one synced batch; the
//     scratch dir is emptied, only once the store's lock is held (it holds
//     the lock holder's downloads), and never a reason to refuse.
//   - D1: the Writer publishes events (LiveLog) and receipts (Acks) only after
//     the batch holding them is synced. A seq handed to anyone is durable, so
//     it is never reused after a crash; each event's TimeUS is
//     max(now, previous+1), seeded from the tip on restart, so it strictly
//     increases along seqs and a time cursor names exactly one event.
//   - D3 (the ratchet): rev/<did> is the newest rev archived for the account.
//     A live or merged commit/sync row is kept only when its rev is newer
//     (the other ops of the same commit, in the same unit, pass with it);
//     a kept live or merged sync row (an upstream #sync) moves the ratchet
//     but is not archived: the replacement its effect schedules opens with
//     the account's one sync row, at the snapshot's rev;
//     backfill and replacement rows move the ratchet to their snapshot rev; a
//     Unit marked Replace is refused whole when the ratchet is already newer
//     than its snapshot, or when repo/ holds the account inactive
//     (ErrInactiveReplacement: an account row newer than the snapshot,
//     whose erasure the rows would undo) (S9). Identity and account rows
//     always pass.
//   - R4: a unit is applied all or nothing, and units that touch a common
//     account (a row's or a repo update's DID) are applied in submission
//     order, so a completion submitted after a repo's last rows is durable
//     with them or later, never earlier. Units of disjoint accounts may be
//     applied out of submission order, only around a replacement in
//     progress; a producer that needs a global order (a checkpoint, a
//     phase) submits after its earlier receipts.
//   - repo/, rev/ and meta/counts change only inside the Writer, from
//     field-level RepoUpdates; meta/counts is rewritten in the same batch as
//     every transition, so counts are never a scan.
//   - The failure aggregates: meta/counts holds the failed repos by
//     error class, host/<host> Failures the failed repos whose final host it
//     is, and hostrank/<^failures><host> indexes the hosts with failures, all
//     written by the Writer in the batch of the transition. host/ is written
//     only through HostUpdates (retry's parking), which cannot set Failures.
//
// # Commit points
//
// Every Writer batch is one synced Pebble batch (pebble.Sync). A failed
// commit is fatal: the writer stops, Err reports it (a full disk is named as
// such, with the data dir), and Submit fails from then on. There is no
// degraded mode. A failure Pebble itself reports as fatal (its logger's
// Fatalf: a WAL or manifest write) is a *FatalError returned by the commit
// that hit it; the store never exits the process, the command does.
//
// # The disk (diskguard.go)
//
// Open installs a Pebble event listener: background errors (failed flushes
// and compactions) are counted by kind (enospc, eio, emfile, other:
// backstream_store_background_errors_total) and logged at ERROR once per
// kind per minute, with how many occurrences it stands for. Failures that
// do not fail a commit leave the writer blocked inside Pebble's write stall, where it
// cannot report anything, so the store records a disk fault itself
// (Store.Faulted, Store.Fault: a *FatalError;
// backstream_store_disk_faults_total) on a write stall longer than
// MaxWriteStall (default 1 min), on a read of one of its files (or an
// open, a stat, a listing of them, a free-space query) outstanding that
// long (readstall.go: Pebble's disk-health checker times writes only), on
// MaxFailedFlushes consecutive failed flushes (default 100), and
// (CheckSpace) when the volume's free space is below the floor
// (Options.MinFree; default the smaller of 1 GiB and 2 %).
// A full disk always says "disk full at <data-dir>: free space and restart"
// (ErrDiskFull): a failed commit, a fault, Open below the floor, and Open on
// a volume that cannot take the WAL replay.
//
// Open takes the LOCK file before Pebble opens: a lock someone holds is
// ErrLocked, recognised by its errno or by Pebble's own error value, never by
// a substring of a message.
//
// # Group commit
//
// The writer takes the first queued unit and keeps adding queued units until
// the queue is empty, MaxBatchRows rows or MaxBatchBytes bytes (defaults
// 16384 rows / 16 MiB, chosen with BenchmarkWriter), or Linger has passed
// (default 0: under load a batch grows by itself while the previous sync
// runs; idle, a lone unit commits at once). With BulkLinger (serve's
// writer: 2 ms) and no Linger, a batch of bulk units (no seq cursor, no
// live row: a bootstrap's or a replacement's chunks, ident/ puts) waits up
// to BulkLinger for more before it commits, so a bootstrap syncs about half
// as often; a live unit ends the wait at once. Submit blocks while the
// queue holds Queue units or QueueBytes of rows (defaults 1,024 and 64
// MiB), the producers' backpressure behind a slow disk.
//
// # Replacement holds (S5)
//
// From the first applied unit of a whole-repo replacement of an account to
// its final unit, the replacement holds the account: a unit of another
// producer that touches it waits, and so does every later unit touching it
// or touching another account of a waiting unit (a unit waits whole). Units
// of other accounts — also the same firehose's — are applied at once. The
// waiting units are applied in arrival order right after the final unit, in
// its batch, so no other row of the account lies between the replacement's
// sync row and its completion. barrier.go is the pure decision; the writer
// goroutine applies what it says.
//
// Seq cursors: a unit applied while an earlier unit carrying the same
// cursor key waits must not let the cursor pass it. The writer writes
// min(highest position applied, oldest waiting position − 1), never
// backwards, and reports it in each Receipt.Cursor. After a crash the relay
// (or the merge walk) therefore replays from that clamped cursor: replayed
// commit and sync rows are dropped by the ratchet, but identity and account
// rows inside the window are archived a second time. A unit that resets
// the cursor (SeqCursor.Reset) starts a new sequence when it arrives, even
// while units carrying the cursor wait: those belong to the old sequence
// and move nothing when applied, and nothing is written for the cursor
// until they and the resetting unit are applied. Until then it stays below
// the oldest of them, in the old sequence; the units of the new sequence
// are applied meanwhile, so the producer never waits for a replacement.
//
// Bounds: the waiting units are capped (HoldBytes in total, HoldAccountBytes
// per account; 64 MiB and 4 MiB by default). A unit that would pass a cap
// does not wait: its rows and repo updates of the accounts it waits for are
// dropped (backstream_archive_hold_dropped_rows_total), each such account
// known to repo/ is marked for another replacement (RefetchSync, due now) in
// the batch that applies the rest of the unit and its cursor, and marked
// again after the current replacement's final unit. Units of a replacement
// are never dropped (their job bounds them). Nor is an account or identity
// row, which no replacement brings back: a unit past a cap carrying one of
// an account it waits for ends the holds it waits for (those of every
// account of a unit waiting with it, transitively; their replacements'
// later units are refused with ErrHoldOverflow), and the waiting units and
// it are applied at once, in arrival order. Another replacement of one of
// those accounts whose first unit waits among them ends the same way (its
// units are refused with ErrHoldOverflow): released first, it would hold
// the account again and keep the row waiting, past the cap.
//
// Expiry: a replacement that sends no unit for HoldTimeout (default 2 min)
// while it holds its account is abandoned on the writer's own timer, even
// when no unit arrives: the expiry is logged at ERROR and counted, the
// waiting units go in arrival order, and the replacement's later units are
// refused with ErrHoldExpired (a stale replacement, so the job is fetched
// again). A unit refused in the middle of a replacement (a producer bug)
// ends it the same way: the waiting units go, its later units are refused.
//
// Close leaves the waiting units unapplied (no receipt); their cursor never
// passed them, so the relay sends them again after a restart.
//
// # Compaction (compact.go)
//
// A create or update row is superseded by a later update or delete of the
// same record, and every record row of an account by a later account row
// with status deleted or takendown (deactivated and suspended supersede
// nothing). A sync row supersedes nothing: a whole-repo replacement is
// archived as the rows that change the account (records.go), and the
// records it leaves unchanged live only in the rows before it. Delete,
// account, identity and sync rows are never removed. The archive writer (not the capture writer) writes, as
// blind Sets in the row's own batch, rec/<did>\x00<collection>\x00<rkey>\x00<seq>
// for every record row (value [0x02][uvarint size of the row's ev/ value]
// for a create, [0x03][size] for an update, [0x01] for a delete) and
// tomb/<did>\x00<seq> for every superseding row. A record's tombstone names
// the create and update rows it supersedes with their sizes
// (compact_supersede.go): the writer resolves them at commit from the
// batch's own entries and one seek in rec/ per update or delete (while the
// index backfill runs it writes them unnamed); a unit may Put neither (nor
// meta/compaction). ValidateEvent refuses a 0x00
// byte in a DID, collection or rkey, so the fields parse back.
//
// Store.Compact, run by one owner, moves the watermark meta/compaction to W
// = max(W, durable tip + 1): a synced compact/intent = W first; then, account
// by account in tomb/ order, the tombstones below W, the rec/ entries they
// supersede (named by the tombstone and deleted blind; an unnamed one's
// looked up in rec/), their ev/ rows (never read: the size is known) and a delete's
// own entry go in one batch per account (small accounts share one), so a
// reader's snapshot never holds half an account's removal; after each batch
// the store's CompactionGeneration moves (a replay reopens its iterator) and
// the removed rows still in the live log are marked Forgotten (a reader
// skips them, still advancing); last, one synced batch sets the watermark
// and deletes the intent. Removal batches are not synced on their own: the
// last batch's sync makes the WAL before it durable, and a crash before it
// leaves the intent, which the next pass rolls forward (removal is
// idempotent). Past CompactOptions.ReclaimBytes removed (64 MiB), a manual
// compaction of the chunks of ev/ the pass removed at least a quarter of
// (CompactOptions.ReclaimShare) lets the disk shrink; rows removed here and
// there are left to Pebble's own compactions. A malformed
// tomb/, rec/, intent or watermark value stops the pass with ErrCompactionState naming the key,
// having guessed nothing; ResetCompactionIntent is the recovery of a bad
// intent or watermark. The cost of a pass follows the tombstones and the rows removed
// (plus the entries of an account a deletion or takedown reset), never ev/'s
// size (BenchmarkCompact). Crash points: compaction-intent,
// compaction-batch, compaction-done.
//
// The index backfill (indexfill.go): a store archived before the writer
// kept rec/ and tomb/ has ev/ rows without entries. meta/index says which
// ([Next, End); Open writes it covered for a new store, End = tip + 1 for
// an older one). Store.FillIndex writes their entries with the writer's
// encoding (appendIndex) in bounded batches, each synced with Next moved,
// so a crash resumes; Compact runs no pass until it is done
// (CompactResult.IndexPending).
//
// # The replay index (replayindex.go)
//
// For every row the archive writer also writes, blind and sorted in the
// row's batch, its account entry xd/<FNV-1a 64 of the DID><seq> and either
// its collection entry xc/<collection>\x00<seq> (create, update, delete) or
// its marker entry xm/<kind><seq> (account, identity, sync); values are
// empty, seqs 8 bytes big-endian, so a range's keys share all but the seq's
// low bytes. The compaction pass deletes a removed row's xd/ and xc/
// entries in the row's batch (deleteReplayIndex). Store.IndexedEvents
// merges ranges (IndexRange: one collection, one account, one marker kind)
// by seq over one index iterator and point-reads each row (or reads it
// from its entry's covering copy, when it is yielded: a range keeps no
// copy of its entry's value), index and rows from one snapshot, bounded
// above: an entry without its row is ErrMalformed. EstimateIndex counts
// ranges exactly up to a limit (then extrapolates from
// EstimateDiskUsage); CollectionsUnder lists the collections under an
// NSID prefix, at most so many and so many bytes of names; CheckReplayIndex compares the index
// with ev/ (tests, the power-loss sweep, the crash matrix);
// IndexDiskUsage measures both indexes' bytes when compacted (make bench).
// A store older
// than the index gets meta/index_replay at Open and Store.FillReplayIndex,
// the backfill's batches with appendReplayIndex, run by the node's
// compaction owner between passes (never alongside one).
//
// Store.AccountRecords (records.go) reads an account's current records from
// the same index, under one snapshot: each record's newest entry unless it
// is a delete or older than a purging account row, its CID from the ev/
// row (a run's rows by one iterator over them). It is what a whole-repo
// replacement is diffed against. Until the
// index backfill is done it answers ErrIndexPending (Store.IndexReady):
// the index lacks the older rows' records, and a diff against part of an
// account would be wrong.
//
// # Not here
//
// Deciding phases is lifecycle's; what rows a repo produces is backfill's and
// firehose's; rendering JSON is subscribe's.
package archive
