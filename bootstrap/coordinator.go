package bootstrap

// coordinator.go owns one run of the coordinator: the goroutines it starts
// (the enumerators, the recorder, the workers, the checkpointer) and the
// loop that feeds listed pages to the recorder, recorded repos to the
// workers, their durable outcomes to each lane's watermark, and the
// watermarks' checkpoints to the checkpointer. Only the loop touches the
// coordinator's state; the goroutines talk to it over channels.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/ident"
	"golang.org/x/sync/semaphore"
)

// coordinate runs the enumerators (the relay's listing, or each host's,
// from a bounded pool of lane runners), the workers and the scheduler, and
// owns the watermarks. It returns nil once the listing has ended and every
// repo it dispatched is durably terminal; parent's error once parent ends;
// else the first fatal error.
func (b *Bootstrap) coordinate(parent context.Context, lanes []lane) error {
	ctx, cancel := context.WithCancel(parent)
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: deferred calls run last in, first out
	defer cancel()
	c := b.newCoordinator(parent, lanes)
	c.startEnumerators(ctx, &wg)
	c.startServers(ctx, &wg)
	defer c.stopServers()
	defer c.stopWake()
	ticker := time.NewTicker(b.cfg.ProgressEvery)
	defer ticker.Stop()
	b.prog.set(func(p *Progress) {
		p.State = StateRunning
		p.ListingFinished = c.enumerating == 0 && len(b.cfg.Repos) == 0
		p.Checkpoint = describe(c.durable)
	})
	b.tick(true)
	for {
		if c.finished() {
			return c.finish()
		}
		if err := c.recordNext(); err != nil {
			return err
		}
		out, head := c.nextJob()
		c.report()
		var err error
		select {
		case <-c.wakeAt():
			// A parked host's reset has passed: nextJob wakes it. The timer
			// is set again for whatever is parked then, even for the same
			// time (a clock read just short of it).
			c.wakeTime = time.Time{}
		case out <- head:
			c.ready.take(head)
			c.inflight++
		case rb := <-c.recorded:
			err = c.onRecorded(rb)
		case pm := <-c.pages:
			err = c.onPage(pm)
		case e := <-c.enumErr:
			err = c.onListingEnd(e)
		case o := <-c.results:
			err = c.onResult(o)
		case e := <-c.ckDone:
			err = c.onCheckpoint(e)
		case <-ticker.C:
			b.tick(false)
		case <-b.cfg.Writer.Done():
			return fmt.Errorf("bootstrap: %w", writerStopped(b.cfg.Writer))
		case <-parent.Done():
			return parent.Err()
		}
		if err != nil {
			return err
		}
	}
}

// coordinator is the state of one coordinate call.
type coordinator struct {
	b      *Bootstrap
	cfg    *Config
	parent context.Context // the run's: its end stops every send the loop makes
	lanes  []lane
	fleet  bool // hosts mode: the lanes are hosts

	// To and from the goroutines startEnumerators and startServers start.
	pages     chan *pageMsg
	enumErr   chan error // an enumerator's end; nil once every one has ended
	dispatch  chan job
	results   chan outcome
	recordReq chan []string
	recorded  chan recordedBatch
	ckReq     chan checkpoint
	ckDone    chan error

	// Each lane has its own watermark and window (the relay's the whole
	// window; a host's its share, at least a page, drawing on the whole
	// window too: credit), so a slow host holds back its own listing and at
	// most its share of the others'.
	wms         map[string]*watermark
	windows     map[string]*credit
	enumerating int // enumerators not yet ended

	pageOf       map[string]*page    // a dispatched repo's page
	queue        []string            // dispatched by a page, not yet durable as not_started
	unrecorded   map[string]struct{} // the repos of queue the store does not know yet (Progress.Unrecorded)
	ready        *scheduler          // durable as not_started, waiting for a worker
	recording    bool                // a batch is with the recorder
	recordingLen int                 // its repos
	batchSize    int
	inflight     int // repos with the workers

	// Hosts mode: how long a host's requests would wait for the reset of
	// a budget it announced spent (nil: never), and the timer that wakes
	// the loop at the first parked host's reset (wakeAt).
	pacer    hostPacer
	wake     *time.Timer
	wakeTime time.Time

	checkpointing   bool // a resumable cursor is committed (not the debug modes)
	ckOutstanding   bool // a checkpoint is with the checkpointer
	ckSubmitted     checkpoint
	durable         checkpoint // the relay lane's last durable checkpoint
	durableCovered  int64      // entries covered by the durable checkpoints
	coveredAtSubmit int64      // covered() when ckSubmitted was submitted
	enumerated      int64      // entries listed
	pageIdx         int64
}

