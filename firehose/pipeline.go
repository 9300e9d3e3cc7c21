package firehose

// pipeline.go owns the parallel verification of a connection's frames: the
// reading goroutine decodes each message and hands the frames that need a
// check (#commit, #sync, #identity) to a fixed set of lanes, one account
// always to the same lane, so an account's frames are checked in their
// order (an #identity drops the cached key before the commits that follow
// it are checked), and an account with no document in memory has it
// resolved as soon as its frame is read. The lanes are many more than the
// verifiers: a lane waiting for the network (an #identity's handle check,
// a DID resolution) holds up only its own accounts, while the CPU-bound
// part of a check takes one of the verifiers' slots (gate), so as many
// checks compute at once as there are verifiers. One sequencer takes the
// frames back in the order they were read and does everything else
// exactly as Handle does (seq rules, counters, rows, side effects, submit):
// cursor semantics, drops and crash safety do not depend on how many
// verifiers or lanes there are. The window of frames read but not yet
// submitted is bounded in frames and in bytes.

import (
	"context"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/upstream"
)

// Bounds of the verification window: frames read and not yet submitted, in
// frames and in bytes (a frame larger than the byte bound waits for the
// window to empty, then goes alone). The window is what lets the other
// lanes go on while the oldest frame's waits for the network: 1024 frames
// are 40 ms at 25,000 frames/s, several handle checks on a nearby host; a
// window four times larger measured slower (its frames outgrow the caches).
const (
	DefaultVerifyWindow      = 1024
	DefaultVerifyWindowBytes = 32 << 20
)

// verifyLanes is how many goroutines check frames, an account always on
// the same one (the verifiers bound how many of them compute at once).
const verifyLanes = 64

// resolveAhead is how many goroutines resolve, ahead of their verifier, the
// accounts whose documents are not in memory when their frame is read (an
// account never seen, or invalidated): a verifier then rarely waits for
// the directory, and the resolutions of a window run together, up to the
// resolver's own concurrency limit.
const resolveAhead = 64

// verifiers is how many checks Run computes at once: 0 (no pipeline:
// Handle inline) when nothing is verified.
func (c *Consumer) verifiers() int {
	if c.cfg.Identity.Mode() == ident.ModeOff {
		return 0
	}
	if c.cfg.Verifiers > 0 {
		return c.cfg.Verifiers
	}
	return c.cfg.Identity.Verifiers()
}

// job is one frame in the window.
type job struct {
	f    upstream.Frame
	derr error // DecodeFrame's error
	v    verdict
	seen time.Time     // when it was dispatched, on the identity resolver's clock
	size int64         // bytes of the window it holds
	done chan struct{} // cap 1: its verifier is done (nil: not sent to one)
}

// pipeline is one connection's window, lanes, verifier slots and
// sequencer.
type pipeline struct {
	c      *Consumer
	lanes  []chan *job
	gate   gate        // the verifiers' slots
	order  chan *job   // frames in read order, to the sequencer
	free   chan *job   // the window's frame slots
	ahead  chan string // DIDs to resolve ahead (resolveAhead goroutines)
	bytes  *semaphore.Weighted
	budget int64
	seed   maphash.Seed
}

func newPipeline(c *Consumer, n int) *pipeline {
	window := DefaultVerifyWindow
	p := &pipeline{
		c:      c,
		lanes:  make([]chan *job, verifyLanes),
		gate:   make(gate, n),
		order:  make(chan *job, window),
		free:   make(chan *job, window),
		ahead:  make(chan string, window),
		bytes:  semaphore.NewWeighted(DefaultVerifyWindowBytes),
		budget: DefaultVerifyWindowBytes,
		seed:   maphash.MakeSeed(),
	}
	for i := range p.lanes {
		p.lanes[i] = make(chan *job, window)
	}
	for range window {
		p.free <- &job{done: make(chan struct{}, 1)}
	}
	return p
}

