// errors.go owns the upstream error contract: the sentinels, the structured
// *Error every network call returns, the one classifier (Classify) and the
// server-directed wait (RetryAfter).

package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Sentinels. Test with errors.Is; every *Error matches exactly one kind
// sentinel plus, for permanent kinds, ErrPermanent.
var (
	// ErrRepoNotFound: the host says the repository does not exist
	// (XRPC RepoNotFound, or NotFound with a "repo not found" message).
	ErrRepoNotFound = errors.New("repo not found")
	// ErrRepoDeactivated: the account is deactivated (XRPC RepoDeactivated).
	ErrRepoDeactivated = errors.New("repo deactivated")
	// ErrRepoSuspended: the account is suspended (XRPC RepoSuspended).
	ErrRepoSuspended = errors.New("repo suspended")
	// ErrRepoTakendown: the account was taken down (XRPC RepoTakendown).
	ErrRepoTakendown = errors.New("repo takendown")
	// ErrRateLimited: HTTP 429; RetryAfter(err) gives the server-directed wait.
	ErrRateLimited = errors.New("rate limited")
	// ErrTransient: worth retrying: 5xx, 408, connection refused/reset,
	// unexpected EOF, connect/header/idle-body timeouts.
	ErrTransient = errors.New("transient upstream failure")
	// ErrPermanent: retrying the same request will not help: other 4xx,
	// refused redirects, too many redirects, a CAR over the byte cap, a
	// malformed response.
	ErrPermanent = errors.New("permanent upstream failure")
	// ErrForbiddenRedirect: a redirect (or a dial) targeted a non-http(s)
	// scheme or an address that is private, link-local, metadata, multicast,
	// unspecified, or loopback while the relay is not on loopback (E14).
	// Also matches ErrPermanent.
	ErrForbiddenRedirect = errors.New("forbidden redirect target")
	// ErrTooManyRedirects: more than MaxRedirects redirects. Also matches
	// ErrPermanent.
	ErrTooManyRedirects = errors.New("too many redirects")
	// ErrTooLarge: the body exceeded the configured byte cap. Also matches
	// ErrPermanent.
	ErrTooLarge = errors.New("response exceeds byte cap")
	// ErrIdleTimeout: no body byte arrived within the idle timeout. Also
	// matches ErrTransient.
	ErrIdleTimeout = errors.New("idle body timeout")
	// ErrMalformedResponse: a 200 response whose body could not be parsed.
	// Also matches ErrPermanent.
	ErrMalformedResponse = errors.New("malformed response")
	// ErrSlowBody: the body arrived slower than the minimum throughput
	// (Options.MinBodyBytes per Options.BodyWindow). Also matches
	// ErrTransient.
	ErrSlowBody = errors.New("body slower than the minimum throughput")
	// ErrHostBusy: the redirect target already serves as many downloads as
	// Options.HostWorkers allows. Also matches ErrTransient.
	ErrHostBusy = errors.New("download host at its concurrency cap")
	// ErrHostDown: the host answered none of its last tries (connect
	// timeouts, refused or reset connections, no address) and is in its
	// cool-off: the request failed at once, without a dial (breaker.go).
	// HostDownUntil gives the cool-off's end. Also matches ErrTransient.
	ErrHostDown = errors.New("host not answering")
	// ErrLocal: our own scratch space failed or refused the spill: the
	// scratch budget is held by other downloads, the volume is below its
	// free-space floor, or a scratch write failed (ENOSPC). Not the
	// upstream's fault: ClassLocal, retried after a backoff.
	ErrLocal = errors.New("local scratch space unavailable")
)

// Class is the coarse decision a caller takes on an upstream error.
type Class int

