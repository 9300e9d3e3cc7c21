package retry

// sched.go owns the in-memory scheduler of one run: the bounded queue of due
// repos, the global and per-host concurrency gates (S2), the set of DIDs
// queued or running (deduplication), and the parked hosts (S4). Its memory
// is bounded by Config.Queue items, Config.Workers running jobs and the hosts
// parked right now; it never holds the candidate set or the host set (S3).

import (
	"context"
	"sync"
)

// item is one due repo on its way to a worker.
type item struct {
	did  string
	host string // gate key: the final host recorded on the repo; "" = unknown
	// count: how the pass that offered it counted it as due.
	count dueMark
}

// dueMark is how the passes counted a DID as due while it is queued or
// running: the full pass that counted it last (0: none; the count it
// makes is set as it ends, see exec.leftDue), and whether a pass counted
// it at all since it was queued (a full pass, or a Wake's pass reading it
// newly due), not only read it again.
type dueMark struct {
	pass    uint64
	counted bool
}

// gate is one host's share: its queued items (FIFO) and running jobs. It
// exists only while the host has something queued or running.
type gate struct {
	host    string
	running int
	q       []item
	head    int
	inReady bool
}

func (g *gate) queued() int { return len(g.q) - g.head }

func (g *gate) push(it item) {
	if g.head > 0 && g.head >= len(g.q)/2 {
		n := copy(g.q, g.q[g.head:])
		clear(g.q[n:])
		g.q, g.head = g.q[:n], 0
	}
	g.q = append(g.q, it)
}

func (g *gate) pop() item {
	it := g.q[g.head]
	g.q[g.head] = item{}
	g.head++
	if g.head == len(g.q) {
		g.q, g.head = g.q[:0], 0
	}
	return it
}

// offer outcomes.
type offerResult int

const (
	offerQueued   offerResult = iota
	offerInFlight             // already queued or running
	offerParked               // the host is parked
	offerHostFull             // the host's share of the queue is full
)

type sched struct {
	workers, hostWorkers int
	queueCap, hostCap    int
	now                  func() int64 // unix µs
	m                    *Metrics
	relay                string // the host every download is asked of first; "" = none
	// maxParkUS is the longest park the runner writes (Runner.maxPark); a
	// park ending further ahead was written by a clock that was ahead
	// and counts as over. 0: no bound.
	maxParkUS int64

	mu        sync.Mutex
	gates     map[string]*gate
	ready     []*gate // gates that may have an item dispatched, round robin
	readyHead int
	members   map[string]dueMark // DIDs queued or running: how passes counted each
	queued    int
	running   int
	parked    map[string]int64 // host → parked until (unix µs)
	// ended are the hosts whose park ended and was forgotten here; the
	// runner clears their durable park (takeEnded), so that host/ keeps
	// no row for a host that has nothing else to keep.
	ended   []string
	changed chan struct{} // closed and replaced on every change

	maxQueued, maxMembers int
}

func newSched(workers, hostWorkers, queueCap, hostCap int, now func() int64, m *Metrics) *sched {
	return &sched{
		workers: workers, hostWorkers: hostWorkers, queueCap: queueCap, hostCap: hostCap, now: now, m: m,
		gates:   make(map[string]*gate),
		members: make(map[string]dueMark),
		parked:  make(map[string]int64),
		changed: make(chan struct{}),
	}
}

// broadcastLocked wakes everyone waiting for a change.
func (s *sched) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
	s.m.setLoad(s.running, s.queued)
}

func (s *sched) limit(g *gate) int {
	if g.host == "" {
		// The final host is unknown until a first download: such repos
		// share only the global limit (see doc.go).
		return s.workers
	}
	return s.hostWorkers
}

// parkedLocked reports whether host is parked now, forgetting expired parks.
func (s *sched) parkedLocked(host string, nowUS int64) bool {
	if host == "" {
		return false
	}
	until, ok := s.parked[host]
	if !ok {
		return false
	}
	if s.live(until, nowUS) {
		return true
	}
	s.forgetLocked(host)
	s.m.setParked(len(s.parked))
	return false
}

