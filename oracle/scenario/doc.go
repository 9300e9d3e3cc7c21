// Package scenario holds the oracle's deterministic in-process scenarios:
// rows of the adversity matrix run against the real system — store, archive
// writer, capture and live firehose, bootstrap, merge, the retry runner, and
// the subscribe server with its /healthz and /readyz — built by package node
// exactly as `backstream serve` builds it, against a
// seeded simulated network (package oracle) on 127.0.0.1, and judged by
// package oracle/check: the fold of the archive equals the network's
// current records, seqs strictly increase, per-DID revs never go backwards.
//
// The package has no production code; everything is in its tests.
//
// # Scenarios
//
//   - TestInactiveAndLongCursor: deactivated, takendown and suspended
//     accounts listed at enumeration are never requested (relay and PDS
//     counts stay 0); listRepos cursors longer than 4 KiB are checkpointed
//     and a restart resumes from exactly the durable one.
//   - TestHeldRepoAcrossKill: N−1 durable completions while one getRepo is
//     held open, a kill, a restart: the N−1 are never requested again, the
//     held one is requested once more and completes.
//   - TestRestartSkipsCompleted: a kill at a seeded fraction of
//     completions; after the restart no complete repo is requested again,
//     and a further restart in steady state requests nothing.
//   - TestRetryStoreFailure: the retry runner's replacement batch fails
//     in steady state; the run stops with the error; /healthz and /readyz
//     are asked over HTTP at that moment; a restart converges.
//   - TestSyncWakesRetry: a #sync in steady state is replaced at once
//     although the retry runner's scan period is an hour: the live side
//     effects wake the runner.
//   - TestRetryBackoffFakeClock: the production retry schedule (1 min to
//     24 h) and a 429 host park, on the fake clock. It drives the retry
//     runner alone (no lifecycle, no firehose), inside a synctest bubble.
//
// A kill is a power cut: the store runs on vfs.NewStrictMem, syncs are
// ignored from the kill instant on, the run is stopped, and the filesystem
// is reset to its synced state before the restart. Every scenario ends
// with the fold check and asserts that its fault fired.
//
// # Seeds
//
// Every scenario is a function of its seed: the world (accounts, records,
// hosts, statuses), the fault plan (which accounts hang, fail or are slow,
// thresholds at which a run is stopped, cursor sizes) and the live traffic
// the scenario drives itself (record creates, updates and deletes through
// oracle.Network.Emit). -scenario.seed=N picks the first seed (default 1),
// -scenario.seeds=K runs K consecutive seeds (ignored under -short, which
// runs one). A failing seed logs the exact command that runs it again:
//
//	go test ./oracle/scenario -run '^TestX$' -scenario.seed=N -scenario.seeds=1 -count=1
//
// What the seed does not fix is goroutine scheduling and the bootstrap's
// dispatch shuffle: a scenario asserts properties that hold for every
// interleaving (counts at the PDS, terminal states, the fold), so a seed
// reproduces the same world and plan, and the same verdict.
//
// # Fake clock (testing/synctest)
//
// The scenarios that run the lifecycle talk to the simulated network over
// real loopback sockets, and a goroutine blocked on a socket is not durably
// blocked inside a synctest bubble: the fake clock would never advance
// while connections sit idle. Those scenarios therefore run on the real
// clock, with short backoffs and deadlines chosen by the harness.
//
// The retry scenario with production backoff (TestRetryBackoffFakeClock)
// runs inside a bubble: the retry runner, its backfill jobs, the archive
// writer and a Pebble store on vfs.NewMem live in the bubble, on the fake
// clock, so a repo failing for hours under the production schedule (1 min
// doubling to a 24 h ceiling) converges in milliseconds. Their getRepo
// calls leave the bubble through a bridge (a RepoSource whose requests a
// goroutine outside the bubble performs with a real upstream.Client over
// loopback, while the caller waits on channels created outside the bubble):
// the fake clock stands still during network I/O and only moves while the
// bubble is idle — a backoff sleep, a retry pass waiting for its next scan.
//
// # Must not
//
// Edit production behaviour, import cmd/backstream, or leave a goroutine
// or listener running after a test.
package scenario