func (b *Bootstrap) newCoordinator(parent context.Context, lanes []lane) *coordinator {
	cfg := &b.cfg
	c := &coordinator{
		b: b, cfg: cfg, parent: parent, lanes: lanes, fleet: lanes[0].host != "",
		pages:         make(chan *pageMsg),
		enumErr:       make(chan error),
		dispatch:      make(chan job),
		results:       make(chan outcome),
		recordReq:     make(chan []string),
		recorded:      make(chan recordedBatch),
		ckReq:         make(chan checkpoint),
		ckDone:        make(chan error),
		wms:           make(map[string]*watermark, len(lanes)),
		windows:       make(map[string]*credit, len(lanes)),
		pageOf:        make(map[string]*page),
		unrecorded:    make(map[string]struct{}),
		batchSize:     max(cfg.Workers, 16),
		checkpointing: !cfg.Debug(),
		durable:       lanes[0].start,
	}
	hostCap := cfg.Workers // relay mode: the download client caps hosts
	laneWindow := int64(cfg.Window)
	var shared *credit // relay mode: the one lane's window is the whole window
	if c.fleet {
		hostCap = cfg.HostWorkers
		laneWindow = max(int64(cfg.PageLimit), int64(cfg.Window/len(lanes)))
		shared = newCredit(int64(cfg.Window), nil)
	}
	c.ready = newScheduler(hostCap)
	if p, ok := cfg.Fleet.(hostPacer); ok && c.fleet {
		c.pacer = p
	}
	for _, l := range lanes {
		l.start.host = l.host
		c.wms[l.host] = &watermark{pending: l.start}
		c.windows[l.host] = newCredit(laneWindow, shared)
	}
	return c
}

// startEnumerators starts the debug list's feeder, or the runners of the
// lanes that list (lanes.go): a bounded pool, not a goroutine per lane.
// Each lane's end is reported once on enumErr, counted down from
// enumerating.
func (c *coordinator) startEnumerators(ctx context.Context, wg *sync.WaitGroup) {
	if len(c.cfg.Repos) > 0 {
		c.enumerating = 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.b.listed(ctx, c.pages)
			select {
			case c.enumErr <- err:
			case <-ctx.Done():
			}
		}()
		return
	}
	for _, l := range c.lanes {
		if l.listing {
			c.enumerating++
		}
	}
	c.startLanes(ctx, wg, c.enumerating)
}

// startServers starts the recorder, the workers and the checkpointer.
//
// The recorder makes batches of dispatched repos durable as not_started
// just before they go to the workers, so after a crash only those in
// flight or about to be (about two batches) are left not_started, hence
// pending; the rest of their pages is simply listed again. The
// checkpointer makes one checkpoint at a time durable and reports it, so
// the loop never blocks on the writer for one.
func (c *coordinator) startServers(ctx context.Context, wg *sync.WaitGroup) {
	b := c.b
	ahead := b.resolveAhead(ctx, wg)
	serve(ctx, wg, c.recordReq, c.recorded, func(batch []string) recordedBatch {
		for i := 0; ahead != nil && i < len(batch); i++ {
			select {
			case ahead <- batch[i]:
			case <-ctx.Done():
			}
		}
		return recordedBatch{dids: batch, err: b.writeNotStarted(ctx, batch)}
	})
	for range c.cfg.Workers {
		serve(ctx, wg, c.dispatch, c.results, func(j job) outcome {
			res, err := c.cfg.Jobs.Run(ctx, backfill.Request{DID: j.did, Host: j.host})
			return outcome{job: j, res: res, err: err}
		})
	}
	serve(ctx, wg, c.ckReq, c.ckDone, func(ck checkpoint) error { return b.writeCheckpoint(ctx, ck) })
}

// stopServers closes the servers' requests: each returns once it has
// answered the one it holds, or once ctx ends.
func (c *coordinator) stopServers() {
	close(c.ckReq)
	close(c.dispatch)
	close(c.recordReq)
}

// finished reports whether the run is done: the listing has ended and
// every repo it dispatched is durably terminal, every checkpoint durable.
func (c *coordinator) finished() bool {
	return c.enumerating == 0 && !c.outstanding() && len(c.queue) == 0 && c.ready.len() == 0 &&
		!c.recording && c.inflight == 0 && !c.ckOutstanding
}

