package subscribe

// This file owns the server's bounds on subscribers as a whole: admission
// (the global and per-client-IP caps and the budget of output buffers and
// filters, checked before the upgrade and, for a filter, at each
// options_update), the semaphore that shares archive reading among
// replaying subscribers and the per-connection budget of client messages.

import (
	"context"
	"net/http"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/backstream/backstream/internal/clientkey"
)

// Output-buffer sizing. A subscriber appends frames of at most
// maxInlineFrame bytes to its output buffer and writes larger ones to the
// socket straight from where they were rendered, so the buffer never grows
// past FlushBytes + maxInlineFrame; gorilla's control frames queue apart, up
// to maxControlPending. A replaying subscriber also keeps a render buffer
// and a compression buffer, dropped again after an event larger than
// maxInlineFrame.
const maxInlineFrame = 16 << 10

// outputCapacity is a subscriber's output buffer, fixed at its start: a
// flush's worth of frames, one inline frame more, the control frames
// gorilla queued and the frames' headers.
func outputCapacity(flushBytes int) int {
	return flushBytes + maxInlineFrame + maxControlPending + 2*maxFrameHeader
}

// bufferReservation is what one subscriber reserves from the BufferBudget:
// its output buffer, the control-frame queue and the two render buffers.
func bufferReservation(flushBytes int) int64 {
	return int64(flushBytes) + maxInlineFrame + maxControlPending + 2*maxInlineFrame
}

// Reservation is what one subscriber reserves from c.BufferBudget (with
// c's FlushBytes, or its default) for its buffers, and without a filter:
// a smaller budget admits no subscriber.
func (c Config) Reservation() int64 {
	c.defaults()
	return bufferReservation(c.FlushBytes)
}

// refusal is an answer given instead of an upgrade because a limit is
// reached.
type refusal struct {
	code    int    // 503 or 429
	reason  string // the refused_total label
	errName string // the JSON "error"
	message string
}

// admission is the set of admitted subscribers: counts per client IP and
// the bytes reserved for their buffers and filters. Guarded by Server.mu.
type admission struct {
	total    int
	perIP    map[string]int
	reserved int64
}

// admitLocked reserves a place for a subscriber from ip whose filter holds
// filterBytes (filter.held), or says why not. The caller holds s.mu.
func (s *Server) admitLocked(ip string, filterBytes int64) *refusal {
	cfg := &s.cfg
	a := &s.adm
	need := s.bufBytes + filterBytes
	switch {
	case a.total >= cfg.MaxSubscribers:
		return &refusal{http.StatusServiceUnavailable, refusedMaxSubscribers, "TooManySubscribers",
			"the server has " + strconv.Itoa(a.total) + " subscribers, its limit; retry later"}
	case cfg.MaxSubscribersPerIP > 0 && a.perIP[ip] >= cfg.MaxSubscribersPerIP:
		return &refusal{http.StatusTooManyRequests, refusedMaxPerIP, "TooManySubscribersFromIP",
			"too many subscribers from " + ip + " (limit " + strconv.Itoa(cfg.MaxSubscribersPerIP) + ")"}
	case a.reserved+need > cfg.BufferBudget:
		return &refusal{http.StatusServiceUnavailable, refusedBufferBudget, "BufferBudgetExhausted",
			"the subscribers' output buffers and filters use the budget of " + strconv.FormatInt(cfg.BufferBudget, 10) +
				" bytes: no room for " + strconv.FormatInt(need, 10) + " more; retry later"}
	}
	a.total++
	a.perIP[ip]++
	a.reserved += need
	s.m.setReserved(a.reserved)
	return nil
}

// release gives back what admitLocked reserved for a subscriber from ip
// whose filter holds filterBytes of the budget now (reserveFilter may have
// changed it since).
func (s *Server) release(ip string, filterBytes int64) {
	s.mu.Lock()
	a := &s.adm
	a.total--
	if a.perIP[ip]--; a.perIP[ip] <= 0 {
		delete(a.perIP, ip)
	}
	a.reserved -= s.bufBytes + filterBytes
	s.m.setReserved(a.reserved)
	s.mu.Unlock()
}

// reserveFilter moves a connected subscriber's filter reservation from
// old bytes to new (an options_update): false, and nothing changed, when
// the growth would take the reserved bytes past the budget.
func (s *Server) reserveFilter(old, new int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a := &s.adm
	if new > old && a.reserved+new-old > s.cfg.BufferBudget {
		return false
	}
	a.reserved += new - old
	s.m.setReserved(a.reserved)
	return true
}

