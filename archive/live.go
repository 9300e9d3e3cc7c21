package archive

// This file owns the live log: the in-memory tail of recent durable events
// that the writer publishes after each synced batch and readers follow. It
// never holds an event a crash could take back (D1).

import "sync"

// LiveLog is a byte-bounded window of the most recent durable events, in seq
// order, with a broadcast that wakes readers on every publish.
type LiveLog struct {
	mu     sync.RWMutex
	evs    []*Event // evs[head:] are held, contiguous in publish order
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

func eventBytes(ev *Event) int64 {
	return int64(96 + len(ev.DID) + len(ev.Collection) + len(ev.RKey) + len(ev.Rev) +
		len(ev.CID) + len(ev.Record) + len(ev.Handle) + len(ev.Status))
}

// publish appends durable events and wakes every waiting reader.
func (l *LiveLog) publish(evs []*Event) {
	if len(evs) == 0 {
		return
	}
	l.mu.Lock()
	for _, ev := range evs {
		l.evs = append(l.evs, ev)
		l.bytes += eventBytes(ev)
	}
	l.tip = evs[len(evs)-1].Seq
	for l.bytes > l.max && l.head < len(l.evs)-1 {
		l.bytes -= eventBytes(l.evs[l.head])
		l.evs[l.head] = nil
		l.head++
	}
	if l.head > len(l.evs)/2 && l.head > 1024 {
		n := copy(l.evs, l.evs[l.head:])
		clear(l.evs[n:])
		l.evs = l.evs[:n]
		l.head = 0
	}
	close(l.wake)
	l.wake = make(chan struct{})
	l.mu.Unlock()
}

func (l *LiveLog) close() {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.wake)
	}
	l.mu.Unlock()
}

// Tip is the highest durable seq.
func (l *LiveLog) Tip() uint64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.tip
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
	held := l.evs[l.head:]
	if len(held) == 0 {
		return dst, l.tip + 1
	}
	floor = held[0].Seq
	i := 0
	if from > floor {
		// Seqs are contiguous within one writer's log.
		i = int(from - floor)
		if i > len(held) {
			i = len(held)
		}
	}
	for ; i < len(held) && max > 0; i++ {
		dst = append(dst, held[i])
		max--
	}
	return dst, floor
}
