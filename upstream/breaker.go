// breaker.go owns the per-host "not answering" breaker. A host that
// answered none of its last breakerMisses tries (a connect timeout, a
// refused or reset connection, a name with no address, no response
// headers in time) is down for a cool-off: a request to it fails at once,
// without a dial (ErrHostDown, transient), instead of holding its caller
// for another connect timeout. When the cool-off ends one request is let
// through (the probe): an answer closes the breaker, no answer opens it
// again for twice the cool-off, up to breakerCoolOffMax. A probe whose
// outcome is late lets another through one connect timeout on; the
// probes of one round reopen the breaker once, the first to fail, and the
// outcome of one whose round is over says nothing more. Any answer (any
// HTTP status) resets a host's count. The relay is never broken: its
// callers have retry rules of their own and nothing to fall back to.

package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

const (
	// breakerMisses is how many tries in a row without an answer find a
	// host down: one refused connection or one timeout is a blip, three in
	// a row (each a connect timeout, 10 s, for a blackholed host) is a
	// host that is not there.
	breakerMisses = 3
	// breakerCoolOff is a host's first cool-off: three connect timeouts,
	// so a host found down costs its callers at most a quarter of the
	// time it did while it is down (3 tries, then a probe, every 40 s),
	// and a host back from a restart waits at most 30 s more.
	breakerCoolOff = 30 * time.Second
	// breakerCoolOffMax bounds the doubling cool-off: a host gone for good
	// costs one probe, one connect timeout of one worker, every 10 min; a
	// host that comes back is asked again within 10 min.
	breakerCoolOffMax = 10 * time.Minute
	// minBreakerSweep is the smallest map the breaker sweeps.
	minBreakerSweep = 64
	// limitHostDown names the requests refused at once because their host
	// is down (backstream_upstream_getrepo_limited_total{limit}).
	limitHostDown = "host_down"
)

// tryOutcome is how a try of a host ended, for the breaker.
type tryOutcome int

const (
	// tryOther: the host was not really tried, or the try says nothing of
	// it (the caller gave up, our own limits refused it, the address
	// policy refused it).
	tryOther tryOutcome = iota
	// tryAnswered: the host sent a response (any status).
	tryAnswered
	// tryNoAnswer: no response: a connect timeout, a refused or reset
	// connection, a name with no address, no response headers in time.
	tryNoAnswer
)

// outcomeOf is the outcome of a request that ended with err (an *Error
// built by transportError or statusError, or nil) under the caller's ctx.
func outcomeOf(ctx context.Context, err error) tryOutcome {
	var ue *Error
	switch {
	case err == nil, Answered(err):
		return tryAnswered
	case callerDone(ctx) != nil:
		return tryOther
	case errors.As(err, &ue) && ue.kind == ErrTransient:
		// Only a failure of the network itself: ErrHostBusy, ErrHostDown,
		// ErrLocal and the policy's refusals are ours, not the host's.
		return tryNoAnswer
	}
	return tryOther
}

// breaker keeps, per host key (canonicalHostPort), the tries in a row that
// got no answer and, for a host found down, its cool-off. A host that
// answers is forgotten; the map holds hosts with a miss, swept of those
// nobody has asked for breakerCoolOffMax whenever it has doubled (as the
// pacer's), and no goroutine runs for any host.
type breaker struct {
	exempt    string        // the relay's key: never broken
	probeHold time.Duration // how long a probe holds its host before another may go (the connect timeout)
	now       func() time.Time
	trips     *trips

	mu    sync.Mutex
	hosts map[string]*hostHealth
	sweep int // the size at which a new entry next sweeps
}

type hostHealth struct {
	misses  int
	round   uint64        // the cool-offs begun in this run of misses: a probe's round
	first   time.Time     // the first try without an answer of this run of misses
	down    bool          // found down: requests fail at once until until
	until   time.Time     // the end of the cool-off, or of the probe's hold
	coolOff time.Duration // the current cool-off
}

func newBreaker(exempt string, probeHold time.Duration, t *trips) *breaker {
	return &breaker{exempt: exempt, probeHold: probeHold, now: time.Now, trips: t, hosts: map[string]*hostHealth{}}
}

