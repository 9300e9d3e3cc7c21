// Package node owns the one wiring of a running backstream: it opens the
// store (checking the relay it follows), starts the archive writer, builds
// the upstream client, the backfill jobs of bootstrap and of the retry
// runner, the retry runner itself (woken by live #account/#sync side
// effects), the subscribe server, and hands them to the lifecycle, which
// runs the phases. `backstream serve` and every test harness that runs the
// whole system build it here, varying only Config (the store's filesystem
// and commit hook, URLs, sizes and schedules), so what the tests exercise is
// what ships.
//
// Compaction: the node owns the one goroutine that runs the archive's
// compaction passes (compaction.go): every CompactionInterval, early when
// CompactionTombstones tombstones are pending, at startup when an
// interrupted pass left its intent (in the background: startup never waits
// for it), and at the end of merging, just before steady_state is
// committed (lifecycle's BeforeCleanup). A malformed compaction state halts
// compaction for the run (one ERROR line with the recovery that repairs
// the key it names, HaltRecovery: `backstream compaction reset`, with
// --reindex for the compaction index, a checkpoint for an ev/ row;
// backstream_compaction_halted; /status's halt_reason and halt_recovery)
// while ingest and serving go on; a store error in a pass stops the process
// like every persistence error. Its figures are /status's compaction
// section (Compaction) and the backstream_compaction_* metrics. On a store
// archived before the compaction index, the same goroutine first runs the
// index backfill (archive's FillIndex) to its end, before any pass (the
// merging pass waits for it): /status's index_backfill, the gauge
// backstream_compaction_index_backfill_remaining_seqs, a log line at its
// start and one at its end. On a store archived before the replay index it
// runs the replay index backfill (archive's FillReplayIndex) beside the
// passes, ReplayFillSlice of each check tick (after the tick's pass, when
// one is due, so passes due at every tick cannot starve it), so ingest
// keeps its rate:
// /status's replay_index_backfill, the gauge
// backstream_replay_index_backfill_remaining_seqs; filtered replays scan
// until it ends.
//
// Identities: with Config.PLCExport (and Verify), bootstrap's Preload is
// the read of the PLC directory's export into the resolver
// (ident.ReadExport), from cursor/plcexport, which is submitted after each
// page's ident/ rows; a directory that does not answer it is logged once
// and each DID resolves on its own.
//
// Lifetime: New opens and builds everything but runs nothing; Run drives the
// lifecycle until its context ends or something fatal happens (the
// lifecycle's error, the writer stopping on a persistence error, or a disk
// fault of the store: a write stall past its bound, failed flushes, or the
// volume below the free-space floor, which Run reads every few seconds: the
// probes fail at once, and the components get a grace period to stop on
// their own before they are cancelled; on a full disk or a disk fault Run
// keeps the probes at 503 for a second before it returns); Close releases
// everything in order (subscribers, writer, client, store). A stop waits
// for a compaction pass to end, which it does between accounts or, in its
// reclaim, when Pebble's compaction of the removed ranges does (no ctx
// interrupts it; past the grace period Run says what it waits for), so
// nothing of the pass outlives Close; only after a disk fault or the
// writer's failure does it wait for the pass at most the grace period. After a disk
// fault the writer may be blocked inside a store commit for good: Close
// waits for it at most the grace period, then says so and leaves it and the
// store to the process exit (everything synced is in the WAL). A node runs
// once: a restart is a new node over the same data directory.
//
// Not here: flags, signals, the HTTP listener, /metrics and the status
// report are the command's (cmd/backstream); each component's behaviour is
// its own package's.
package node
