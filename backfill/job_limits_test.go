package backfill_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/upstream"
)

// hostileClient is a real upstream client whose relay is a hostile server
// answering every getRepo with h.
func (e *env) hostileClient(h http.HandlerFunc, mod func(*upstream.Options)) *upstream.Client {
	e.t.Helper()
	srv := httptest.NewServer(h)
	e.t.Cleanup(srv.Close)
	o := upstream.Options{ScratchDir: e.store.ScratchDir(), IdleBodyTimeout: time.Minute}
	if mod != nil {
		mod(&o)
	}
	c, err := upstream.New(srv.URL, o)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(c.Close)
	return c
}

// TestJobScratchLimits: the job's side of the scratch limits. A body that
// never ends is cut at the scratch budget and fails too_large after one
// attempt (a retry would refill the same scratch); a scratch volume at its
// floor fails local after the ordinary backoff, with a next attempt, and
// the process goes on (no error from Run, nothing fatal).
func TestJobScratchLimits(t *testing.T) {
	e := newEnv(t, smallWorld(4, 4))
	did := e.activeAccounts(1)[0].DID
	endless := func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 64<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}

	c := e.hostileClient(endless, func(o *upstream.Options) { o.ScratchBudget, o.MinFree = 8<<20, 1 })
	res := e.run(e.runner(func(o *backfill.Options) { o.Source = c }), did)
	if res.Status != archive.StatusFailed || res.Class != backfill.ClassTooLarge || res.Attempts != 1 {
		t.Fatalf("endless body: %v class %q after %d attempts, want failed too_large after 1", res.Status, res.Class, res.Attempts)
	}
	e.scratchEmpty()

	c = e.hostileClient(endless, func(o *upstream.Options) { o.MinFree = 1 << 62 })
	sleeps := len(e.clock.Sleeps())
	res = e.run(e.runner(func(o *backfill.Options) { o.Source = c }), did)
	st := e.state(did)
	if res.Status != archive.StatusFailed || res.Class != backfill.ClassLocal || res.Attempts != 4 || st.ErrClass != backfill.ClassLocal {
		t.Fatalf("floor: %v class %q after %d attempts (stored %q), want failed local after 4", res.Status, res.Class, res.Attempts, st.ErrClass)
	}
	if got := e.clock.Sleeps()[sleeps:]; len(got) != 3 || got[0] != time.Second {
		t.Fatalf("floor: backoff waits %v, want the ordinary 1 s, 2 s, 4 s", got)
	}
	if st.NextAttemptUS <= e.clock.Now().UnixMicro() {
		t.Fatalf("floor: no next attempt scheduled: %+v", st)
	}
	e.scratchEmpty()
}

// TestJobTrickleRetried: a trickling body
// is transient for the job: retried on the ordinary budget, then failed
// with its own class (slow_body), never holding the worker to
// the attempt deadline.
func TestJobTrickleRetried(t *testing.T) {
	e := newEnv(t, smallWorld(4, 4))
	did := e.activeAccounts(1)[0].DID
	trickle := func(w http.ResponseWriter, r *http.Request) {
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte{'x'}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	}
	c := e.hostileClient(trickle, func(o *upstream.Options) { o.MinBodyBytes, o.BodyWindow = 1<<10, 100*time.Millisecond })
	start := time.Now()
	res := e.run(e.runner(func(o *backfill.Options) { o.Source = c; o.AttemptTimeout = time.Minute }), did)
	if res.Status != archive.StatusFailed || res.Class != backfill.ClassSlowBody || res.Attempts != 4 {
		t.Fatalf("trickle: %v class %q after %d attempts, want failed slow_body after 4", res.Status, res.Class, res.Attempts)
	}
	t.Logf("4 trickling attempts held the worker %v (attempt deadline 1 min each)", time.Since(start))
	e.scratchEmpty()
}
