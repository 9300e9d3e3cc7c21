package oracle

// handles.go owns identity on the relay's host beyond the PLC directory:
// did:web documents (/.well-known/did.json) and handle resolution
// (/.well-known/atproto-did), both answered by the request's Host, as a
// resolver sent there by ident.Config.Web asks them; and the handle faults,
// one-off #identity events naming a handle that does not verify.

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/syntax"

	"github.com/backstream/backstream/oracle/world"
)

// requestHost is r's Host without a port, lower-case.
func requestHost(r *http.Request) string {
	h := r.Host
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return strings.ToLower(h)
}

// handleWebDIDDoc serves GET /.well-known/did.json for did:web:<Host>.
func (n *Network) handleWebDIDDoc(w http.ResponseWriter, r *http.Request) {
	n.serveDIDDoc(w, r, "did:web:"+requestHost(r))
}

// handleAtprotoDID serves GET /.well-known/atproto-did for the handle
// <Host>: the DID of the account holding it (or of a FaultHandleUndeclared
// alias), 404 for a handle nobody holds.
func (n *Network) handleAtprotoDID(w http.ResponseWriter, r *http.Request) {
	handle := requestHost(r)
	did, ok := n.faults.alias(handle)
	if !ok {
		did, ok = n.w.HandleDID(handle)
	}
	if !ok {
		http.Error(w, "no such handle", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	_, _ = fmt.Fprintln(w, did)
}

// handleClaim is a FaultHandleNotResolving document override: while the
// account still holds the handle `while`, its document declares claimed.
type handleClaim struct{ claimed, while string }

// alias is the DID a FaultHandleUndeclared handle resolves to.
func (f *Faults) alias(handle string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	did, ok := f.aliases[handle]
	return did, ok
}

// declaredHandle is the handle did's document declares while the account
// holds current: a FaultHandleNotResolving claim, else current. A claim
// ends when the account's handle changes.
func (f *Faults) declaredHandle(did, current string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.claims[did]
	switch {
	case !ok:
		return current
	case c.while != current:
		delete(f.claims, did)
		return current
	}
	return c.claimed
}

// BadHandles follows an emitted #identity, with probability rate, by a
// one-off #identity for the same account naming a handle that does not
// verify (EmitBadHandle; the two kinds at even odds).
func (f *Faults) BadHandles(rate float64) {
	f.mu.Lock()
	f.badHandles = clampRate(rate)
	f.mu.Unlock()
}

func (f *Faults) badHandleRate() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.badHandles
}

// EmitBadHandle appends a one-off #identity for did naming a handle that
// fails atproto's bidirectional check, and fires kind:
//
//   - FaultHandleNotResolving: the handle of another account, which did's
//     document now declares (until did's handle changes) but which resolves
//     to that other account: an account claiming someone else's handle;
//   - FaultHandleUndeclared: a fresh handle that resolves to did but that
//     did's document does not declare.
//
// The world is not changed: a verifying consumer archives the event with
// handle.invalid (Emitted.Invalid names the kind).
func (n *Network) EmitBadHandle(did string, kind FaultKind) (Emitted, error) {
	n.emitMu.Lock()
	defer n.emitMu.Unlock()
	return n.badHandleLocked(did, kind)
}

// maybeBadHandle follows a genuine #identity ev with a one-off bad one when
// the BadHandles draw says so. The caller holds emitMu.
func (n *Network) maybeBadHandle(ev world.Event) error {
	rate := n.faults.badHandleRate()
	if ev.Identity == nil || ev.Invalid != "" || rate == 0 || n.hostileRand.Float64() >= rate {
		return nil
	}
	kind := FaultHandleNotResolving
	if n.hostileRand.IntN(2) == 1 {
		kind = FaultHandleUndeclared
	}
	_, err := n.badHandleLocked(ev.DID, kind)
	return err
}

func (n *Network) badHandleLocked(did string, kind FaultKind) (Emitted, error) {
	acct, ok := n.w.Account(did)
	if !ok || acct.Status == world.StatusDeleted {
		return Emitted{}, fmt.Errorf("oracle: bad handle for %s: no such account", did)
	}
	var handle string
	switch kind {
	case FaultHandleNotResolving:
		other, err := n.otherHandle(did)
		if err != nil {
			return Emitted{}, err
		}
		handle = other
		n.faults.mu.Lock()
		n.faults.claims[did] = handleClaim{claimed: handle, while: acct.Handle}
		n.faults.mu.Unlock()
	case FaultHandleUndeclared:
		n.faults.mu.Lock()
		handle = fmt.Sprintf("alias%d-%s", len(n.faults.aliases), acct.Handle)
		n.faults.aliases[handle] = did
		n.faults.mu.Unlock()
	default:
		return Emitted{}, fmt.Errorf("oracle: bad handle: %s is not a handle fault", kind)
	}
	ev := world.Event{DID: did, Invalid: string(kind),
		Identity: &comatproto.SyncSubscribeRepos_Identity{Did: did, Handle: &handle, Time: syntax.DatetimeNow().String()}}
	out, err := n.appendLocked(ev)
	if err != nil {
		return Emitted{}, err
	}
	n.faults.fire(kind)
	return out, nil
}

// otherHandle is the handle of the first account after did (in DID order,
// wrapping) that is not deleted.
func (n *Network) otherHandle(did string) (string, error) {
	accts := n.w.Accounts()
	for i, a := range accts {
		if a.DID != did {
			continue
		}
		for k := 1; k < len(accts); k++ {
			if b := accts[(i+k)%len(accts)]; b.Status != world.StatusDeleted {
				return b.Handle, nil
			}
		}
	}
	return "", fmt.Errorf("oracle: bad handle for %s: no other account", did)
}
