package firehose

// verify.go owns the live checks of a #commit or #sync against the
// account's DID document (Config.Identity, package ident): the commit
// decoded from the frame's blocks must name the frame's DID and rev, a
// #commit's ops must match its MST and invert to its prevData (sync 1.1),
// and the commit's signature must verify with the account's key (one
// re-resolution on a mismatch, for a rotated key). An #identity frame drops
// the account's cached document and has the handle it names verified both
// ways; strict mode archives the verdict (the handle or handle.invalid).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/upstream"
)

// errNotInverting: a #commit's ops do not match its MST or do not invert to
// its prevData, or its commit block does not name the frame's DID and rev.
var errNotInverting = errors.New("commit does not match its message (sync 1.1)")

// verdict is the outcome of checking one frame (check), before the mode
// and the counters apply (judge).
type verdict struct {
	did     string
	outcome string // "" when not checked
	// uninverted: a #commit that passed but whose ops were not inverted
	// (signed.uninverted): archived, its account's replacement scheduled.
	uninverted bool
	// err: ctx ended or the identity store could not be read; the frame is
	// then not accepted.
	err error
}

// verify checks f and returns the failed outcome ("" when it passed or was
// not checked). An error is returned only when ctx ended or the identity
// store could not be read: the frame is then not accepted.
func (c *Consumer) verify(ctx context.Context, f *upstream.Frame) (string, error) {
	v := c.check(ctx, f, nil, c.cfg.Identity.Now())
	return c.judge(&v)
}

// check verifies f against its account's document; an #identity frame
// drops the cached document. It reads no consumer state and writes only
// the resolver's cache, so frames of different accounts may be checked
// concurrently (pipeline.go); one account's frames are checked in order,
// an #identity before the commits that follow it. The CPU-bound part of a
// #commit's or #sync's check runs holding a slot of g (nil: no bound);
// waiting for the network (a DID resolution, a handle check) does not.
//
// seen is when the frame was taken up (handed to its lane, or checked
// inline), on the resolver's clock: a document resolved from the network
// since, by this check, the look-ahead or another frame's, counts as fresh
// (a failed check would resolve the same document again).
func (c *Consumer) check(ctx context.Context, f *upstream.Frame, g gate, seen time.Time) verdict {
	id := c.cfg.Identity
	if id.Mode() == ident.ModeOff {
		return verdict{}
	}
	if f.Identity != nil {
		if !upstream.ValidDID(f.Identity.Did) {
			return verdict{} // Rows drops the whole event
		}
		return verdict{err: c.checkIdentity(ctx, f.Identity)}
	}
	var did, rev string
	var message func() (signed, error)
	switch {
	case f.Commit != nil && validIDs(f.Commit.Repo, f.Commit.Rev):
		did, rev = f.Commit.Repo, f.Commit.Rev
		message = func() (signed, error) { return checkCommitMessage(f.Commit) }
	case f.Sync != nil && validIDs(f.Sync.Did, f.Sync.Rev):
		did, rev = f.Sync.Did, f.Sync.Rev
		message = func() (signed, error) { return checkSyncMessage(ctx, f.Sync) }
	default:
		return verdict{} // nothing to check, or Rows drops the whole event
	}
	if ident.RevAhead(rev, seen) {
		return verdict{did: did, outcome: ident.OutcomeRev} // refused by its rev alone, before any signature work
	}
	if err := g.enter(ctx); err != nil {
		return verdict{err: fmt.Errorf("firehose: verify: %w", err)}
	}
	s, err := guarded(message)
	if err == nil {
		err = c.verifySignature(ctx, did, s, g, seen)
	} else {
		g.leave()
	}
	v := verdict{did: did, outcome: ident.OutcomeOK}
	switch {
	case err == nil:
		v.uninverted = s.uninverted
	case errors.Is(err, errNotInverting):
		v.outcome = ident.OutcomeInversion
	case ident.Class(err) != "":
		v.outcome = ident.Class(err)
	case ctx.Err() != nil:
		v.err = fmt.Errorf("firehose: verify: %w", ctx.Err())
	default:
		v.err = fmt.Errorf("firehose: verify %s: %w", did, err)
	}
	return v
}