// finish ends a finished run.
func (c *coordinator) finish() error {
	for _, wm := range c.wms {
		if _, dirty := wm.take(); dirty && c.checkpointing {
			// Unreachable: advance submits whenever a watermark moves.
			return errors.New("bootstrap: internal: checkpoint left unsubmitted")
		}
	}
	c.report() // nothing queued or in flight: the last result came after the last report
	c.b.prog.set(func(p *Progress) { p.State = StateDone; p.Checkpoint = describe(c.durable) })
	c.b.tick(true)
	c.cfg.Logger.Info("bootstrap: done: the listing has ended and every repo is durably terminal")
	return nil
}

// recordNext hands the recorder the next batch of the queue when it is
// idle and the workers are short of ready repos (a parked host's are not
// ready for them).
func (c *coordinator) recordNext() error {
	if c.recording || len(c.queue) == 0 || c.ready.dispatchable() >= c.cfg.Workers {
		return nil
	}
	n := min(len(c.queue), c.batchSize)
	batch := slices.Clone(c.queue[:n])
	clear(c.queue[:n])
	c.queue = c.queue[n:]
	c.recording, c.recordingLen = true, n
	select {
	case c.recordReq <- batch: // the recorder is idle: it takes it at once
		return nil
	case <-c.parent.Done():
		return c.parent.Err()
	}
}

// nextJob is the next ready repo and the channel to send it on: nil (a
// send that never happens) when none is ready.
//
// In hosts mode a host whose announced rate limit is spent (its requests
// would wait for the reset: hostPacer) is parked until its reset instead
// (scheduler.park): handed to a worker, its repo would wait for the reset
// holding the worker, up to upstream.RetryAfterCeiling, and a few such
// hosts (a hostile one announces its budget spent on every answer) would
// hold every worker while every other host's repos waited. Parked, it
// holds none; its repos are handed out once the reset has passed, in this
// run, with nothing charged to them.
func (c *coordinator) nextJob() (chan job, job) {
	now := c.cfg.Now()
	c.ready.wake(now)
	head, ok := c.ready.peek()
	for ok && c.fleet {
		// A repo listed again by a host with a newer rev is fetched there.
		if h := c.b.hostFor(head.did); h != head.host {
			c.ready.move(head, h)
		} else if wait := c.paceWait(head.host); wait > 0 {
			c.ready.park(head.host, now.Add(wait))
		} else {
			break
		}
		head, ok = c.ready.peek()
	}
	if !ok {
		return nil, head
	}
	return c.dispatch, head
}

// paceWait is how long a request of host would wait now for its announced
// reset; 0 without a pacer.
func (c *coordinator) paceWait(host string) time.Duration {
	if c.pacer == nil {
		return 0
	}
	return c.pacer.HostPaceWait(host)
}

// wakeAt is a channel that receives when the first parked host's reset
// has passed; nil (a receive that never happens) when no host is parked.
func (c *coordinator) wakeAt() <-chan time.Time {
	at, ok := c.ready.nextWake()
	if !ok {
		return nil
	}
	if c.wake == nil {
		c.wake = time.NewTimer(at.Sub(c.cfg.Now()))
	} else if !at.Equal(c.wakeTime) {
		c.wake.Reset(at.Sub(c.cfg.Now()))
	}
	c.wakeTime = at
	return c.wake.C
}

// stopWake stops wakeAt's timer.
func (c *coordinator) stopWake() {
	if c.wake != nil {
		c.wake.Stop()
	}
}

// report publishes the queue's size to the progress and the metrics.
func (c *coordinator) report() {
	queued, inflight, unrecorded := len(c.queue)+c.ready.len()+c.recordingLen, c.inflight, int64(len(c.unrecorded))
	c.b.prog.set(func(p *Progress) { p.Queued, p.InFlight, p.Unrecorded = queued, inflight, unrecorded })
	c.cfg.Metrics.setQueued(queued + inflight)
}

// onRecorded makes a recorded batch ready for the workers.
func (c *coordinator) onRecorded(rb recordedBatch) error {
	c.recording, c.recordingLen = false, 0
	if rb.err != nil {
		return c.b.stopped(c.parent, rb.err)
	}
	fresh := 0
	for _, d := range rb.dids {
		c.ready.push(c.b.hostFor(d), d)
		if _, ok := c.unrecorded[d]; ok {
			fresh++
			delete(c.unrecorded, d)
		}
	}
	// A batch also holds known repos listed again (an inactive not_started
	// repo now active): only the fresh ones are new.
	c.cfg.Metrics.discover(fresh, 0)
	c.b.prog.set(func(p *Progress) { p.Discovered += int64(fresh) })
	return nil
}

