// Package world owns a seeded, deterministic simulated atproto network:
// accounts with did:plc DIDs, handles, K256 signing keys and real signed
// repositories (indigo atproto/repo + atproto/repo/mst), and a traffic
// generator that mutates the world and returns the matching firehose event
// bodies (#commit, #sync, #identity, #account).
//
// It is test infrastructure. Production packages never import it; tests and
// the oracle network package (which serves it over HTTP and websocket) do.
// It does no I/O and starts no long-lived goroutines (Build fans out over
// GOMAXPROCS workers and waits for them).
//
// # What derives from the seed
//
// Config.Seed fixes DIDs, keys, handles, hosts, build-time statuses, repo
// sizes and every record (CIDs included: record keys and createdAt come from
// a logical per-account clock). Commit revs come from a per-account
// syntax.TIDClock on the wall clock (so relays accept them) and signatures
// are randomized, so commit CIDs differ between builds. Traffic choices and
// contents derive from the traffic seed and the world's state.
//
// # Invariants kept
//
//   - Every repo is complete and canonical: its CAR (RepoCAR) loads with
//     repo.LoadRepoFromCAR, IsPartial is false, the MST root equals the root
//     rebuilt from Records, and the commit is signed by the account's
//     #atproto key (Account.PublicKeyMultibase).
//   - Per account, revs strictly increase across #commit and #sync events
//     (an InvalidRevCommit's rev is not a TID at all; an InvalidPathCommit's
//     is a TID between the previous and the next valid rev).
//   - A #commit carries Since = previous rev and PrevData = previous
//     commit.data, and its Blocks (commit, dirty and proof MST nodes, new
//     records) pass repo.VerifyCommitMessage including inversion.
//   - Inactive accounts get no commits or resets; a deleted account never
//     comes back and gets no further events (mutators return
//     ErrAccountDeleted).
//   - RepoCAR and Records always reflect the state after the latest event a
//     mutator returned (each account has one mutex held across a whole
//     mutation or read).
//   - Folding the events from the Build snapshot (apply ops; #sync replaces
//     the record set with the new getRepo; deletion clears it) gives exactly
//     Records for every account (D7 in INVARIANTS.md, at the source).
//     Events with Invalid set are excluded: InvalidRevCommit and
//     InvalidPathCommit build a one-off #commit (signed by the account's
//     key, Since/PrevData naming the current state, inverting correctly)
//     on a copy of the MST and a scratch block store and never apply it;
//     the account's tree, blocks, head, rev, records and logical clock are
//     untouched, so its next valid commit chains from the last valid one
//     (its TID rev clock may have advanced, which keeps revs increasing).
//     RetryValidOps re-commits a one-off commit's valid creates as a normal
//     commit, so a consumer dropping only invalid ops agrees too.
//
// # Tricky bits
//
// WriteDiffBlocks writes only dirty MST nodes, including the neighbours
// Insert/Remove marked dirty as inversion proofs; the block store records
// those puts, which become the #commit's MST blocks. indigo's mst leaves an
// emptied root at the removed key's height; a later insert of a lower key
// would then build a non-canonical tree, so commit() resets an empty root
// to height 0 (an empty node encodes the same at every height). CARs are
// built lazily on the first RepoCAR after a change and cached; unreachable
// blocks are dropped at export once they outnumber live ones by half.
//
// # Not here
//
// Serving (HTTP, websocket, seqs, faults) lives in package oracle; hostile
// getRepo CARs are built there too, re-signed with SigningKey.
package world
