// Command system is the system benchmark behind `make bench`
// (scripts/bench.sh): the built backstream binary runs as `backstream
// devnet` (the simulated network) and `backstream serve`, separate
// processes, and every number is that of the serve process alone (CPU from
// /proc/<pid>/stat utime+stime, peak RSS from VmHWM). It prints one table,
// each row with its target and met/missed, and writes the runs, their
// medians and the table as JSON to -out/<date>.json.
//
// Three parts (-parts), each run -runs times; the table shows medians and
// the runs' range:
//
//   - bootstrap (bootstrap.go), per shape (accounts × mean records): a devnet
//     with live traffic at -rate, serve on a fresh data dir; bootstrap
//     records per CPU-second (durable backfill records at
//     backfill_completed_at over serve's CPU-seconds until then),
//     records/s and repos/s over backfill_started_at →
//     backfill_completed_at, peak RSS at steady_state; then serve is
//     stopped, the store flushed and fully compacted offline, and its bytes
//     on disk divided by the archived events (tip seq), all of them and
//     with the compaction and replay indexes apart
//     (archive.Store.IndexDiskUsage).
//   - ingest (steady.go): live ingest at saturation of a -preload event
//     history, then replay of the archive to one subscriber from cursor 0.
//   - fanout (steady.go): -subscribers live subscribers without filters at
//     -live-rate network events per second: CPU-µs per delivered event, net
//     of serve's idle CPU at the same traffic, and p50/p99 of
//     backstream_live_delivery_seconds.
//
// -pprof DIR writes CPU profiles of serve taken during the first run of the
// live ingest (its first 5 s), the replay and the fan-out window.
//
// The machine is shared and noisy: medians of runs and CPU-seconds, not
// single wall times.
//
// # Rules it keeps
//
//   - Rows are numbers of the serve process alone: its /proc CPU and RSS,
//     its /status and /metrics. The network's CPU is shown only as a note
//     (to tell when the relay, not serve, was the limit).
//   - It changes no backstream package and no production behaviour. It
//     opens stopped stores with package archive twice: to flush and compact
//     one before measuring its size, and to rewrite cursor/relay for the
//     ingest part (steady.go says why that measures the live path).
//   - Every child process is stopped (SIGTERM, then SIGKILL after a grace;
//     SIGKILL at once on a failure) before the function that started it
//     returns; temporary data dirs are removed.
//   - A run that cannot measure what its row claims fails loudly instead of
//     reporting a number: a bootstrap that archived live events before the
//     ingest rewrite, a history read before the first sample, a window
//     with no delivery. Subscribers that serve disconnects during a window
//     are counted and named in the row's note.
package main