// verifySignature checks s's signature with did's key and leaves g, which
// the caller holds. The common case, the document in memory and the
// signature good, is decided holding g; a lookup that waits for the
// directory and a failed check (ident.Resolver.Verify: re-resolved once,
// for a rotated key) run after leaving it, so a check waiting for the
// network holds no verifier slot.
func (c *Consumer) verifySignature(ctx context.Context, did string, s signed, g gate, seen time.Time) error {
	id := c.cfg.Identity
	var info *ident.Info
	var err error
	known := id.Known(did)
	if known {
		info, _, err = id.Lookup(ctx, did) // memory only: does not wait
		if err == nil && s.verifiedBy(info.Key) {
			g.leave()
			return nil
		}
	}
	g.leave()
	if err != nil {
		return err
	}
	if !known {
		if info, _, err = id.Lookup(ctx, did); err != nil {
			return err
		}
	}
	// Fresh: resolved from the network since the frame was seen, by this
	// lookup, the look-ahead or another frame's check.
	_, err = id.Verify(ctx, info, info.ResolvedSince(seen), s.commit)
	return err
}

// judge counts a checked frame's outcome and applies the mode: the failed
// outcome a strict consumer drops the frame's rows for ("" otherwise).
func (c *Consumer) judge(v *verdict) (string, error) {
	if v.err != nil {
		return "", v.err
	}
	if v.outcome == "" {
		return "", nil
	}
	id := c.cfg.Identity
	id.Verified(ident.PathLive, v.outcome, v.did)
	if v.outcome == ident.OutcomeOK || id.Mode() == ident.ModeWarn {
		return "", nil
	}
	return v.outcome, nil
}

// checkIdentity refreshes an #identity frame's account and verifies the
// handle it names (ident.Resolver.CheckIdentity); in strict mode the frame
// then carries the verdict (the handle, or handle.invalid), in warn mode
// the handle as sent.
func (c *Consumer) checkIdentity(ctx context.Context, b *comatproto.SyncSubscribeRepos_Identity) error {
	var handle string
	if b.Handle != nil {
		handle = *b.Handle
	}
	verdict, _, err := c.cfg.Identity.CheckIdentity(ctx, b.Did, handle)
	if err != nil {
		return fmt.Errorf("firehose: identity of %s: %w", b.Did, err)
	}
	if handle != "" && c.cfg.Identity.Mode() == ident.ModeStrict {
		b.Handle = &verdict
	}
	return nil
}

// guarded runs a check of hostile blocks through indigo's repo and MST
// code, turning a panic into errNotInverting: as in DecodeFrame and
// CommitOps, hostile input never panics the process (the fuzz target calls
// the checks directly, without this belt).
func guarded(check func() (signed, error)) (s signed, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = signed{}, fmt.Errorf("%w: panic: %v", errNotInverting, r)
		}
	}()
	return check()
}

// validIDs: the frame's DID and rev are valid (otherwise Rows drops it
// whole: there is nothing to verify and nothing forged to replace).
func validIDs(did, rev string) bool { return upstream.ValidDID(did) && upstream.ValidTID(rev) }

