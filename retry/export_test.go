package retry

// export_test.go holds what only the tests use: RunOnce, the synchronous
// step that makes one pass and waits for its jobs, and pass. Production
// runs Run.

import "context"

// RunOnce makes one pass and waits until every job it queued has finished;
// if the pass left repos behind because their host's queue share was full,
// it passes again until none is left behind. Repos of parked hosts stay for
// a later run. It returns the sum of the passes. The error is as for Run; a
// ctx that ends returns ctx.Err().
func (r *Runner) RunOnce(ctx context.Context) (PassStats, error) {
	e, err := r.start(ctx)
	if err != nil {
		return PassStats{}, err
	}
	defer e.stop()
	var ps PassStats
	for {
		var p PassStats
		p, err = e.pass(true)
		ps.add(p)
		if err == nil {
			err = e.drain()
		}
		if err != nil || p.HostFull == 0 {
			break
		}
	}
	if ferr := e.failed(); ferr != nil {
		return ps, ferr
	}
	if err != nil {
		if ctx.Err() != nil {
			return ps, ctx.Err()
		}
		e.fail(err)
		return ps, e.err
	}
	e.mu.Lock()
	ps.Results = e.results
	ps.Skipped = e.skipped
	e.results = map[string]int{}
	e.mu.Unlock()
	l := e.s.load()
	ps.MaxQueued, ps.MaxTracked = l.maxQueued, l.maxMembers
	return ps, nil
}

// drain waits until nothing is queued or running.
func (e *exec) drain() error {
	for {
		l := e.s.load()
		if l.queued == 0 && l.running == 0 {
			return nil
		}
		select {
		case <-l.changed:
		case <-e.ctx.Done():
			return e.ctx.Err()
		}
	}
}

// pass is a full pass (full) or a Wake's (scan).
func (e *exec) pass(full bool) (PassStats, error) {
	if full {
		return e.scan(passFull, nil)
	}
	return e.scan(passWake, nil)
}
