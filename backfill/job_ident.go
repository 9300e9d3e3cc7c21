package backfill

// job_ident.go owns a job's checks against the account's DID document
// (Options.Identity): resolution before the download, the serving host's
// authority, and the commit signature during verification.

import (
	"context"
	"fmt"

	"github.com/bluesky-social/indigo/atproto/repo"

	"github.com/backstream/backstream/ident"
)

// resolved is an account's document as a job looked it up: fresh says it
// came from the network in this lookup (no second resolution on a failed
// signature).
type resolved struct {
	info  *ident.Info
	fresh bool
}

// identity resolves did's document before its download; nil when
// verification is off. In warn mode an unresolvable DID is counted and the
// job goes on unverified.
func (r *Runner) identity(ctx context.Context, did string) (*resolved, error) {
	id := r.o.Identity
	if id.Mode() == ident.ModeOff {
		return nil, nil
	}
	info, fresh, err := id.Lookup(ctx, did)
	if err == nil {
		return &resolved{info, fresh}, nil
	}
	if ident.Class(err) != "" {
		id.Verified(ident.PathBackfill, ident.OutcomeIdentity, did)
		if id.Mode() == ident.ModeWarn {
			return nil, nil
		}
	}
	return nil, err
}

// authority refuses a repo served by a host that is neither a trusted host
// nor the document's PDS (strict), or counts it (warn). A document that did
// not come from the network in this lookup is resolved again once first (an
// account that moved to another PDS); doc then holds the new one.
func (r *Runner) authority(ctx context.Context, doc *resolved, host string) error {
	if doc == nil {
		return nil
	}
	id := r.o.Identity
	err := ident.CheckAuthority(doc.info, host, r.o.TrustedHosts...)
	if err != nil && !doc.fresh {
		info, rerr := id.Reresolve(ctx, doc.info.DID)
		if rerr != nil {
			return rerr
		}
		doc.info, doc.fresh = info, true
		err = ident.CheckAuthority(info, host, r.o.TrustedHosts...)
	}
	if err == nil {
		return nil
	}
	id.Verified(ident.PathBackfill, ident.OutcomeAuthority, doc.info.DID)
	if id.Mode() == ident.ModeWarn {
		return nil
	}
	return err
}

// verifyOptions are the runner's verification options with the signature
// check against doc (nil: verification off, or a warn-mode DID that did
// not resolve).
func (r *Runner) verifyOptions(doc *resolved) VerifyOptions {
	opts := r.o.Verify
	id := r.o.Identity
	if doc == nil {
		return opts
	}
	opts.CheckCommit = func(ctx context.Context, c *repo.Commit) error {
		if ident.RevAhead(c.Rev, id.Now()) {
			// Refused by its rev alone, as a live commit is: archived, it
			// would move the ratchet past every genuine commit until then.
			id.Verified(ident.PathBackfill, ident.OutcomeRev, c.DID)
			if id.Mode() == ident.ModeWarn {
				return nil
			}
			return fmt.Errorf("%w: rev %s is more than %v ahead of the clock", ErrBadCommit, c.Rev, ident.MaxRevAhead)
		}
		_, err := id.Verify(ctx, doc.info, doc.fresh, c)
		switch {
		case err == nil:
			id.Verified(ident.PathBackfill, ident.OutcomeOK, c.DID)
			return nil
		case ident.Class(err) == "":
			return err // ctx ended, or the durable copy is unreadable
		}
		id.Verified(ident.PathBackfill, ident.Class(err), c.DID)
		if id.Mode() == ident.ModeWarn {
			return nil
		}
		return err
	}
	return opts
}