// forgetLocked drops host's ended park and queues the host for takeEnded.
func (s *sched) forgetLocked(host string) {
	delete(s.parked, host)
	s.ended = append(s.ended, host)
}

// takeEnded returns the hosts whose park ended since the last call.
func (s *sched) takeEnded() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ended := s.ended
	s.ended = nil
	return ended
}

// live reports whether a park until untilUS holds at nowUS: it has not
// ended, and it ends no further ahead than the longest park the runner
// writes (a park written while the clock ran ahead, and read after it was
// put right, would otherwise last as long as the clock was wrong). It
// reads only maxParkUS, set before the run starts, so it takes no lock.
func (s *sched) live(untilUS, nowUS int64) bool {
	return untilUS > nowUS && (s.maxParkUS <= 0 || untilUS-nowUS <= s.maxParkUS)
}

// blockedLocked reports whether an item of host may not be queued now: its
// host is parked, or the relay every download passes through is.
func (s *sched) blockedLocked(host string, nowUS int64) bool {
	return s.parkedLocked(host, nowUS) || s.parkedLocked(s.relay, nowUS) // "" is never parked
}

func (s *sched) eligibleLocked(g *gate, nowUS int64) bool {
	return g.queued() > 0 && g.running < s.limit(g) && !s.parkedLocked(g.host, nowUS)
}

func (s *sched) makeReadyLocked(g *gate, nowUS int64) {
	if !g.inReady && s.eligibleLocked(g, nowUS) {
		g.inReady = true
		s.ready = append(s.ready, g)
	}
}