// checkCommitMessage reads a #commit's blocks (hash-checked, rooted at the
// commit: upstream.ReadCommitBlocks) and checks them against the message:
// the commit names the message's DID and rev, every create/update op's CID
// is the MST's value at its path and its record block is present, no
// delete op's path holds a value in the partial MST, and —
// when every update and delete carries its prev and prevData is present
// (sync 1.1) — the ops inverted on the partial MST give prevData. It
// returns the commit for the signature check. indigo's
// repo.VerifyCommitMessage does the same, bar the delete check, but logs
// per event through slog.Default, and reads the CAR through go-car
// (slower).
func checkCommitMessage(m *comatproto.SyncSubscribeRepos_Commit) (signed, error) {
	bs, err := upstream.ReadCommitBlocks(m.Blocks, cid.Cid(m.Commit))
	if err != nil {
		return signed{}, fmt.Errorf("%w: blocks: %w", errNotInverting, err)
	}
	s, err := decodeCommit(&bs, cid.Cid(m.Commit))
	if err != nil {
		return signed{}, err
	}
	commit := s.commit
	if commit.DID != m.Repo || commit.Rev != m.Rev {
		return signed{}, fmt.Errorf("%w: commit names %s rev %s", errNotInverting, commit.DID, commit.Rev)
	}
	tree, err := loadTree(&bs, commit.Data)
	if err != nil {
		return signed{}, fmt.Errorf("%w: MST: %w", errNotInverting, err)
	}
	ops := make([]repo.Operation, 0, len(m.Ops))
	invertible := m.PrevData != nil
	for _, rop := range m.Ops {
		if rop == nil {
			return signed{}, fmt.Errorf("%w: null op", errNotInverting)
		}
		op := repoOp(rop)
		switch rop.Action {
		case "create", "update":
			if op.Value == nil {
				return signed{}, fmt.Errorf("%w: %s %s without cid", errNotInverting, rop.Action, rop.Path)
			}
			if !validRepoPath(rop.Path) {
				continue // the op is dropped by Rows; its MST value is not checked
			}
			val, err := tree.Get([]byte(rop.Path))
			if _, ok := bs.Get(*op.Value); err != nil || val == nil || *val != *op.Value || !ok {
				return signed{}, fmt.Errorf("%w: %s %s does not match the MST", errNotInverting, rop.Action, rop.Path)
			}
		case "delete":
			// Ops are not signed and a legacy delete (no prev) turns the
			// inversion off: a delete of a record the commit's own tree
			// holds is a lie whether or not the commit is inverted. A
			// path whose node is not among the blocks proves nothing.
			if val, err := tree.Get([]byte(rop.Path)); err == nil && val != nil {
				return signed{}, fmt.Errorf("%w: delete %s: the MST holds it", errNotInverting, rop.Path)
			}
		}
		if rop.Action != "create" && op.Prev == nil {
			invertible = false // a legacy op: nothing to invert against
		}
		ops = append(ops, op)
	}
	if !invertible {
		s.uninverted = true
		return s, nil
	}
	ops, err = repo.NormalizeOps(ops)
	if err != nil {
		return signed{}, fmt.Errorf("%w: %w", errNotInverting, err)
	}
	for i := range ops { // the tree is this check's own: inverted in place
		if err := repo.InvertOp(tree, &ops[i]); err != nil {
			return signed{}, fmt.Errorf("%w: invert %s: %w", errNotInverting, ops[i].Path, err)
		}
	}
	root, err := rootCID(tree)
	if err != nil {
		return signed{}, fmt.Errorf("%w: %w", errNotInverting, err)
	}
	if root != cid.Cid(*m.PrevData) {
		return signed{}, fmt.Errorf("%w: ops invert to %s, prevData is %s", errNotInverting, root, cid.Cid(*m.PrevData))
	}
	return s, nil
}

// repoOp is a message's op as indigo's inversion takes it.
func repoOp(rop *comatproto.SyncSubscribeRepos_RepoOp) repo.Operation {
	op := repo.Operation{Path: rop.Path}
	if rop.Cid != nil {
		v := cid.Cid(*rop.Cid)
		op.Value = &v
	}
	if rop.Prev != nil {
		p := cid.Cid(*rop.Prev)
		op.Prev = &p
	}
	return op
}

// validRepoPath: path is collection/rkey, both valid (syntax.ParseRepoPath's
// rule, without its regexps).
func validRepoPath(path string) bool {
	coll, rkey, ok := strings.Cut(path, "/")
	return ok && upstream.ValidNSID(coll) && upstream.ValidRecordKey(rkey)
}

// decodeCommit decodes and checks the structure of the commit block c:
// by decodeSignedCommit when the block is in its canonical form (the
// unsigned bytes then cut from it), by cbor-gen otherwise.
func decodeCommit(bs *upstream.CommitBlocks, c cid.Cid) (signed, error) {
	data, ok := bs.Get(c)
	if !ok {
		return signed{}, fmt.Errorf("%w: no commit block", errNotInverting)
	}
	s, ok := decodeSignedCommit(data)
	if !ok {
		s = signed{commit: new(repo.Commit)}
		if err := s.commit.UnmarshalCBOR(bytes.NewReader(data)); err != nil {
			return signed{}, fmt.Errorf("%w: commit block: %w", errNotInverting, err)
		}
	}
	if err := s.commit.VerifyStructure(); err != nil {
		return signed{}, fmt.Errorf("%w: commit block: %w", errNotInverting, err)
	}
	return s, nil
}

