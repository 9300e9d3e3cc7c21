package bootstrap

// lanes.go owns how the listing lanes run: a bounded pool of runners, each
// taking the next lane that still lists, so a roster of a million hosts
// costs a few hundred goroutines, not one per host. A host whose page
// failed, or whose listing was cut for failing, waits for its next attempt
// parked, holding no runner.

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/upstream"
)

// laneRunnersPerWorker bounds the runners: at most this many per worker
// (and no more than the lanes that list). Workers of them can hold a
// listRepos request (listSlots); the others wait for a slot, wait for
// window credit (a large host's lane, for most of the run; any lane while
// the hosts' pages fill the whole window) or hand a page to the
// coordinator, without leaving those request slots idle (a page's retry
// backoff is waited parked, on no runner). 16 (1,600 runners at the default 100 workers, a few
// tens of MiB of stacks at most) leaves room for many such lanes at once;
// a roster of a million hosts still costs no more.
const laneRunnersPerWorker = 16

// laneRun is a lane being listed: where it lists from next, what its
// listing may still name in the run, the cursors it has returned, and its
// retries: the page's (tries) and the host's (retries).
type laneRun struct {
	host     string
	cursor   string
	left     *int64 // nil: no bound (the relay's)
	window   *credit
	seen     upstream.CursorSet
	tries    pageTries
	retries  int
	due      time.Time // parked: when it is listed again
	answered bool      // the host has answered a request in this run (listOnce)
}

// lanePool holds the lanes not yet begun, in roster order, and those
// parked until their next attempt, the earliest due first.
type lanePool struct {
	mu      sync.Mutex
	todo    []lane
	windows map[string]*credit
	parked  parkedLanes
}

// next is the lane a runner lists next and how long it waits first: a
// lane not yet begun, else the parked lane due first. Every lane is begun
// before any is tried again, so hosts that are down, however many and
// wherever in the roster, delay a healthy host's first page by at most
// their own first tries. False: none is left (a lane parked later is
// parked by a runner, which then takes it).
//
// A runner waits out its lane's due time holding it. That never holds back
// a lane due sooner: once every lane is begun, a runner takes a parked
// lane only when it is the one due first, and a lane is parked only by a
// runner that then takes the one due first itself (that lane, or one due
// sooner), so while a runner waits, every lane waiting unheld is due no
// sooner than its own.
func (p *lanePool) next(now time.Time) (*laneRun, time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.todo) > 0 && !p.todo[0].listing {
		p.todo = p.todo[1:]
	}
	if len(p.parked) > 0 && len(p.todo) == 0 {
		r := heap.Pop(&p.parked).(*laneRun)
		return r, r.due.Sub(now), true
	}
	if len(p.todo) == 0 {
		return nil, 0, false
	}
	l := p.todo[0]
	p.todo = p.todo[1:]
	r := &laneRun{host: l.host, cursor: l.start.cursor.Cursor, window: p.windows[l.host]}
	if l.bound > 0 {
		left := l.bound
		r.left = &left
	}
	return r, 0, true
}

// park holds r until its next attempt (r.due).
func (p *lanePool) park(r *laneRun) {
	p.mu.Lock()
	heap.Push(&p.parked, r)
	p.mu.Unlock()
}

// parkedLanes is a min-heap of lanes by due time (container/heap).
type parkedLanes []*laneRun

func (h parkedLanes) Len() int           { return len(h) }
func (h parkedLanes) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h parkedLanes) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *parkedLanes) Push(x any)        { *h = append(*h, x.(*laneRun)) }
func (h *parkedLanes) Pop() any {
	old := *h
	r := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return r
}

// startLanes starts the runners of the lanes that list: at most
// laneRunnersPerWorker per worker.
func (c *coordinator) startLanes(ctx context.Context, wg *sync.WaitGroup, listing int) {
	pool := &lanePool{todo: c.lanes, windows: c.windows}
	for range min(listing, laneRunnersPerWorker*c.cfg.Workers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.runLanes(ctx, pool)
		}()
	}
}

// runLanes lists lanes from pool until none is left, reporting the end of
// each (nil, or the error that ends the run) on enumErr.
func (c *coordinator) runLanes(ctx context.Context, pool *lanePool) {
	for {
		r, wait, ok := pool.next(c.cfg.Now())
		if !ok {
			return
		}
		var err error
		if wait > 0 {
			err = c.cfg.Sleep(ctx, wait)
		}
		if err == nil {
			var again bool
			if again, err = c.b.listLane(ctx, r, c.pages); again {
				pool.park(r)
				continue
			}
		}
		select {
		case c.enumErr <- err:
		case <-ctx.Done():
			return
		}
	}
}

// gaveUpLine says a host's listing is given up on after its retries.
const gaveUpLine = "bootstrap: a host's listing is still cut after its retries; bootstrap ends without the rest of it, discovery lists it again after bootstrap"

// listLane lists r's lane from its cursor until the listing ends (false),
// or until it waits to be listed again (true: parked until r.due, while
// every other lane goes on):
//
//   - a host's page failed with retries left (listPage): it is asked again
//     after the page's backoff, on the same budgets (a host failing on
//     /status since a cut shows that try as its next attempt);
//   - a host's announced rate limit is spent (listOnce): it is asked after
//     the reset, no try spent;
//   - a host's listing was cut because it kept failing (down, overloaded:
//     upstream.CutRetriesExhausted) with host retries left: it is listed
//     again from where it was cut after hostRetryBase doubling to
//     hostRetryMax, failing on /status meanwhile with its next attempt;
//     bootstrap's end waits for it only HostRetries times. Spent, the host
//     is left failing: discovery lists it again after bootstrap, a restart
//     before merging from its checkpoint.
//
// A listing cut for its bytes (malformed, too large, refused, a cursor too
// long) is not asked again in this run: the same request gets the same
// bytes.
//
// A host's listing names at most its bound of entries in the run, retries
// included (upstream.HostListingBound; the relay's: no bound).
func (b *Bootstrap) listLane(ctx context.Context, r *laneRun, out chan<- *pageMsg) (again bool, err error) {
	cfg := &b.cfg
	cut, retryIn, err := b.enumerate(ctx, r, out)
	if retryIn > 0 {
		r.due = cfg.Now().Add(retryIn)
		b.hosts().tryingAt(r.host, r.due)
		return true, nil
	}
	if err != nil || cut != upstream.CutRetriesExhausted || r.host == "" {
		return false, err
	}
	if r.retries >= cfg.HostRetries {
		cfg.Metrics.hostGaveUp()
		b.warnHost(r.host, "gave_up", gaveUpLine, "host", r.host, "retries", r.retries)
		return false, nil
	}
	bo := backoff.Policy{Base: hostRetryBase, Max: hostRetryMax}
	wait := bo.Draw(r.retries, nil)
	r.retries++
	cfg.Metrics.hostRetry()
	r.due = cfg.Now().Add(wait)
	b.hosts().retrying(r.host, r.retries, r.due)
	return true, nil
}
