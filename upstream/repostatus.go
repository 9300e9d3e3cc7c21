package upstream

// repostatus.go owns com.atproto.sync.getRepoStatus: what the relay (or a
// PDS host) says of one account's hosting status.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
)

// maxRepoStatusBody bounds a getRepoStatus answer (a few short fields).
const maxRepoStatusBody = 64 << 10

// RepoStatus is a getRepoStatus answer. Status (deactivated, takendown,
// suspended, deleted, ...) is set only when the account is not active.
type RepoStatus struct {
	DID    string
	Active bool
	Status string
	Rev    string
}

// GetRepoStatus asks host's getRepoStatus about did (host "": the relay).
// Errors: *Error; an account the host does not know is ClassNotFound
// (ErrRepoNotFound); an answer that is not JSON or names another DID is
// ErrMalformedResponse.
func (c *Client) GetRepoStatus(ctx context.Context, host, did string) (RepoStatus, error) {
	const op = "getRepoStatus"
	base := c.relay
	if host != "" {
		u, err := c.hostURL(host)
		if err != nil {
			return RepoStatus{}, err
		}
		base = u
	}
	body, at, err := c.fetchSmall(ctx, op, xrpcURL(base, "com.atproto.sync.getRepoStatus", url.Values{"did": {did}}), "application/json", maxRepoStatusBody)
	if err != nil {
		c.metrics.request(op, Classify(err))
		return RepoStatus{}, err
	}
	var w struct {
		Did    string  `json:"did"`
		Active bool    `json:"active"`
		Status *string `json:"status"`
		Rev    *string `json:"rev"`
	}
	if err := json.Unmarshal(body, &w); err != nil || w.Did != did {
		c.metrics.request(op, ClassPermanent)
		return RepoStatus{}, &Error{Op: op, Host: at, StatusCode: http.StatusOK, Err: fmt.Errorf("%w: getRepoStatus of %s: did %q, %v", ErrMalformedResponse, did, w.Did, err), kind: ErrMalformedResponse}
	}
	st := RepoStatus{DID: w.Did, Active: w.Active}
	if w.Status != nil && !w.Active {
		st.Status = *w.Status
	}
	if w.Rev != nil {
		st.Rev = *w.Rev
	}
	c.metrics.request(op, ClassNone)
	return st, nil
}
