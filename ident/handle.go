package ident

// handle.go owns the resolver's part of an #identity event: the cached
// document dropped and resolved again, and the handle the event names
// verified both ways (atproto's bidirectional check).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/backstream/backstream/internal/loglimit"
)

// HandleInvalid is the handle of an account whose handle does not verify.
const HandleInvalid = "handle.invalid"

// Results of a handle check (backstream_ident_handles_total{result}).
const (
	HandleOK         = "ok"
	HandleBadSyntax  = "syntax"      // not a handle, or under a reserved TLD (handle.invalid among them)
	HandleNoDocument = "no_document" // the DID did not resolve
	HandleUndeclared = "undeclared"  // the DID document does not name it
	HandleUnresolved = "unresolved"  // it does not resolve (not found, or failing)
	HandleTimeout    = "timeout"     // its host did not answer within Config.HandleTimeout
	HandleMismatch   = "mismatch"    // it resolves to another DID
)

// CheckIdentity is the resolver's part of an #identity event for did that
// names handle ("" when it names none). The cached document is invalidated
// and refreshed (Invalidate; this call shares that resolution). A named
// handle is then verified both ways: the fresh document declares it (its
// first at:// alsoKnownAs) and the handle resolves back to did (DNS TXT,
// then HTTPS /.well-known/atproto-did; only the latter, through Config.Web,
// on the simulated network). It returns the handle to archive — the handle,
// normalized, when it verifies, HandleInvalid otherwise — and the check's
// result; the verdict is kept in the cache and ident/<did>. Failures are
// counted and logged once a minute per result, never per event. An error
// is returned only when ctx ended.
func (r *Resolver) CheckIdentity(ctx context.Context, did, handle string) (string, string, error) {
	since := r.cfg.Now()
	r.Invalidate(did)
	if handle == "" {
		return "", "", nil
	}
	verdict, result, err := r.checkHandle(ctx, did, handle, since)
	if err != nil {
		return "", "", err
	}
	r.m.handle(result)
	if result != HandleOK {
		r.logTrip("handle/"+result, "ident: an #identity event's handle does not verify; archived as "+HandleInvalid,
			"result", result, "did", loglimit.Clip(did, 256), "handle", loglimit.Clip(handle, 256))
	}
	return verdict, result, nil
}

func (r *Resolver) checkHandle(ctx context.Context, did, handle string, since time.Time) (string, string, error) {
	info, err := r.refreshSince(ctx, did, since)
	switch {
	case ctx.Err() != nil:
		return "", "", fmt.Errorf("ident: handle of %s: %w", did, ctx.Err())
	case err != nil:
		return HandleInvalid, HandleNoDocument, nil
	}
	h, err := syntax.ParseHandle(handle)
	result := HandleBadSyntax
	switch {
	case err != nil || !h.AllowedTLD():
	case info.declared != h.Normalize().String():
		result = HandleUndeclared
	default:
		h = h.Normalize()
		if result, err = r.resolvesTo(ctx, h, did); err != nil {
			return "", "", err
		}
	}
	verdict := h.String()
	if result != HandleOK {
		verdict = HandleInvalid
	}
	kept := *info
	kept.Handle = verdict
	r.keep(ctx, &kept)
	return verdict, result, nil
}

// resolvesTo resolves h and compares it with did: HandleOK,
// HandleUnresolved, HandleTimeout or HandleMismatch; an error only when
// ctx ended. A result for the pair within HandleTTL is reused (counted as
// a cache hit): a repeated #identity costs no request. Otherwise the one
// attempt runs under the concurrency limit and HandleTimeout (the check
// runs on the firehose's path, and a handle host is anyone's, so a failing
// or silent one costs one short timeout, never the retry budget).
func (r *Resolver) resolvesTo(ctx context.Context, h syntax.Handle, did string) (string, error) {
	key := did + " " + h.String()
	now := r.cfg.Now()
	if result, expired, ok := r.handles.get(key, now); ok && !expired {
		r.m.handleCached()
		return result, nil
	}
	var got syntax.DID
	timedOut := false
	_, err := r.withRetries(ctx, h.String(), func(ctx context.Context) error {
		tctx, cancel := context.WithTimeout(ctx, min(r.cfg.HandleTimeout, r.cfg.Timeout))
		defer cancel()
		var err error
		if r.cfg.Web != "" {
			got, err = r.dir.ResolveHandleWellKnown(tctx, h)
		} else {
			got, err = r.dir.ResolveHandle(tctx, h)
		}
		timedOut = err != nil && ctx.Err() == nil && errors.Is(tctx.Err(), context.DeadlineExceeded)
		return err
	}, func(error) bool { return true })
	result := HandleOK
	switch {
	case ctx.Err() != nil:
		return "", fmt.Errorf("ident: handle %s: %w", h, ctx.Err())
	case timedOut:
		result = HandleTimeout
	case err != nil:
		result = HandleUnresolved
	case got.String() != did:
		result = HandleMismatch
	}
	r.handles.put(key, result, now.Add(r.cfg.HandleTTL))
	return result, nil
}