// Classes returned by Classify.
const (
	// ClassNone: no error.
	ClassNone Class = iota
	// ClassNotFound: the repository does not exist (E11: complete, no rows).
	ClassNotFound
	// ClassUnavailable: deactivated, suspended or taken down (E11).
	ClassUnavailable
	// ClassRateLimited: 429; wait RetryAfter(err) and use the 429 budget (E10).
	ClassRateLimited
	// ClassTransient: retry with backoff on the ordinary budget (E9).
	ClassTransient
	// ClassPermanent: do not retry in this run.
	ClassPermanent
	// ClassCanceled: the caller's context ended (canceled or its deadline
	// passed); errors.Is(err, context.DeadlineExceeded) tells which.
	ClassCanceled
	// ClassLocal: our own scratch space (ErrLocal); back off and retry,
	// never fatal, never the upstream's fault.
	ClassLocal
)

var classNames = [...]string{
	ClassNone:        "ok",
	ClassNotFound:    "not_found",
	ClassUnavailable: "unavailable",
	ClassRateLimited: "rate_limited",
	ClassTransient:   "transient",
	ClassPermanent:   "permanent",
	ClassCanceled:    "canceled",
	ClassLocal:       "local",
}

// String returns a stable snake_case name, usable as a metric label.
func (c Class) String() string {
	if c >= 0 && int(c) < len(classNames) {
		return classNames[c]
	}
	return "class(" + strconv.Itoa(int(c)) + ")"
}

// Reasons a listRepos listing ends before its last page, a closed set for
// metric labels (CutReasons). The caller decides when to give up; CutReason
// names the error it gave up on.
const (
	// CutCursorTooLong: a page handed back a cursor over 64 KiB
	// (Page.CursorRefused); its repos are kept.
	CutCursorTooLong = "cursor_too_long"
	// CutTooLarge: a page's body exceeded the byte cap (ErrTooLarge).
	CutTooLarge = "too_large"
	// CutMalformed: a 200 page whose body did not parse: bad JSON, a field
	// of the wrong type, a body cut short (ErrMalformedResponse).
	CutMalformed = "malformed"
	// CutRefused: another answer that retrying will not change (a 4xx, a
	// refused redirect).
	CutRefused = "refused"
	// CutRetriesExhausted: transient failures or 429s beyond the caller's
	// retry budget.
	CutRetriesExhausted = "retries_exhausted"
	// CutTooManyEntries: a PDS host's listing named more entries than
	// HostListingBound allows it (one that never ends, or lists far more
	// accounts than the relay knows on it).
	CutTooManyEntries = "too_many_entries"
)

// CutReasons is the closed set of listing-cut reasons.
func CutReasons() []string {
	return []string{CutCursorTooLong, CutTooLarge, CutMalformed, CutRefused, CutRetriesExhausted, CutTooManyEntries}
}

// HostListingSlack is what one listing of a PDS host may name beyond
// twice the account count the relay's roster gives it (HostListingBound).
const HostListingSlack = 10_000

// HostListingBound is how many entries one listing of a PDS host (a
// bootstrap lane, discovery, a repair pass) may name before it is cut
// (CutTooManyEntries): twice accounts, the count the relay's listHosts
// gives the host, plus HostListingSlack. So a host whose listing never
// ends, with fresh cursors, or that names DIDs far beyond its accounts,
// costs a bounded listing, not one without end.
func HostListingBound(accounts uint64) int64 {
	return 2*int64(min(accounts, 1<<40)) + HostListingSlack
}

// CutReason names why a listRepos error a caller gives up on ends its
// listing: too_large, malformed, retries_exhausted (transient or rate
// limited) or refused (anything else).
func CutReason(err error) string {
	switch {
	case errors.Is(err, ErrTooLarge):
		return CutTooLarge
	case errors.Is(err, ErrMalformedResponse):
		return CutMalformed
	}
	switch Classify(err) {
	case ClassTransient, ClassRateLimited:
		return CutRetriesExhausted
	}
	return CutRefused
}

// RetryAfterCeiling bounds every server-directed wait returned by RetryAfter
// (a PDS rate-limit window is 300 s; the margin covers clock skew).
const RetryAfterCeiling = 330 * time.Second