// onPage queues a listed page's repos and counts the page into its lane's
// watermark. A repo already dispatched by another page stays that page's:
// queued twice it would run twice, and the page whose count it was taken
// from would never complete (nor bootstrap end). record's reservation
// keeps this from happening; the check keeps a slip from hanging the run.
func (c *coordinator) onPage(pm *pageMsg) error {
	c.pageIdx++
	p := &page{idx: c.pageIdx, host: pm.host, reqCursor: pm.reqCursor, next: pm.next, final: pm.final, cut: pm.cut,
		entries: pm.entries, weight: pm.weight}
	for _, did := range pm.dispatch {
		if _, dup := c.pageOf[did]; dup {
			continue
		}
		c.pageOf[did] = p
		c.queue = append(c.queue, did)
		p.remaining++
	}
	for _, d := range pm.fresh {
		c.unrecorded[d] = struct{}{}
	}
	c.enumerated += int64(pm.entries)
	c.wms[pm.host].add(p)
	enumerated := c.enumerated
	c.b.prog.set(func(pr *Progress) {
		pr.Pages++
		pr.Enumerated = enumerated
		pr.Discovered += int64(pm.discovered)
	})
	return c.advance(pm.host)
}

// onListingEnd counts an enumerator's end: err is fatal.
func (c *coordinator) onListingEnd(err error) error {
	if err != nil {
		return c.b.stopped(c.parent, err)
	}
	if c.enumerating--; c.enumerating == 0 {
		c.enumErr = nil
		c.b.prog.set(func(p *Progress) { p.ListingFinished = len(c.cfg.Repos) == 0 })
	}
	return nil
}

// onResult counts a job's outcome, durably terminal, into its page.
func (c *coordinator) onResult(o outcome) error {
	c.inflight--
	c.ready.done(o.host)
	if o.err != nil {
		if errors.Is(o.err, backfill.ErrCanceled) && c.parent.Err() != nil {
			return c.parent.Err()
		}
		return fmt.Errorf("bootstrap: job %s: %w", o.did, o.err)
	}
	p := c.pageOf[o.did]
	delete(c.pageOf, o.did)
	c.b.mu.Lock()
	delete(c.b.inflight, o.did)
	c.b.mu.Unlock()
	c.b.prog.record(&o.res)
	if p == nil {
		return nil
	}
	c.wms[p.host].done(p)
	return c.advance(p.host)
}

// onCheckpoint records that the submitted checkpoint is durable and
// submits the next one.
func (c *coordinator) onCheckpoint(err error) error {
	if err != nil {
		return c.b.stopped(c.parent, err)
	}
	if c.ckSubmitted.host == "" {
		c.durable = c.ckSubmitted
	}
	c.durableCovered = c.coveredAtSubmit
	c.ckOutstanding = false
	lag, durable := c.enumerated-c.durableCovered, c.durable
	c.cfg.Metrics.setLag(lag)
	c.b.prog.set(func(p *Progress) { p.Checkpoint = describe(durable); p.CheckpointLag = lag })
	return c.submitCheckpoint()
}

// advance moves host's watermark past its completed pages, releasing
// their window credit, and submits a checkpoint.
func (c *coordinator) advance(host string) error {
	for _, p := range c.wms[host].advance() {
		c.windows[host].release(p.weight)
		if p.final && c.fleet && !p.cut {
			c.b.hosts().set(host, HostDone)
		}
	}
	if !c.checkpointing {
		c.durableCovered = c.covered()
	}
	c.cfg.Metrics.setLag(c.enumerated - c.durableCovered)
	return c.submitCheckpoint()
}

// submitCheckpoint hands the checkpointer the first lane's moved
// watermark, when it is idle and the run commits cursors.
func (c *coordinator) submitCheckpoint() error {
	if !c.checkpointing || c.ckOutstanding {
		return nil
	}
	var ck checkpoint
	ok := false
	for _, l := range c.lanes {
		if ck, ok = c.wms[l.host].take(); ok {
			break
		}
	}
	if !ok {
		return nil
	}
	select {
	case c.ckReq <- ck: // the checkpointer is idle: it takes it at once
	case <-c.parent.Done():
		return c.parent.Err()
	}
	c.ckOutstanding, c.ckSubmitted = true, ck
	c.coveredAtSubmit = c.covered()
	return nil
}