// checkSyncMessage decodes a #sync's commit and checks it names the
// message's DID and rev.
func checkSyncMessage(ctx context.Context, m *comatproto.SyncSubscribeRepos_Sync) (signed, error) {
	commit, _, err := repo.LoadCommitFromCAR(ctx, bytes.NewReader(m.Blocks))
	if err != nil {
		return signed{}, fmt.Errorf("%w: blocks: %w", errNotInverting, err)
	}
	if commit.DID != m.Did || commit.Rev != m.Rev {
		return signed{}, fmt.Errorf("%w: commit names %s rev %s", errNotInverting, commit.DID, commit.Rev)
	}
	return signed{commit: commit}, nil
}

// markCaptured, in capture mode, submits the replacement mark of a frame
// that failed verification, or of a #commit archived without being
// inverted, to Config.MarkWriter, the archive writer: the account's
// snapshot may predate the dropped commit, or hold a record the commit
// deleted in an op a relay left out. A job that completes after the mark
// keeps it (backfill keeps a mark newer than its start), so the
// replacement follows in steady state.
func (c *Consumer) markCaptured(ctx context.Context, f *upstream.Frame, v *verdict, failed string) error {
	did := f.DID()
	if c.cfg.Mode != ModeCapture || c.cfg.MarkWriter == nil || !upstream.ValidDID(did) {
		return nil
	}
	var up archive.RepoUpdate
	switch {
	case failed != "":
		up = unverifiedEffect(did, c.cfg.Now().UnixMicro())
	case v.uninverted:
		up = c.uninvertedEffect(did)
	default:
		return nil
	}
	u := &archive.Unit{Repos: []archive.RepoUpdate{up}}
	if err := c.mark(ctx, u); err != nil {
		return fmt.Errorf("firehose: mark %s for a replacement: %w", did, err)
	}
	return nil
}

// uninvertedEffect schedules a whole-repo replacement of a known, active,
// complete account after one of its #commits was archived without the
// sync 1.1 inversion. Ops are not signed: a relay can leave a delete op out
// of a commit and strip prevData (or a prev), as legacy commits carry none,
// and the commit's tree alone cannot show the missing op; the archive
// would keep the record for ever. Refusing such commits would drop every
// commit of an account whose PDS still sends legacy commits, so the commit
// is archived and the replacement's difference deletes what the repo no
// longer holds. The replacement is due now, or Config.UninvertedInterval
// after the account's last completed snapshot if that is later: an
// account whose every commit is legacy costs one download an interval. An
// account already marked keeps its reason, and a due time not yet passed
// (the replacement it schedules starts after this commit); a mark already
// due is made due again by the same rule, from now at the earliest: its
// replacement may be running, from a snapshot taken before this commit
// that the commit does not make stale when it carries no row (its only op
// the hidden delete), and a job keeps only a mark due after its start.
// The interval counts from the last completed snapshot, so an account
// committing during each of its replacements is not downloaded without
// end: at most one more download follows a replacement the interval did
// not space from the one before. One not complete is being fetched, or
// will be.
func (c *Consumer) uninvertedEffect(did string) archive.RepoUpdate {
	nowUS, everyUS := c.cfg.Now().UnixMicro(), c.cfg.UninvertedInterval.Microseconds()
	return archive.RepoUpdate{DID: did, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		if !exists || !cur.Active || cur.Status != archive.StatusComplete {
			return cur, false
		}
		next := cur
		switch {
		case cur.Refetch == archive.RefetchNone:
			next.Refetch = archive.RefetchUninverted
		case cur.NextAttemptUS >= nowUS:
			return cur, false
		}
		next.NextAttemptUS = max(nowUS, cur.CompletedUS+everyUS)
		return next, true
	}}
}

// unverifiedEffect marks a known, active account due for a whole-repo
// replacement after one of its live frames failed verification.
func unverifiedEffect(did string, nowUS int64) archive.RepoUpdate {
	return archive.RepoUpdate{DID: did, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		return dueEffect(cur, exists, nowUS, archive.RefetchUnverified)
	}}
}