// allow says whether a request may go to host: nil, with probe the
// cool-off's round (not 0) when it is one let through at the end of a
// cool-off (its outcome, given to done, closes or reopens the breaker);
// else an error matching ErrHostDown, counted and logged (at most once a
// minute).
func (b *breaker) allow(host string) (probe uint64, err error) {
	if host == b.exempt {
		return 0, nil
	}
	b.mu.Lock()
	h := b.hosts[host]
	if h == nil || !h.down {
		b.mu.Unlock()
		return 0, nil
	}
	now := b.now()
	if !now.Before(h.until) {
		// The cool-off is over: this request probes. The others still fail
		// at once until its outcome, or for one connect timeout at most
		// (a probe whose outcome never comes holds nothing for longer).
		h.until = now.Add(b.probeHold)
		round := h.round
		b.mu.Unlock()
		return round, nil
	}
	down := &hostDownError{host: host, since: h.first, until: h.until}
	b.mu.Unlock()
	b.trips.trip(slog.LevelInfo, limitHostDown, "upstream: a host is not answering; its requests fail at once until its cool-off ends",
		"host", host, "since", down.since, "until", down.until)
	return 0, down
}

// done records how a try of host ended; probe is allow's. A probe of a
// round already over (another probe of it failed first) counts as a try
// begun before the host was found down again.
func (b *breaker) done(host string, probe uint64, o tryOutcome) {
	if host == b.exempt {
		return
	}
	b.mu.Lock()
	now := b.now()
	h := b.hosts[host]
	switch o {
	case tryAnswered:
		if h != nil {
			delete(b.hosts, host)
		}
		b.mu.Unlock()
		return
	case tryOther:
		if probe != 0 && h != nil && h.down && probe == h.round {
			h.until = now // the probe did not go: the next request probes
		}
		b.mu.Unlock()
		return
	}
	if h == nil {
		b.sweepLocked(now)
		h = &hostHealth{first: now}
		b.hosts[host] = h
	}
	h.misses++
	opened := false
	switch {
	case h.down && probe != 0 && probe == h.round:
		h.coolOff = min(2*h.coolOff, breakerCoolOffMax)
		h.until, opened = now.Add(h.coolOff), true
		h.round++
	case h.down:
		// A try begun before the host was found down (again): nothing
		// more.
	case h.misses >= breakerMisses:
		h.down, h.coolOff = true, breakerCoolOff
		h.until, opened = now.Add(h.coolOff), true
		h.round++
	}
	since, until, misses := h.first, h.until, h.misses
	b.mu.Unlock()
	if opened {
		b.trips.metrics.hostDown()
		b.trips.lines.Log(b.trips.log, slog.LevelWarn, "host_down_opened", "upstream: a host answered none of its last tries; its requests fail at once for a cool-off",
			"host", host, "since", since, "misses", misses, "until", until)
	}
}

// sweepLocked forgets, once the map has reached its sweep size, the hosts
// nobody has asked for breakerCoolOffMax: not down, with a first miss that
// long ago, or down, with a cool-off that ended that long ago (forgetting
// one costs at most breakerMisses tries if it is asked again). The next
// sweep waits for twice what is left.
func (b *breaker) sweepLocked(now time.Time) {
	if len(b.hosts) < max(b.sweep, minBreakerSweep) {
		return
	}
	for name, h := range b.hosts {
		last := h.first
		if h.down {
			last = h.until
		}
		if now.Sub(last) > breakerCoolOffMax {
			delete(b.hosts, name)
		}
	}
	b.sweep = 2 * len(b.hosts)
}

// hostDownError is the cause of an ErrHostDown *Error.
type hostDownError struct {
	host         string
	since, until time.Time
}

func (e *hostDownError) Error() string {
	return fmt.Sprintf("%s: %s has not answered since %s (%d tries in a row); its requests fail at once until %s",
		ErrHostDown, e.host, e.since.UTC().Format(time.RFC3339), breakerMisses, e.until.UTC().Format(time.RFC3339))
}

func (e *hostDownError) Is(target error) bool { return target == ErrHostDown }

// HostDownUntil returns when the cool-off of the host err found down ends
// (its requests fail at once until then), and whether err is such an
// error (errors.Is(err, ErrHostDown)).
func HostDownUntil(err error) (time.Time, bool) {
	var d *hostDownError
	if errors.As(err, &d) {
		return d.until, true
	}
	return time.Time{}, false
}