// covered is the entries every lane's watermark has passed.
func (c *coordinator) covered() int64 {
	var n int64
	for _, wm := range c.wms {
		n += wm.covered
	}
	return n
}

// outstanding reports whether a lane has a page not yet passed.
func (c *coordinator) outstanding() bool {
	for _, wm := range c.wms {
		if wm.outstanding() > 0 {
			return true
		}
	}
	return false
}

// credit is a lane's window: a page holds a unit of it per entry, and at
// most all of it. A page longer than its lane's whole window (a host
// answering more entries than the limit asked, its lane's share a page)
// takes the whole window and is listed alone: asking for more than the
// window holds would wait forever.
//
// In hosts mode each lane's credit is its share of the window and shared
// is the whole window, which every lane draws on too: the shares alone
// sum to far more than the window once there are more hosts than the
// window holds pages (each share is at least a page), and a hostile
// roster may name a million hosts. A page takes its lane's credit first,
// then the shared; both are released together (release). This cannot
// deadlock: a lane's credit is only ever wanted by its own enumerator, one
// page at a time, so a lane waiting for the shared credit holds back no
// other lane; and all the shared credit held is held by pages already
// listed, which go to the coordinator, whose repos go to the workers and
// become terminal whatever the listings do, so it always comes back. The
// other order (shared first) would not deadlock either, but a lane would
// sit on shared credit while waiting for its own, idling it.
type credit struct {
	sem    *semaphore.Weighted
	size   int64
	shared *credit // the window every lane draws on; nil when this is it
}

func newCredit(size int64, shared *credit) *credit {
	return &credit{sem: semaphore.NewWeighted(size), size: size, shared: shared}
}

// acquire takes the credit of a page of entries, its lane's and the
// shared, and returns it. A page of no entries takes none.
func (c *credit) acquire(ctx context.Context, entries int) (int64, error) {
	n := min(int64(entries), c.size)
	if c.shared != nil {
		n = min(n, c.shared.size)
	}
	if n == 0 {
		return 0, nil
	}
	if err := c.sem.Acquire(ctx, n); err != nil {
		return 0, err
	}
	if c.shared != nil {
		if err := c.shared.sem.Acquire(ctx, n); err != nil {
			c.sem.Release(n)
			return 0, err
		}
	}
	return n, nil
}

// release returns what acquire took.
func (c *credit) release(n int64) {
	c.sem.Release(n)
	if c.shared != nil {
		c.shared.sem.Release(n)
	}
}

// recordedBatch is a batch of repos made durable as not_started.
type recordedBatch struct {
	dids []string
	err  error
}

// outcome is a job's result as a worker reports it.
type outcome struct {
	job
	res backfill.Result
	err error
}

// serve starts one goroutine of wg that runs fn on each request from req
// and sends the result on res, until req is closed or ctx ends.
func serve[T, R any](ctx context.Context, wg *sync.WaitGroup, req <-chan T, res chan<- R, fn func(T) R) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for v := range req {
			select {
			case res <- fn(v):
			case <-ctx.Done():
				return
			}
		}
	}()
}

// resolveAhead starts the look-ahead resolvers of Config.Resolve, or of
// Identity's Lookup (Workers goroutines, stopped by ctx) and returns their
// input, nil when there is nothing to resolve. Its buffer holds one batch: the recorder waits on it beyond, so
// the look-ahead stays bounded.
func (b *Bootstrap) resolveAhead(ctx context.Context, wg *sync.WaitGroup) chan string {
	cfg := &b.cfg
	resolve := cfg.Resolve
	if id := cfg.Identity; resolve == nil && id != nil && id.Mode() != ident.ModeOff {
		// A failure is the job's to report when its own lookup fails.
		resolve = func(ctx context.Context, did string) { _, _, _ = id.Lookup(ctx, did) }
	}
	if resolve == nil {
		return nil
	}
	ahead := make(chan string, max(cfg.Workers, 16))
	for range cfg.Workers {
		wg.Add(1)
		go func() { // owned: ends with ctx, waited for by coordinate
			defer wg.Done()
			for {
				select {
				case did := <-ahead:
					resolve(ctx, did)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return ahead
}
