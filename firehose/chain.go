package firehose

// chain.go owns capture mode's chain check: each account's last captured
// commit rev, so a captured commit whose since is newer shows a commit the
// stream lost in between. Merging cannot see that hole (captured rows keep
// no since, and the later commit moves the ratchet to the account's head,
// where a repair pass's rev comparison finds nothing), so the account is
// marked for a replacement here, as a frame that failed verification is.

import (
	"context"
	"fmt"
	"hash/maphash"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
	"github.com/bluesky-social/indigo/atproto/syntax"
)

// DefaultChainAccounts bounds the accounts whose last captured rev capture
// mode remembers (a 64-bit DID hash and the rev's 64-bit TID value: about
// 20 bytes each, 40 MiB in all). Once full, accounts not yet remembered
// are not checked (counted: chain_untracked).
const DefaultChainAccounts = 1 << 21

// capturedChain maps a DID's 64-bit hash to its last captured rev (the
// TID's integer value, ordered as the TID strings are).
type capturedChain struct {
	seed    maphash.Seed
	revs    map[uint64]uint64
	max     int
	startUS int64 // when this capture began (unix µs)
	filled  bool  // the map reached max (said once)
}

func newCapturedChain(max int, start time.Time) *capturedChain {
	return &capturedChain{seed: maphash.MakeSeed(), revs: map[uint64]uint64{}, max: max, startUS: start.UnixMicro()}
}

// link is where a captured commit stands in its account's chain.
type link int

const (
	linkOK     link = iota // chains from the last captured commit, or not checked
	linkBroken             // its since is newer than the last captured commit
	linkFirst              // the account's first captured commit: its since is for the snapshot to judge
	linkFull               // not checked: the first account past DefaultChainAccounts
)

// next records f's rev for its account and says where f stands. A #sync
// restarts the account's chain at its rev.
func (ch *capturedChain) next(f *upstream.Frame, m *Metrics) (link, string) {
	var did, rev, since string
	switch {
	case f.Commit != nil:
		did, rev = f.Commit.Repo, f.Commit.Rev
		if f.Commit.Since != nil {
			since = *f.Commit.Since
		}
	case f.Sync != nil:
		did, rev = f.Sync.Did, f.Sync.Rev
	default:
		return linkOK, ""
	}
	if !upstream.ValidTID(rev) {
		return linkOK, ""
	}
	if !upstream.ValidTID(since) {
		since = ""
	}
	k := maphash.String(ch.seed, did)
	r := syntax.TID(rev).Integer()
	last, ok := ch.revs[k]
	switch {
	case ok:
		if r > last {
			ch.revs[k] = r
		}
		if since != "" && syntax.TID(since).Integer() > last {
			return linkBroken, since
		}
	case len(ch.revs) < ch.max:
		ch.revs[k] = r
		if since != "" {
			return linkFirst, since
		}
	default:
		m.anomaly(AnomalyChainUntracked)
		if !ch.filled {
			ch.filled = true
			return linkFull, ""
		}
	}
	return linkOK, ""
}

// checkChain, in capture mode, marks for a replacement (through
// Config.MarkWriter) the account of a captured commit that shows a lost
// commit before it: its since is newer than the account's last captured
// commit, or, for the account's first captured commit, newer than a
// snapshot completed since this capture began (every commit after that
// snapshot reached this capture, unless the stream lost it). A job that
// starts after the mark fetches the lost commit anyway and clears it.
func (c *Consumer) checkChain(ctx context.Context, f *upstream.Frame) error {
	if c.chain == nil {
		return nil
	}
	l, since := c.chain.next(f, c.m)
	did := f.DID()
	if l == linkFull {
		c.log.Warn("firehose: capture remembers the last rev of DefaultChainAccounts accounts; commits of the others are not checked for a lost predecessor (anomaly chain_untracked)",
			"accounts", c.chain.max)
	}
	if l == linkOK || l == linkFull || !upstream.ValidDID(did) {
		return nil
	}
	now := c.cfg.Now().UnixMicro()
	up := unverifiedEffect(did, now)
	if l == linkFirst {
		up = archive.RepoUpdate{DID: did, Func: snapshotBehind(since, c.chain.startUS, now, c.m)}
	} else {
		c.m.anomaly(AnomalyChainBreak)
	}
	if err := c.cfg.MarkWriter.Submit(ctx, &archive.Unit{Repos: []archive.RepoUpdate{up}}); err != nil {
		return fmt.Errorf("firehose: mark %s for a replacement: %w", did, err)
	}
	return nil
}

// snapshotBehind marks a repo whose snapshot, completed at or after
// startUS, is older than since (the rev before its first captured commit):
// a commit between the two never reached the capture. Decided on the
// writer goroutine, against the repo as it is then.
func snapshotBehind(since string, startUS, nowUS int64, m *Metrics) func(archive.RepoState, bool) (archive.RepoState, bool) {
	return func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		if !exists || cur.Status != archive.StatusComplete || cur.CompletedUS < startUS || cur.BackfillRev == "" || since <= cur.BackfillRev {
			return cur, false
		}
		m.anomaly(AnomalyChainBreak)
		return dueEffect(cur, exists, nowUS, archive.RefetchUnverified)
	}
}
