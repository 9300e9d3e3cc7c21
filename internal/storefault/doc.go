// Package storefault owns the storage fault injectors that the tests of
// archive, merge, retry, lifecycle and the oracle scenarios use to fail the
// store on purpose. Nothing in production imports it (`go list -deps
// ./cmd/backstream` does not list it); it depends on Pebble only, so
// package archive's own tests can use it too.
//
// # What it provides
//
//   - Write path: CommitFault (FailNthCommit) fails the n-th synced batch
//     holding a key with a given prefix, once or from then on (Sticky), with
//     ErrInjected or a chosen error (WithError(syscall.ENOSPC)). Its Check
//     method is archive.Options.CommitHook. It sits above Pebble because
//     Pebble v1.1.5 hands a failed WAL write to the waiting commit and then
//     panics on the next one: a write fault injected below Pebble cannot be
//     survived in a running process, and the question under test is what
//     backstream does with the error, which the hook answers for any key.
//   - Read path: ReadFault is a vfs/errorfs injector failing sstable data
//     reads (every file, chosen files, from the n-th read on, or only the
//     n-th). The n-th counts only the reads of the operation under test:
//     reads on goroutines Pebble started (table stats, flushes, compactions)
//     are left alone, so a sweep's n is the same read in every run.
//     IsolateKey rewrites one key into an sstable of its own, so that
//     failing that file's reads fails exactly the reads of that key.
//   - A disk that stops answering: Hold wraps a filesystem so that the
//     calls a match selects (TableReads, TableOpens, Writes under a prefix,
//     or any) block, with no error and no end, until Release; it counts
//     them (Holds). The read-stall and write-stall tests of archive, node
//     and the commands use it.
//   - Held tables: HeldTables counts the sstables compaction removed that
//     open iterators still keep on disk (Pebble's zombie tables), and
//     WaitReleased waits for them to go. The tests of the readers that
//     reopen their iterator on a clock (the merge walk, the NATS sink)
//     compact under it and read both.
//
// # Invariants kept here
//
//   - Every injector counts what it fired (Fired, Seen, Reads), so a test
//     can prove its fault happened: no vacuous pass.
//   - Writes are never touched by ReadFault; a CommitFault's failed batch is
//     not applied (the store's hook runs before the commit).
//
// # Not here
//
// Physical write faults and power loss are Pebble's own wrappers
// (errorfs.Wrap, vfs.NewStrictMem), used directly by the tests.
package storefault
