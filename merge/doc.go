// Package merge owns the merging phase: folding the firehose captured during
// bootstrap (cap/) into the archive (ev/), then — driven by lifecycle — the
// pending pass, post-bootstrap discovery and the cleanup that ends the phase.
//
// # The walker (walker.go)
//
// Walk reads cap/ from cursor/merge (absent = from the start) and submits the
// captured rows to the archive writer as SourceMerge rows, with the same repo
// side effects a live row has (firehose.Effects; M8), and cursor/merge set to
// the last captured seq of each unit in the same unit (M4): a restart resumes
// exactly after the last durable unit, with no duplicate and no gap.
//
// Keeping or dropping a row is the writer's per-account rev ratchet (M3): a
// captured commit or sync row is kept exactly when its rev is newer than
// rev/<did> — for a complete repo, newer than its snapshot — and identity
// and account rows always pass.
//
// Tricky bit: the ratchet lets the other ops of a commit through only when
// they arrive in the same unit as the first one (they share its rev). The
// walker therefore never splits the rows of one upstream event (one
// UpstreamSeq) across two units.
//
// # Commit points
//
// Each walker unit (rows + cursor/merge) is one synced batch, followed by
// crash point merge-batch. Cleanup (Cleanup) is one synced batch: range
// delete of cap/, delete of cursor/merge and the listRepos cursors, and
// phase=steady_state (M7, C4), followed by crash point steady-committed.
//
// # Not here
//
// Which rows a frame produces is firehose's; fetching repos is backfill's and
// retry's; deciding when to merge is lifecycle's.
package merge