// offer queues it unless it is already queued or running, its host is
// parked, or its host's share of the queue is full. It blocks while the
// whole queue is full (backpressure on the candidate scan). A DID already
// queued or running that the offering pass counted is marked so
// (it.count), which done returns.
func (s *sched) offer(ctx context.Context, it item) (offerResult, error) {
	for {
		s.mu.Lock()
		if m, ok := s.members[it.did]; ok {
			if it.count.counted {
				m.counted = true
				if it.count.pass != 0 {
					m.pass = it.count.pass
				}
				s.members[it.did] = m
			}
			s.mu.Unlock()
			return offerInFlight, nil
		}
		nowUS := s.now()
		if s.blockedLocked(it.host, nowUS) {
			s.mu.Unlock()
			return offerParked, nil
		}
		g := s.gates[it.host]
		if it.host != "" && g != nil && g.queued() >= s.hostCap {
			s.mu.Unlock()
			return offerHostFull, nil
		}
		if s.queued < s.queueCap {
			if g == nil {
				g = &gate{host: it.host}
				s.gates[it.host] = g
			}
			g.push(it)
			s.queued++
			s.members[it.did] = it.count
			s.maxQueued = max(s.maxQueued, s.queued)
			s.maxMembers = max(s.maxMembers, len(s.members))
			s.makeReadyLocked(g, nowUS)
			s.broadcastLocked()
			s.mu.Unlock()
			return offerQueued, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// take blocks until an item may run (a host slot is free; the caller is one
// of Workers goroutines, which is the global gate) and marks it running.
func (s *sched) take(ctx context.Context) (item, bool) {
	for {
		s.mu.Lock()
		nowUS := s.now()
		for s.readyHead < len(s.ready) {
			g := s.ready[s.readyHead]
			s.ready[s.readyHead] = nil
			s.readyHead++
			g.inReady = false
			if !s.eligibleLocked(g, nowUS) {
				continue
			}
			it := g.pop()
			g.running++
			s.running++
			s.queued--
			s.makeReadyLocked(g, nowUS)
			s.compactReadyLocked()
			s.broadcastLocked()
			s.mu.Unlock()
			return it, true
		}
		s.compactReadyLocked()
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return item{}, false
		}
	}
}

func (s *sched) compactReadyLocked() {
	if s.readyHead == len(s.ready) {
		s.ready, s.readyHead = s.ready[:0], 0
		return
	}
	if s.readyHead > 64 && s.readyHead >= len(s.ready)/2 {
		n := copy(s.ready, s.ready[s.readyHead:])
		clear(s.ready[n:])
		s.ready, s.readyHead = s.ready[:n], 0
	}
}

// done releases it's slots; an idle gate is dropped. It returns how the
// passes counted it.did as due since it was queued.
func (s *sched) done(it item) (counted dueMark) {
	s.mu.Lock()
	defer s.mu.Unlock()
	counted = s.members[it.did]
	delete(s.members, it.did)
	s.running--
	if g := s.gates[it.host]; g != nil {
		g.running--
		if g.running == 0 && g.queued() == 0 {
			delete(s.gates, it.host)
		} else {
			s.makeReadyLocked(g, s.now())
		}
	}
	s.broadcastLocked()
	return counted
}

// park parks host until untilUS (never shortening an existing park), drops
// the host's queued items — every queued item when host is the relay —
// (a later pass finds them again: they are not failures), and returns the
// effective park.
func (s *sched) park(host string, untilUS int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.parked[host]; ok && cur > untilUS {
		untilUS = cur
	}
	s.parked[host] = untilUS
	if s.relay != "" && host == s.relay {
		for _, g := range s.gates {
			s.dropQueuedLocked(g)
		}
	} else if g := s.gates[host]; g != nil {
		s.dropQueuedLocked(g)
	}
	s.m.setParked(len(s.parked))
	s.broadcastLocked()
	return untilUS
}

// dropQueuedLocked drops g's queued items, and g itself when nothing of it
// runs.
func (s *sched) dropQueuedLocked(g *gate) {
	for g.queued() > 0 {
		delete(s.members, g.pop().did)
		s.queued--
	}
	if g.running == 0 {
		delete(s.gates, g.host)
	}
}

// restorePark records a durable park read at startup; one that has ended
// is queued for takeEnded instead.
func (s *sched) restorePark(host string, untilUS int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.live(untilUS, s.now()):
		s.ended = append(s.ended, host)
	case untilUS > s.parked[host]:
		s.parked[host] = untilUS
	}
	s.m.setParked(len(s.parked))
}

// parkedHosts sweeps expired parks and returns the parked hosts with their
// reset, and the earliest reset (0 when none).
func (s *sched) parkedHosts(limit int) (hosts []ParkedHost, n int, next int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nowUS := s.now()
	for h, until := range s.parked {
		if !s.live(until, nowUS) {
			s.forgetLocked(h)
			continue
		}
		if next == 0 || until < next {
			next = until
		}
		if len(hosts) < limit {
			hosts = append(hosts, ParkedHost{Host: h, UntilUS: until})
		}
	}
	s.m.setParked(len(s.parked))
	return hosts, len(s.parked), next
}

// parkEnded sweeps expired parks and reports whether a park has ended
// since the runner last cleared ended parks (takeEnded, after every pass).
func (s *sched) parkEnded() bool {
	s.parkedHosts(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ended) > 0
}

type load struct {
	queued, running, gates, members int
	maxQueued, maxMembers           int
	changed                         <-chan struct{}
}

func (s *sched) load() load {
	s.mu.Lock()
	defer s.mu.Unlock()
	return load{queued: s.queued, running: s.running, gates: len(s.gates), members: len(s.members),
		maxQueued: s.maxQueued, maxMembers: s.maxMembers, changed: s.changed}
}

// drained returns the hosts of behind whose queue share holds at most
// limit items (a resume pass may read on for them), and the channel
// closed on the next change.
func (s *sched) drained(behind map[string][]byte, limit int) (hosts map[string]bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for h := range behind {
		if g := s.gates[h]; g == nil || g.queued() <= limit {
			if hosts == nil {
				hosts = map[string]bool{}
			}
			hosts[h] = true
		}
	}
	return hosts, s.changed
}