// Error is the structured error of every upstream call.
type Error struct {
	// Op names the call: "listRepos", "getRepo", "subscribeRepos".
	Op string
	// Host is the host[:port] the failing request went to (after
	// redirects), in its canonical form (CanonicalHost).
	Host string
	// StatusCode is the HTTP status, 0 when no response was received.
	StatusCode int
	// Name and Message come from an XRPC error body {"error","message"}.
	Name    string
	Message string
	// RetryAfter is the parsed Retry-After header (delta seconds or HTTP
	// date, relative to when the response arrived); 0 if absent. For a
	// getRepo asked of a host directly and not made because the host's
	// announced budget is spent (StatusCode 0), the wait for its reset.
	RetryAfter time.Duration
	// Reset is the parsed ratelimit-reset header (unix seconds); zero if absent.
	Reset time.Time
	// Err is the underlying cause (a net error, ErrTooLarge, ...), may be nil.
	Err error

	kind error // one of the kind sentinels above
}

// Error implements error.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("upstream: ")
	b.WriteString(e.Op)
	if e.Host != "" {
		b.WriteString(" ")
		b.WriteString(e.Host)
	}
	b.WriteString(": ")
	if e.StatusCode != 0 {
		fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
		if e.Name != "" {
			b.WriteString(" ")
			b.WriteString(e.Name)
		}
		if e.Message != "" {
			b.WriteString(": ")
			b.WriteString(e.Message)
		}
		if e.Err != nil {
			b.WriteString(": ")
			b.WriteString(e.Err.Error())
		}
		return b.String()
	}
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else if e.kind != nil {
		b.WriteString(e.kind.Error())
	}
	return b.String()
}

// Unwrap returns the underlying cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the error's kind sentinel, and ErrPermanent / ErrTransient for
// the kinds that belong to those groups.
func (e *Error) Is(target error) bool {
	if target == nil || e.kind == nil {
		return false
	}
	if target == e.kind {
		return true
	}
	switch target {
	case ErrPermanent:
		return isPermanentKind(e.kind)
	case ErrTransient:
		return isTransientKind(e.kind)
	}
	return false
}

// Kind returns the sentinel this error was classified as.
func (e *Error) Kind() error { return e.kind }

func isTransientKind(k error) bool {
	switch k {
	case ErrIdleTimeout, ErrSlowBody, ErrHostBusy, ErrHostDown:
		return true
	}
	return false
}

func isPermanentKind(k error) bool {
	switch k {
	case ErrForbiddenRedirect, ErrTooManyRedirects, ErrTooLarge, ErrMalformedResponse:
		return true
	}
	return false
}

// Classify maps any error (an *Error or a raw one) onto the decision a caller
// takes. nil → ClassNone.
func Classify(err error) Class {
	if err == nil {
		return ClassNone
	}
	var ue *Error
	if errors.As(err, &ue) && ue.kind != nil {
		return classOfKind(ue.kind)
	}
	return classOfKind(kindOf(err))
}

func classOfKind(k error) Class {
	switch k {
	case ErrRepoNotFound:
		return ClassNotFound
	case ErrRepoDeactivated, ErrRepoSuspended, ErrRepoTakendown:
		return ClassUnavailable
	case ErrRateLimited:
		return ClassRateLimited
	case ErrTransient, ErrIdleTimeout, ErrSlowBody, ErrHostBusy, ErrHostDown:
		return ClassTransient
	case ErrLocal:
		return ClassLocal
	case context.Canceled, context.DeadlineExceeded:
		return ClassCanceled
	default:
		return ClassPermanent
	}
}

// Answered reports whether the host a call went to answered it: no error,
// or an error carrying the HTTP status of the host's response (a 4xx, a
// 5xx, a 429, a malformed 200). A failure without a response (a connect
// timeout, a refused connection, a reset) is not an answer.
func Answered(err error) bool {
	var ue *Error
	return err == nil || errors.As(err, &ue) && ue.StatusCode != 0
}

// RetryAfter returns how long the server asked the caller to wait, bounded by
// RetryAfterCeiling: Retry-After when present, else ratelimit-reset minus now,
// else 0 (use your own backoff).
func RetryAfter(err error) time.Duration {
	return retryAfterAt(err, time.Now())
}

