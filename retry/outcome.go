package retry

// outcome.go owns what the runner makes of a job's result: counting it,
// parking a host after a 429 (S4), and the failure of a repo whose
// replacement was refused too often (S9). Every state it writes goes through
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
		if res.Class == backfill.ClassRateLimited {
			e.count(ResultRateLimited)
			host := res.Host
			if host == "" {
				host = it.host
			}
			if host != "" {
				return e.park(it.did, host, res.Err)
			}
			return nil
		}
		e.count(ResultFailed)
	default:
		return fmt.Errorf("retry: %s: job returned status %v", it.did, res.Status)
	}
	return nil
}

// park parks host until its rate-limit reset (RetryAfter of the 429, or
// Interval when the answer named none) in memory and durably, in one unit
// with the 429'd repo's next attempt moved to the reset: the 429 is the
// host's condition, not the repo's, so it does not add to the repo's
// backoff (its attempt count is put back).
func (e *exec) park(did, host string, cause error) error {
	r := e.r
	wait := upstream.RetryAfter(cause)
	if wait <= 0 {
		wait = r.cfg.Interval
	}
	r.parkMu.Lock()
	until := e.s.park(host, r.cfg.Now().Add(wait).UnixMicro())
	u := &archive.Unit{
		// The writer keeps the host's failure count; this only parks it.
		Hosts: []archive.HostUpdate{{Host: host, Func: func(cur archive.HostState) archive.HostState {
			cur.ParkedUntilUS = max(cur.ParkedUntilUS, until)
			cur.LastErrClass = backfill.ClassRateLimited
			return cur
		}}},
		Repos: []archive.RepoUpdate{{DID: did, Func: func(cur archive.RepoState, exists bool) (archive.RepoState, bool) {
			if !exists || cur.Status != archive.StatusFailed || cur.ErrClass != backfill.ClassRateLimited {
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
	r.lines.Log(r.log, slog.LevelInfo, "park", "retry: host rate-limited; parked until its reset", "host", host,
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
					if cur.LastErrClass == backfill.ClassRateLimited {
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
