package firehose

// chain.go owns capture mode's chain check: each account's last captured
// commit rev, so a captured commit whose since is newer shows a commit the
// stream lost in between, and the account is marked for a replacement at
// once, as a frame that failed verification is. Merging checks every
// captured commit's since again (cap/ keeps it, Event.Since), against the
// account's snapshot as well: an account's first captured commit is judged
// there, once its snapshot is known.

import (
	"context"
	"fmt"
	"hash/maphash"

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
	seed   maphash.Seed
	revs   map[uint64]uint64
	max    int
	filled bool // the map reached max (said once)
}

func newCapturedChain(max int) *capturedChain {
	return &capturedChain{seed: maphash.MakeSeed(), revs: map[uint64]uint64{}, max: max}
}

// link is where a captured commit stands in its account's chain.
type link int

const (
	linkOK     link = iota // chains from the last captured commit, or not checked (the account's first: merging judges it)
	linkBroken             // its since is newer than the last captured commit
	linkFull               // not checked: the first account past DefaultChainAccounts
)

// next records f's rev for its account and says where f stands. A #sync
// restarts the account's chain at its rev.
func (ch *capturedChain) next(f *upstream.Frame, m *Metrics) link {
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
		return linkOK
	}
	if !upstream.ValidTID(rev) {
		return linkOK
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
			return linkBroken
		}
	case len(ch.revs) < ch.max:
		ch.revs[k] = r
	default:
		m.anomaly(AnomalyChainUntracked)
		if !ch.filled {
			ch.filled = true
			return linkFull
		}
	}
	return linkOK
}

// checkChain, in capture mode, marks for a replacement (through
// Config.MarkWriter) the account of a captured commit that shows a lost
// commit before it: its since is newer than the account's last captured
// commit. A job that starts after the mark fetches the lost commit anyway
// and clears it.
func (c *Consumer) checkChain(ctx context.Context, f *upstream.Frame) error {
	if c.chain == nil {
		return nil
	}
	l := c.chain.next(f, c.m)
	did := f.DID()
	if l == linkFull {
		c.log.Warn("firehose: capture remembers the last rev of DefaultChainAccounts accounts; commits of the others are not checked for a lost predecessor (anomaly chain_untracked)",
			"accounts", c.chain.max)
	}
	if l != linkBroken || !upstream.ValidDID(did) {
		return nil
	}
	c.m.anomaly(AnomalyChainBreak)
	up := unverifiedEffect(did, c.cfg.Now().UnixMicro())
	if err := c.cfg.MarkWriter.Submit(ctx, &archive.Unit{Repos: []archive.RepoUpdate{up}}); err != nil {
		return fmt.Errorf("firehose: mark %s for a replacement: %w", did, err)
	}
	return nil
}