func retryAfterAt(err error, now time.Time) time.Duration {
	var ue *Error
	if !errors.As(err, &ue) {
		return 0
	}
	return serverWait(ue.RetryAfter, ue.Reset, now)
}

// serverWait is the server-directed wait at now of an answer with a
// Retry-After of retryAfter (0: none) and a ratelimit-reset of reset
// (zero: none): Retry-After when present, else reset minus now, else 0;
// at most RetryAfterCeiling.
func serverWait(retryAfter time.Duration, reset, now time.Time) time.Duration {
	var d time.Duration
	switch {
	case retryAfter > 0:
		d = retryAfter
	case !reset.IsZero():
		d = reset.Sub(now)
	}
	return min(max(d, 0), RetryAfterCeiling)
}

// kindOf classifies a raw (non-*Error) error from the network stack.
func kindOf(err error) error {
	switch {
	case errors.Is(err, ErrRateLimited):
		return ErrRateLimited
	case errors.Is(err, ErrForbiddenRedirect):
		return ErrForbiddenRedirect
	case errors.Is(err, ErrTooManyRedirects):
		return ErrTooManyRedirects
	case errors.Is(err, ErrTooLarge):
		return ErrTooLarge
	case errors.Is(err, ErrIdleTimeout):
		return ErrIdleTimeout
	case errors.Is(err, ErrSlowBody):
		return ErrSlowBody
	case errors.Is(err, ErrHostBusy):
		return ErrHostBusy
	case errors.Is(err, ErrHostDown):
		return ErrHostDown
	case errors.Is(err, ErrLocal):
		return ErrLocal
	case errors.Is(err, context.Canceled):
		return context.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		return context.DeadlineExceeded
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return ErrTransient
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNABORTED), errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, syscall.ETIMEDOUT):
		return ErrTransient
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return ErrTransient
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		// dial, read, write failures on the socket: DNS errors included.
		return ErrTransient
	}
	var de *net.DNSError
	if errors.As(err, &de) {
		return ErrTransient
	}
	if errors.Is(err, http.ErrHandlerTimeout) || strings.Contains(err.Error(), "server closed idle connection") ||
		strings.Contains(err.Error(), "connection reset") || strings.Contains(err.Error(), "broken pipe") {
		return ErrTransient
	}
	return ErrPermanent
}

// statusKind maps an HTTP status and XRPC error name to a kind sentinel.
func statusKind(status int, name, message string) error {
	switch {
	case status == http.StatusTooManyRequests:
		return ErrRateLimited
	case status >= 500, status == http.StatusRequestTimeout:
		return ErrTransient
	case status >= 400:
		switch {
		case strings.EqualFold(name, "RepoNotFound"):
			return ErrRepoNotFound
		case strings.EqualFold(name, "NotFound") && strings.Contains(strings.ToLower(message), "repo not found"):
			return ErrRepoNotFound
		case strings.EqualFold(name, "RepoDeactivated"):
			return ErrRepoDeactivated
		case strings.EqualFold(name, "RepoSuspended"):
			return ErrRepoSuspended
		case strings.EqualFold(name, "RepoTakendown"):
			return ErrRepoTakendown
		}
		return ErrPermanent
	}
	// 1xx, 2xx other than the expected one, unfollowed 3xx.
	return ErrPermanent
}

// parseRetryAfter parses a Retry-After value: delta seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		if n > int64(RetryAfterCeiling/time.Second) {
			return RetryAfterCeiling
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return d
		}
	}
	return 0
}

// parseReset parses ratelimit-reset (unix seconds).
func parseReset(v string) time.Time {
	v = strings.TrimSpace(v)
	if v == "" {
		return time.Time{}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n > 1<<40 {
		return time.Time{}
	}
	return time.Unix(n, 0)
}

// callerDone returns the caller's context error, also when its deadline has
// passed but the context's own timer has not fired yet (a socket deadline
// copied from it can expire first).
func callerDone(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}