// pipelined is session's read loop with parallel verification: it returns
// when reading fails (after every frame read is handled) or, as a
// fatalError, when handling one failed (closing the connection with abort).
func (c *Consumer) pipelined(ctx context.Context, read func() ([]byte, error), abort func(), n int) (bool, error) {
	p := newPipeline(c, n)
	var wg sync.WaitGroup
	for _, in := range p.lanes {
		wg.Add(1)
		go func() { // owned: its input is closed below, then waited for
			defer wg.Done()
			p.lane(ctx, in)
		}()
	}
	for range resolveAhead {
		wg.Add(1)
		go func() { // owned: ahead is closed below, then waited for
			defer wg.Done()
			for did := range p.ahead {
				_, _, _ = c.cfg.Identity.Lookup(ctx, did) // an error is its verifier's to judge
			}
		}()
	}
	type result struct {
		progressed bool
		err        error
	}
	res := make(chan result, 1)
	wg.Add(1)
	go func() { // owned: ends when order is closed, waited for below
		defer wg.Done()
		progressed, err := p.sequence(ctx, abort)
		res <- result{progressed, err}
	}()
	rerr := p.feed(ctx, read)
	close(p.order)
	close(p.ahead)
	for _, in := range p.lanes {
		close(in)
	}
	r := <-res
	wg.Wait()
	if r.err != nil {
		return r.progressed, &fatalError{r.err}
	}
	return r.progressed, rerr
}

// feed reads and decodes messages into the window until reading fails.
func (p *pipeline) feed(ctx context.Context, read func() ([]byte, error)) error {
	for {
		msg, err := read()
		if err != nil {
			return err
		}
		j, err := p.admit(ctx, int64(len(msg)))
		if err != nil {
			return err
		}
		j.f, j.derr = upstream.DecodeFrame(msg)
		j.v = verdict{}
		p.order <- j // never blocks: order holds the whole window
		p.dispatch(j)
	}
}

// dispatch hands j to its account's lane (an account not in memory to the
// look-ahead too), or marks it done when it needs no check.
func (p *pipeline) dispatch(j *job) {
	if j.derr != nil || !needsCheck(&j.f) {
		j.done <- struct{}{}
		return
	}
	did := j.f.DID()
	j.seen = p.c.cfg.Identity.Now()
	if j.f.Identity == nil && upstream.ValidDID(did) && !p.c.cfg.Identity.Known(did) {
		select {
		case p.ahead <- did:
		default: // the look-ahead is full: its lane resolves it
		}
	}
	p.lanes[p.laneOf(did)] <- j // never blocks: a lane holds the whole window
}

// laneOf is the index of did's lane.
func (p *pipeline) laneOf(did string) int {
	return int(maphash.String(p.seed, did) % uint64(len(p.lanes)))
}

// lane checks the frames of in, in order, until in is closed.
func (p *pipeline) lane(ctx context.Context, in <-chan *job) {
	for j := range in {
		j.v = p.c.check(ctx, &j.f, p.gate, j.seen)
		j.done <- struct{}{}
	}
}

// needsCheck: frames check looks at (the rest pass through the window).
func needsCheck(f *upstream.Frame) bool {
	return f.Commit != nil || f.Sync != nil || f.Identity != nil
}

// admit takes a frame slot and size bytes of the window, waiting (counted,
// one log line a minute) when it is full.
func (p *pipeline) admit(ctx context.Context, size int64) (*job, error) {
	size = min(max(size, 1), p.budget)
	var j *job
	select {
	case j = <-p.free:
	default:
		p.waited()
		select {
		case j = <-p.free:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if !p.bytes.TryAcquire(size) {
		p.waited()
		if err := p.bytes.Acquire(ctx, size); err != nil {
			p.free <- j
			return nil, err
		}
	}
	j.size = size
	return j, nil
}

func (p *pipeline) waited() {
	p.c.m.verifyWait()
	p.c.lines.Log(p.c.log, slog.LevelInfo, "verify-window", "firehose: reading waits for the verifiers (the verification window is full)",
		"verifiers", cap(p.gate), "window", cap(p.free), "window_bytes", p.budget)
}

// sequence handles the window's frames in read order until order is
// closed. After a failure it only drains (the connection is aborted), and
// returns the failure.
func (p *pipeline) sequence(ctx context.Context, abort func()) (progressed bool, failed error) {
	c := p.c
	for j := range p.order {
		<-j.done
		if failed == nil {
			before := c.last
			err := c.failed()
			if err == nil {
				err = c.handleFrame(ctx, &j.f, j.derr, &j.v)
			}
			if err != nil {
				failed = err
				abort()
			}
			if c.last != before {
				progressed = true
			}
		}
		p.bytes.Release(j.size)
		j.f, j.v = upstream.Frame{}, verdict{}
		p.free <- j
	}
	return progressed, failed
}

// gate bounds how many checks compute at once: a slot is held while a
// check computes and left while it waits for the network. A nil gate
// bounds nothing (Handle checks inline).
type gate chan struct{}

// enter takes a slot, or returns ctx's error once it ends.
func (g gate) enter(ctx context.Context) error {
	if g == nil {
		return nil
	}
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// leave gives the slot back.
func (g gate) leave() {
	if g != nil {
		<-g
	}
}
