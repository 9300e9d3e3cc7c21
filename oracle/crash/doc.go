// Package crash owns the process-level crash harness: it builds the real
// `backstream` binary once per test binary (with -tags crashpoint: only such
// a build has crash points), runs `backstream serve` as a
// child process against the simulated network of package oracle (started
// in-process by the test), kills it with SIGKILL — at a named crash point
// (BACKSTREAM_CRASHPOINT=name[:n], package internal/crashpoint) or at a
// random moment drawn from a seeded RNG — restarts it on the same data dir,
// several times in a chain, and checks the end state against the network's
// ground truth.
//
// What a chain proves (the invariants of docs/invariants.md D1,
// D3, D7, R7, M1, C3, C4, M4, M5, M7):
//   - fold(archive) per DID equals the network's current records for every
//     active account (and nothing for deleted ones), via oracle/check;
//   - per-DID revs never go backwards and archive seqs strictly increase
//     (oracle/check.Archive);
//   - no repo durably complete before a kill is downloaded again while the
//     next run is still in bootstrap: the simulated PDS hosts count getRepo
//     per DID, redirected by the relay or asked directly (RepoCount.Requests
//     of oracle.Network.RepoCounts), read after each kill and while a run
//     reports phase=bootstrap;
//   - nothing a websocket subscriber received before a kill is missing or
//     changed afterwards: a Subscriber stays connected across the chain,
//     reconnecting with its last cursor (inclusive, so the event it last
//     held is sent again and compared), and at the end its every message is
//     compared byte for byte with a fresh read of the archive from cursor 0,
//     with no cursor missing inside the range it followed; a held event
//     may be missing only when compaction explains it (a row below the
//     watermark supersedes it: CompareHeldCompacted).
//
// The end state is judged only once a clean run has converged: steady
// state, traffic ended, the relay cursor at the relay's last seq, and the
// retry runner idle by serve's /metrics (RetryIdle: no repo due, queued or
// being replaced, no host parked), all held for the settle time. A
// replacement still waiting for its host is not converged: judged then,
// the archive would lack an account serve is still fetching.
//
// The compaction tests (compaction_process_test.go) kill at the pass's
// crash points and compare the surviving rows with oracle/check's
// recomputation, search the raw values of a stopped process's store for the
// bytes of every record the network no longer has, and replay from cursor
// 0 through passes.
//
// The upgrade test (upgrade_process_test.go) builds older commits of this
// repository from its git history (BuildCommit, a release build each, in
// the test's temp dir) and runs each, then the current binary, on one data
// dir, with the end-state checks of a chain.
//
// The soak (soak_process_test.go) kills nothing: it runs one serve under
// every kind of churn at once and compares its resources (goroutines,
// descriptors, heap, metric series, data dir growth per event) between two
// halves of the run, each ended by a quota of churn, and its bounded
// gauges with their bounds at every sample.
//
// Every kill asserts that it fired: a crash-point run must end by SIGKILL
// (the crash point's exit status), and a random kill must land on a live
// process before convergence (while traffic is still being generated). A
// scenario whose fault never fired fails instead of passing vacuously.
//
// Random moments are drawn from a seeded math/rand/v2 PCG: the seed fixes the
// world, the traffic and the kill schedule (delays, archive-tip targets); the
// machine's timing decides where exactly the kill lands, so a seed replays
// the same schedule, not the same instant. A failing chain logs its seed and
// the `go test ... -crash.seed=N` command that replays it.
//
// Invariants of the harness itself: every child process is killed and
// reaped by the test's cleanup; every goroutine it starts (a Subscriber's
// reader, the traffic driver) is owned and stopped by Close/Stop, which
// wait. The built binary is the one package-level cache (sync.Once), removed
// by Main when a test binary uses it from TestMain.
//
// It must not be imported by production packages (tests only); it never
// writes a store (it opens data dirs read-only, and only when no process
// holds them); it never edits the simulated world except through
// oracle.Network.Emit (the Traffic driver). The network itself, its faults
// and per-DID counters live in package oracle; the fold and comparison
// rules in oracle/check; crash point names in internal/crashpoint.
package crash