// clientIP is the client the per-IP cap counts (internal/clientkey: an IPv4
// address or an IPv6 /64, as the listener's connection cap counts): the
// connection's remote address, or, only when the operator says a reverse
// proxy sets it
// (TrustForwardedFor), the last address of X-Forwarded-For — the one that
// proxy appended; earlier ones are the client's to invent.
func clientIP(r *http.Request, trustForwarded bool) string {
	if trustForwarded {
		if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
			last := xff[len(xff)-1]
			if i := strings.LastIndexByte(last, ','); i >= 0 {
				last = last[i+1:]
			}
			if ip, err := netip.ParseAddr(strings.TrimSpace(last)); err == nil {
				return clientkey.Of(ip)
			}
		}
	}
	return clientkey.OfHostPort(r.RemoteAddr)
}

// readerSlots is the semaphore of replay readers: a replaying subscriber
// holds a slot for one bounded batch, then gives it back before it waits on
// a write. Waiters are served in arrival order (a channel's queue is
// FIFO), so every replaying subscriber gets its turn and the number
// replaying at once is bounded. Under contention — some subscriber waits
// for a slot — each slot also keeps a duty cycle: the time it was held
// accrues as rest, taken (by the subscriber giving it back, before the next
// turn) once it reaches slotRestQuantum, so a slot is busy at most
// ReplayDuty of the time (half, by default) and replay — reading, rendering
// and socket writes, whose kernel work on loopback includes the receiver's —
// takes at most that share of a CPU per slot, however many subscribers wait
// for it. A replay that waits for no one never rests: one subscriber alone
// reads the archive at full speed.
type readerSlots struct {
	ch      chan *readerSlot
	duty    float64       // the share of time a slot may be busy (ReplayDuty)
	waiting *atomic.Int64 // subscribers blocked in acquire
}

// readerSlot is one slot's rest still owed.
type readerSlot struct{ rest time.Duration }

// Rest is taken in quanta of at least slotRestQuantum (fewer, longer
// sleeps than one per batch, which would cost more than they save) and at
// most maxSlotRest (a turn the OS stretched must not park a subscriber for
// long).
const (
	slotRestQuantum = 5 * time.Millisecond
	maxSlotRest     = 50 * time.Millisecond
)

func newReaderSlots(n int, duty float64) readerSlots {
	r := readerSlots{ch: make(chan *readerSlot, n), duty: duty, waiting: new(atomic.Int64)}
	for i := 0; i < n; i++ {
		r.ch <- &readerSlot{}
	}
	return r
}

// acquire waits for a slot; nil when ctx ends or the connection must stop
// first (the reason stays queued in ended).
func (r readerSlots) acquire(ctx context.Context, sub *subscriber) *readerSlot {
	select {
	case sl := <-r.ch:
		return sl
	default:
	}
	r.waiting.Add(1)
	defer r.waiting.Add(-1)
	select {
	case sl := <-r.ch:
		// Handed the slot by the releasing subscriber, this goroutine would
		// run next on its processor, inheriting its time slice: a chain of
		// replays could hold a processor for a whole slice while a live
		// subscriber's goroutine waits in its queue. Yield first.
		runtime.Gosched()
		return sl
	case <-ctx.Done():
		return nil
	case e := <-sub.ended:
		sub.end(e.reason, e.detail) // put it back for the main loop
		return nil
	}
}

// release gives sl back after a turn that began at since, first resting
// what the slot owes once that is a quantum, if anyone waits for a slot.
func (r readerSlots) release(sl *readerSlot, since time.Time) {
	if r.duty < 1 && r.waiting.Load() > 0 {
		sl.rest += time.Duration(float64(time.Since(since)) * (1 - r.duty) / r.duty)
		if sl.rest >= slotRestQuantum {
			time.Sleep(min(sl.rest, maxSlotRest))
			sl.rest = 0
		}
	}
	r.ch <- sl
}

// msgBucket is a token bucket over one connection's client messages
// (data frames and pings), owned by its reader goroutine.
type msgBucket struct {
	rate, burst, tokens float64
	last                time.Time
}

func newMsgBucket(rate float64, burst int, now time.Time) msgBucket {
	return msgBucket{rate: rate, burst: float64(burst), tokens: float64(burst), last: now}
}

// take spends one token; false when none is left.
func (b *msgBucket) take(now time.Time) bool {
	b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// maxLogDetail bounds a client-influenced detail in a log line.
const maxLogDetail = 256

// lineEvery is the interval of the lines a client's actions cause (a
// refusal, a disconnect): one per reason per interval, standing for the
// occurrences since the last; every occurrence is counted.
const lineEvery = time.Minute
