// Package lifecycle owns the phase state machine: bootstrap → merging →
// steady_state, the relay check at startup, and starting and stopping the
// components each phase runs. It only sequences: each step's work lives in
// the package that owns it (bootstrap, merge, firehose, retry), and each
// phase transition is one function there (bootstrap.EnterMerging,
// merge.Cleanup).
//
// Its decisions are pure (machine.go: Next, DecideRelay): from facts — the
// persisted phase and what this process run has done — to the next action.
// The runner (runner.go) performs actions and turns their outcomes into
// facts; it holds no per-repo logic. Every restart case is therefore a row
// of a table test, without Pebble or a network.
//
// # Invariants kept here
//
//   - C2/C5: the phase is read fail-closed (archive.Open's guard); an
//     unknown phase is an error, never a default.
//   - C3: phase=merging with both backfill timestamps is one synced batch,
//     committed while capture still runs; capture stops only after it.
//   - C4: steady_state is entered only by the cleanup batch, after the walk,
//     the pending pass, discovery and the caller's BeforeCleanup step (the
//     node's compaction pass, so the first archive served is compacted).
//   - C6: a --relay other than the one the store follows is refused unless
//     --reset-relay-cursor is given (DecideRelay). So is a store whose
//     position is lost: past bootstrap without cursor/relay, or written to
//     without meta/relay; with the flag it follows the relay's live tip and
//     the gap is logged at ERROR.
//   - M1: bootstrap dispatches no getRepo until capture's start cursor is
//     durable, or upstream stayed silent for the capture start wait (30 s);
//     that silence is recorded (meta/relay_silent_at), so a later start
//     tells a cursor never made from a lost one. Until a consumer has a
//     position, a time after that without a connection to the relay (its
//     firehose refused or dropped, a restart, capture's end owing one) is
//     a hole: recorded as one no_cursor gap with the first frame accepted,
//     which the repair pass heals. A connection open from before the
//     downloads covers them while it lasts (a relay reachable but silent
//     loses nothing).
//
// # Commit points and crash points
//
// See docs/crashpoints.md: each named commit point is followed by a crash
// point (internal/crashpoint) that tests use to kill the process there.
package lifecycle
