package retry

// outcome.go owns what the runner makes of a job's result: counting it,
// parking a host after a 429 (S4) or while it is found not answering, and
// the failure of a repo whose replacement was refused too often (S9). Every state it writes goes through
// a writer unit; each unit is waited for until durable.

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/upstream"
)

// outcome handles a job that made its terminal state durable.
func (e *exec) outcome(it item, res backfill.Result) error {
	switch res.Status {
	case archive.StatusComplete:
		if res.NotFound {
			e.count(ResultNotFound)
		} else {
			e.count(ResultComplete)
		}
	case archive.StatusUnavailable:
		e.count(ResultUnavailable)
	case archive.StatusFailed:
		host := res.Host
		if host == "" {
			host = it.host
		}
		if res.Class == backfill.ClassRateLimited {
			e.count(ResultRateLimited)
			if host != "" {
				wait := upstream.RetryAfter(res.Err)
				if wait <= 0 {
					wait = e.r.cfg.Interval
				}
				return e.park(it.did, host, backfill.ClassRateLimited, backfill.ClassRateLimited, wait)
			}
			return nil
		}
		if until, down := upstream.HostDownUntil(res.Err); down && host != "" {
			// The host answered none of its last tries and its requests
			// fail at once until its cool-off ends: its repos wait for
			// that parked, each charged nothing, instead of each failing
			// at once and adding to its backoff.
			e.count(ResultHostDown)
			if wait := until.Sub(e.r.cfg.Now()); wait > 0 {
				return e.park(it.did, host, res.Class, ClassHostDown, min(wait, e.r.maxPark()))
			}
			return nil
		}
		e.count(ResultFailed)
	default:
		return fmt.Errorf("retry: %s: job returned status %v", it.did, res.Status)
	}
	return nil
}

// park parks host for wait (a 429's reset: RetryAfter of the 429, or
// Interval when the answer named none; a host found not answering: the
// rest of its cool-off, at most the longest park) in memory and durably,
// why (a host class) on its host/ row, in one unit with the next attempt of
// did, which failed with class (the repo's), moved to the park's end: the
// condition is the host's, not the repo's, so it does not add to the
// repo's backoff (its attempt count is put back).
func (e *exec) park(did, host, class, why string, wait time.Duration) error {
	r := e.r
	r.parkMu.Lock()
	until := e.s.park(host, r.cfg.Now().Add(wait).UnixMicro())
	u := &archive.Unit{
		// The writer keeps the host's failure count; this only parks it.
		Hosts: []archive.HostUpdate{{Host: host, Func: func(cur archive.HostState) archive.HostState {
			cur.ParkedUntilUS = max(cur.ParkedUntilUS, until)
			cur.LastErrClass = why
			return cur
		}}},
		Repos: []archive.RepoUpdate{{DID: did, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
			if !exists || cur.Status != archive.StatusFailed || cur.ErrClass != class {
				return cur, false
			}
			cur.NextAttemptUS = until
			if cur.Attempts > 0 {
				cur.Attempts--
			}
			return cur, true
		}}},
	}
	acks := archive.NewAcks()
	u.Acks = acks
	err := r.cfg.Writer.Submit(e.ctx, u)
	r.parkMu.Unlock()
	if err != nil {
		return fmt.Errorf("retry: park %s: submit: %w", host, err)
	}
	if err := e.wait(acks); err != nil {
		return fmt.Errorf("retry: park %s: %w", host, err)
	}
	msg := "retry: host rate-limited; parked until its reset"
	if why == ClassHostDown {
		msg = "retry: host not answering; parked until its cool-off ends"
	}
	r.lines.Log(r.log, slog.LevelInfo, "park_"+why, msg, "host", host,
		"until", time.UnixMicro(until).UTC().Format(time.RFC3339), "did", did)
	return nil
}

// outcomeLogEvery bounds the lines of the outcomes a host or an account
// decides (a 429, a replacement refused too often): thousands of hosts
// may answer 429 on the real network, and every one is counted
// (backstream_retry_attempts_total{result}, backstream_retry_parked_hosts).
const outcomeLogEvery = time.Minute

// clearUnit bounds the hosts of one unit clearing ended parks.
const clearUnit = 1024

// clearParks clears the durable park of every host whose park ended since
// the last call (found ended by the scheduler, or at start in host/), in
// units of at most clearUnit hosts, each waited for until durable. The
// class the park wrote goes with it, so a host with no failed repo and no
// roster entry left has nothing to keep and its host/ row is deleted. A
// host parked again meanwhile keeps its new park.
func (e *exec) clearParks() error {
	ended := e.s.takeEnded()
	nowUS := e.r.cfg.Now().UnixMicro()
	for hosts := range slices.Chunk(ended, clearUnit) {
		u := &archive.Unit{Hosts: make([]archive.HostUpdate, 0, len(hosts))}
		for _, h := range hosts {
			u.Hosts = append(u.Hosts, archive.HostUpdate{Host: h, Func: func(cur archive.HostState) archive.HostState {
				if cur.ParkedUntilUS != 0 && !e.s.live(cur.ParkedUntilUS, nowUS) {
					cur.ParkedUntilUS = 0
					if cur.LastErrClass == backfill.ClassRateLimited || cur.LastErrClass == ClassHostDown {
						cur.LastErrClass = ""
					}
				}
				return cur
			}})
		}
		acks := archive.NewAcks()
		u.Acks = acks
		if err := e.r.cfg.Writer.Submit(e.ctx, u); err != nil {
			return fmt.Errorf("retry: clear ended parks: submit: %w", err)
		}
		if err := e.wait(acks); err != nil {
			return fmt.Errorf("retry: clear ended parks: %w", err)
		}
	}
	return nil
}

// failStale makes a repo whose replacement was refused refused times in a
// row an ordinary failure with backoff. Its replacement mark stays, so it is
// replaced when the next attempt comes.
func (e *exec) failStale(did string, refused int, cause error) error {
	r := e.r
	now := r.cfg.Now()
	msg := fmt.Sprintf("replacement refused %d times in a row: %v", refused, cause)
	if len(msg) > archive.MaxErrorMessage {
		msg = msg[:archive.MaxErrorMessage]
	}
	next := r.backoff.Delay
	u := &archive.Unit{Repos: []archive.RepoUpdate{{DID: did, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
		if !exists {
			return cur, false
		}
		cur.Status = archive.StatusFailed
		cur.Attempts++
		cur.ErrClass, cur.LastError = ClassStale, msg
		cur.NextAttemptUS = now.Add(next(cur.Attempts)).UnixMicro()
		return cur, true
	}}}}
	acks := archive.NewAcks()
	u.Acks = acks
	if err := r.cfg.Writer.Submit(e.ctx, u); err != nil {
		return fmt.Errorf("retry: fail %s: submit: %w", did, err)
	}
	if err := e.wait(acks); err != nil {
		return fmt.Errorf("retry: fail %s: %w", did, err)
	}
	r.lines.Log(r.log, slog.LevelInfo, "stale", "retry: replacement refused too often; failed with backoff", "did", did, "refused", refused)
	return nil
}

// wait blocks until the single unit behind acks is durable
// (archive.Acks.Wait): the writer's error if it stops first, ctx's if ctx
// ends. A refused unit is a bug of this package (the writer refuses only
// invalid units here).
func (e *exec) wait(acks *archive.Acks) error {
	rc, err := acks.Wait(e.ctx, e.r.cfg.Writer, 1)
	if err != nil {
		return err
	}
	if rc[0].Refused != nil {
		return fmt.Errorf("unit refused: %w", rc[0].Refused)
	}
	return nil
}
