package archive

// This file owns the live log: the in-memory tail of recent durable events
// that the writer publishes after each synced batch and readers follow. It
// never holds an event a crash could take back (D1).

import (
	"math"
	"sync"
	"sync/atomic"
)

// LiveEntry is one held event of the live log with a memo slot: an opaque
// value a reader may attach to the event (subscribe keeps the event's
// rendered JSON and compressed frames there, so every subscriber shares one
// rendering). The archive never looks inside a memo; it is dropped with the
// entry when the event leaves the log. What a memo holds counts in the log's
// byte bound as its maker charges it (Charge).
type LiveEntry struct {
	Event     *Event // shared: never modify it
	memo      atomic.Pointer[any]
	forgotten atomic.Bool
	log       *LiveLog
	charged   int64 // memo bytes counted in log.bytes; guarded by log.mu
}

// Charge counts n more bytes held by the entry's memo in the log's byte
// bound, dropping the oldest entries when the log is over it. An entry the
// log no longer holds is not counted: its memo goes with the last reader.
func (e *LiveEntry) Charge(n int) {
	l := e.log
	if l == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.evs) == l.head || e.Event.Seq < l.evs[l.head].Event.Seq {
		return
	}
	e.charged += int64(n)
	l.bytes += int64(n)
	l.trim()
}

// Forgotten reports whether a compaction pass removed the entry's row from
// the archive (it was superseded): a reader skips it, still advancing its
// position past its seq, so the log stays contiguous.
func (e *LiveEntry) Forgotten() bool { return e.forgotten.Load() }

// Memo returns the value attached with SetMemo or LoadOrStoreMemo, or nil.
func (e *LiveEntry) Memo() any {
	if p := e.memo.Load(); p != nil {
		return *p
	}
	return nil
}

// LoadOrStoreMemo attaches v unless a memo is already attached, and returns
// the attached memo (v when it won, the earlier one otherwise). Concurrent
// callers all get the same value back.
func (e *LiveEntry) LoadOrStoreMemo(v any) any {
	if p := e.memo.Load(); p != nil {
		return *p
	}
	if e.memo.CompareAndSwap(nil, &v) {
		return v
	}
	return *e.memo.Load()
}

// LiveLog is a byte-bounded window of the most recent durable events, in seq
// order, with a broadcast that wakes readers on every publish.
type LiveLog struct {
	mu     sync.RWMutex
	evs    []*LiveEntry // evs[head:] are held, contiguous in publish order
	head   int
	bytes  int64
	max    int64
	tip    uint64 // highest durable seq published (or found at start)
	wake   chan struct{}
	closed bool
}

func newLiveLog(max int64, tip uint64) *LiveLog {
	return &LiveLog{max: max, tip: tip, wake: make(chan struct{})}
}

// EventBytes is what the live log counts for holding ev itself (its
// memos are counted as readers charge them, see LiveEntry.Charge).
func EventBytes(ev *Event) int64 { return eventBytes(ev) }

func eventBytes(ev *Event) int64 {
	return int64(96 + len(ev.DID) + len(ev.Collection) + len(ev.RKey) + len(ev.Rev) +
		len(ev.CID) + len(ev.Record) + len(ev.Handle) + len(ev.Status))
}

// publish appends durable events and wakes every waiting reader.
func (l *LiveLog) publish(evs []*Event) {
	if len(evs) == 0 {
		return
	}
	// One allocation per batch for the entries; the batch's array lives as
	// long as any of its entries is held or being read.
	ents := make([]LiveEntry, len(evs))
	l.mu.Lock()
	for i, ev := range evs {
		ents[i].Event, ents[i].log = ev, l
		l.evs = append(l.evs, &ents[i])
		l.bytes += eventBytes(ev)
	}
	l.tip = evs[len(evs)-1].Seq
	l.trim()
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
}

// trim drops the oldest entries (and what their memos were charged) while
// the log is over its bound, always keeping the newest. Callers hold l.mu.
func (l *LiveLog) trim() {
	for l.bytes > l.max && l.head < len(l.evs)-1 {
		e := l.evs[l.head]
		l.bytes -= eventBytes(e.Event) + e.charged
		l.evs[l.head] = nil
		l.head++
	}
	if l.head > len(l.evs)/2 && l.head > 1024 {
		n := copy(l.evs, l.evs[l.head:])
		clear(l.evs[n:])
		l.evs = l.evs[:n]
		l.head = 0
	}
}

// forget marks the held entries of the given seqs as forgotten: a
// compaction pass removed their rows from the archive.
func (l *LiveLog) forget(seqs []uint64) {
	if len(seqs) == 0 {
		return
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	held := l.evs[l.head:]
	if len(held) == 0 {
		return
	}
	floor := held[0].Event.Seq
	for _, s := range seqs {
		if s >= floor && s-floor < uint64(len(held)) {
			held[s-floor].forgotten.Store(true)
		}
	}
}

func (l *LiveLog) close() {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
	l.mu.Unlock()
}

// floor is the lowest seq the log holds (tip+1 when it holds none); it
// never goes down.
func (l *LiveLog) floor() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	_, floor := l.held(math.MaxUint64)
	return floor
}

// Tip is the highest durable seq.
func (l *LiveLog) Tip() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tip
}

// Closed reports whether the writer has stopped: no event will be
// published any more.
func (l *LiveLog) Closed() bool {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.closed
}

// Wait returns a channel closed at the next publish (or when the writer
// stops). Take it before reading, then wait on it, so no publish is missed.
func (l *LiveLog) Wait() <-chan struct{} {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		c := make(chan struct{})
		close(c)
		return c
	}
	return l.wake
}

// Read appends to dst up to max held events with seq ≥ from. floor is the
// lowest seq the log holds (tip+1 when it holds none): a reader whose next
// seq is below floor must read the store instead. Events are shared: never
// modify them.
func (l *LiveLog) Read(from uint64, dst []*Event, max int) (out []*Event, floor uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	held, floor := l.held(from)
	for i := 0; i < len(held) && i < max; i++ {
		dst = append(dst, held[i].Event)
	}
	return dst, floor
}

// ReadEntries is Read returning the held entries, so the caller can use
// their memo slots. Same contract as Read: up to max entries with seq ≥
// from, in seq order, contiguous; floor is the lowest held seq (tip+1 when
// none is held).
func (l *LiveLog) ReadEntries(from uint64, dst []*LiveEntry, max int) (out []*LiveEntry, floor uint64) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	held, floor := l.held(from)
	if len(held) > max {
		held = held[:max]
	}
	return append(dst, held...), floor
}

// held returns the held entries with seq ≥ from and the floor. Callers hold
// l.mu.
func (l *LiveLog) held(from uint64) ([]*LiveEntry, uint64) {
	held := l.evs[l.head:]
	if len(held) == 0 {
		return nil, l.tip + 1
	}
	floor := held[0].Event.Seq
	if from > floor {
		// Seqs are contiguous within one writer's log.
		i := from - floor
		if i > uint64(len(held)) {
			i = uint64(len(held))
		}
		held = held[i:]
	}
	return held, floor
}
