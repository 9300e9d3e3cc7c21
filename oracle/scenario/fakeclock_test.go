package scenario

import (
	"context"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/retry"
	"github.com/backstream/backstream/upstream"
)

// bridge is an upstream.RepoSource for code running inside a synctest
// bubble: each call is performed outside the bubble by a real
// upstream.Client over loopback, and the caller waits on channels created
// outside the bubble. A goroutine blocked on a socket (or on such a
// channel) is not durably blocked, so the fake clock stands still while a
// request is on the wire, and there is no idle keep-alive connection
// inside the bubble to freeze it for good. The caller's context does not
// cross into the bridge (its channels belong to the bubble); each call has
// its own real deadline instead.
type bridge struct {
	client  *upstream.Client
	reqs    chan bridgeReq
	replies chan chan bridgeRes // a pool of reply channels, made outside
	wg      sync.WaitGroup
}

type bridgeReq struct {
	did    string
	list   bool
	cursor string
	limit  int
	reply  chan bridgeRes
}

type bridgeRes struct {
	dl   *upstream.Download
	page upstream.Page
	err  error
}

// newBridge must be called outside any bubble.
func newBridge(t *testing.T, n *oracle.Network, slots int) *bridge {
	t.Helper()
	c, err := upstream.New(n.RelayURL(), upstream.Options{ScratchDir: t.TempDir(), MemoryBodyBytes: 1 << 20, LoopbackHosts: n.LoopbackHosts()})
	if err != nil {
		t.Fatal(err)
	}
	b := &bridge{client: c, reqs: make(chan bridgeReq), replies: make(chan chan bridgeRes, slots)}
	for range slots {
		b.replies <- make(chan bridgeRes, 1)
	}
	b.wg.Add(1)
	go b.serve()
	t.Cleanup(b.close)
	return b
}

func (b *bridge) serve() {
	defer b.wg.Done()
	for req := range b.reqs {
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var res bridgeRes
			if req.list {
				res.page, res.err = b.client.ListRepos(ctx, req.cursor, req.limit)
			} else {
				res.dl, res.err = b.client.GetRepo(ctx, req.did)
			}
			req.reply <- res
		}()
	}
}

func (b *bridge) close() {
	close(b.reqs)
	b.wg.Wait()
	b.client.Close()
}

func (b *bridge) call(req bridgeReq) bridgeRes {
	reply := <-b.replies
	defer func() { b.replies <- reply }()
	req.reply = reply
	b.reqs <- req
	return <-reply
}

func (b *bridge) GetRepo(_ context.Context, did string) (*upstream.Download, error) {
	r := b.call(bridgeReq{did: did})
	return r.dl, r.err
}

func (b *bridge) ListRepos(_ context.Context, cursor string, limit int) (upstream.Page, error) {
	r := b.call(bridgeReq{list: true, cursor: cursor, limit: limit})
	return r.page, r.err
}

// clockedSource records, on the caller's (fake) clock, when each getRepo
// was made and what it returned.
type clockedSource struct {
	upstream.RepoSource
	mu    sync.Mutex
	calls map[string][]call
}

type call struct {
	at    time.Time
	class string // "" for success, else upstream's error class
}

func (s *clockedSource) GetRepo(ctx context.Context, did string) (*upstream.Download, error) {
	at := time.Now()
	dl, err := s.RepoSource.GetRepo(ctx, did)
	c := call{at: at}
	if err != nil {
		c.class = upstream.Classify(err).String()
	}
	s.mu.Lock()
	s.calls[did] = append(s.calls[did], c)
	s.mu.Unlock()
	return dl, err
}

func (s *clockedSource) get(did string) []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls[did]...)
}

// jobs groups getRepo calls into job runs: calls less than a minute apart
// are one job's in-job retries (their backoff is capped at 30 s).
func jobs(calls []call) [][]call {
	var out [][]call
	for i, c := range calls {
		if i == 0 || c.at.Sub(calls[i-1].at) >= 45*time.Second {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], c)
	}
	return out
}

// hostHeld is how long, between from and to, the given job runs held
// their host's worker: a job holds it from its first call to its last
// (the clock stands still while a call is on the wire).
func hostHeld(runs [][]call, from, to time.Time) time.Duration {
	var held time.Duration
	for _, run := range runs {
		start, end := run[0].at, run[len(run)-1].at
		if start.Before(from) {
			start = from
		}
		if end.After(to) {
			end = to
		}
		if end.After(start) {
			held += end.Sub(start)
		}
	}
	return held
}

// TestRetryBackoffFakeClock (S3, S4): the retry
// runner with the production schedule — 1 min doubling to a 24 h ceiling,
// jittered ±25% — and its production scan period, on the fake clock of a
// synctest bubble. Some repos fail through 13 consecutive retry attempts
// (503s that also exhaust each job's own retries), so their backoff
// reaches and stays at the 24 h ceiling; one host answers 429 for a while
// and is parked. Everything converges in a few seconds of real time: every
// repo is complete and folds to the network's records, each gap between
// attempts lies within the schedule's bounds, the last gaps sit at the
// ceiling, and no request reached the parked host before its reset.
func TestRetryBackoffFakeClock(t *testing.T) {
	forSeeds(t, func(t *testing.T, seed int64) {
		n := startNetwork(t, seed, 24, 5, 2)
		rng := planRand(seed, 5)
		active, _ := listedAccounts(n)
		var withRecords []world.Account
		for _, a := range active {
			if a.Records > 0 {
				withRecords = append(withRecords, a)
			}
		}
		const failJobs = 13
		// One host is parked by 429s; the victims of the long backoff live
		// on the other, so their schedule is the backoff alone.
		parked := rng.IntN(2)
		var victims, others []world.Account
		for _, a := range pick(rng, withRecords, len(withRecords)) {
			switch {
			case a.Host != parked && len(victims) < 2:
				victims = append(victims, a)
			case a.Host == parked && len(others) < 4:
				others = append(others, a)
			}
		}
		if len(victims) < 2 || len(others) < 1 {
			t.Fatalf("world too small for the plan: %d victims, %d on the parked host", len(victims), len(others))
		}
		plan := append(append([]world.Account(nil), victims...), others...)
		perJob := backfill.DefaultRetries + 1
		for _, a := range victims {
			n.Faults().FailGetRepo(a.DID, http.StatusServiceUnavailable, failJobs*perJob)
		}
		hosts := map[int]string{}
		for i, u := range n.HostURLs() {
			hosts[i] = strings.TrimPrefix(u, "http://")
		}
		const reset = 2 * time.Minute
		n.Faults().RateLimitHost(parked, 2, reset)
		br := newBridge(t, n, 32)
		fs := vfs.NewMem()
		src := &clockedSource{RepoSource: br, calls: map[string][]call{}}
		backoff := retry.Backoff{Interval: retry.DefaultInterval, MaxDelay: retry.DefaultMaxDelay}
		var took time.Duration
		var results map[string]uint64

		synctest.Test(t, func(t *testing.T) {
			log := logger(t)
			store, err := archive.Open("/data", archive.Options{FS: fs, Logger: log, CacheSize: 8 << 20})
			if err != nil {
				t.Fatal(err)
			}
			w, err := archive.NewWriter(store, archive.WriterOptions{Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			// Every planned repo is failed and due now, as bootstrap or a
			// #sync leaves repos for the retry runner.
			var ups []archive.RepoUpdate
			for _, a := range plan {
				ups = append(ups, archive.RepoUpdate{DID: a.DID,
					Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldAttempts | archive.FieldError | archive.FieldNextAttempt,
					State: archive.RepoState{Status: archive.StatusFailed, Active: true, Host: hosts[a.Host], Attempts: 1,
						ErrClass: "seeded", LastError: "seeded", NextAttemptUS: 1}})
			}
			if r, err := w.Apply(context.Background(), &archive.Unit{Repos: ups}); err != nil || r.Refused != nil {
				t.Fatalf("seed: %v %v", err, r.Refused)
			}
			jr, err := backfill.NewRunner(backoff.JobOptions(backfill.Options{Source: src, Writer: w, Current: store, Logger: log}))
			if err != nil {
				t.Fatal(err)
			}
			// One job per host at a time: repos of the parked host wait in
			// its queue while the first one meets the 429, so the park (and
			// not only the 429'd repo's own next attempt) is what holds
			// them back.
			r, err := retry.New(retry.Config{Store: store, Writer: w, Jobs: jr, Interval: backoff.Interval, MaxDelay: backoff.MaxDelay,
				HostWorkers: 1, Logger: log})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Run(ctx) }()
			start := time.Now()
			for {
				all := true
				for _, a := range plan {
					st, err := store.RepoState(a.DID)
					if err != nil || st.Status != archive.StatusComplete {
						all = false
						break
					}
				}
				if all {
					break
				}
				if time.Since(start) > 30*24*time.Hour {
					t.Fatalf("not converged after 30 fake days: %+v", r.Status())
				}
				time.Sleep(time.Minute)
			}
			took = time.Since(start)
			results = r.Status().Results
			cancel()
			if err := <-done; err != nil {
				t.Errorf("retry runner: %v", err)
			}
			w.Close()
			store.Close()
		})
		t.Logf("converged after %v of fake time; results %v", took.Round(time.Minute), results)

		// The schedule: the seeded state counts one failure, so job k's
		// failure is failure k+1 and job k+1 starts Delay(k+1) =
		// Interval·2^k after it (jitter ±25%, never above the ceiling),
		// plus at most a scan period, plus the time the other victim's job
		// held the host's one worker meanwhile (its in-job retries sleep
		// seconds of fake time while this job waits in the queue).
		victimJobs := map[string][][]call{}
		for _, a := range victims {
			victimJobs[a.DID] = jobs(src.get(a.DID))
		}
		for _, a := range victims {
			js := victimJobs[a.DID]
			if len(js) != failJobs+1 {
				t.Fatalf("%s: %d job runs (%d calls), want %d failed and one complete", a.DID, len(js), len(src.get(a.DID)), failJobs+1)
			}
			var gaps []string
			for k := 1; k < len(js); k++ {
				prev, cur := js[k-1], js[k]
				gap := cur[0].at.Sub(prev[len(prev)-1].at)
				d := min(backoff.Interval<<k, backoff.MaxDelay)
				lo, hi := time.Duration(float64(d)*0.75), min(time.Duration(float64(d)*1.25), backoff.MaxDelay)+retry.DefaultScanPeriod+time.Second
				for did, other := range victimJobs {
					if did != a.DID {
						hi += hostHeld(other, prev[len(prev)-1].at, cur[0].at)
					}
				}
				if gap < lo-time.Second || gap > hi {
					t.Errorf("%s: gap before job %d is %v, want within [%v, %v]", a.DID, k+1, gap, lo, hi)
				}
				gaps = append(gaps, gap.Round(time.Minute).String())
			}
			if last := js[len(js)-1]; last[len(last)-1].class != "" {
				t.Errorf("%s: last call failed (%s)", a.DID, last[len(last)-1].class)
			}
			t.Logf("%s: gaps %s", a.DID, strings.Join(gaps, " "))
		}
		// The parked host: no call to it inside a park.
		if results[retry.ResultRateLimited] == 0 {
			t.Fatal("no replacement was rate limited: the park never happened")
		}
		var onHost []call
		for _, a := range plan {
			if a.Host == parked {
				onHost = append(onHost, src.get(a.DID)...)
			}
		}
		sort.Slice(onHost, func(i, j int) bool { return onHost[i].at.Before(onHost[j].at) })
		// Calls at the 429's own fake instant were already in flight (the
		// clock stands still while requests are on the wire); every later
		// one waits for the reset.
		limited := 0
		for i, c := range onHost {
			if c.class != upstream.ClassRateLimited.String() {
				continue
			}
			limited++
			for _, next := range onHost[i+1:] {
				if gap := next.at.Sub(c.at); gap > 0 && gap < reset-2*time.Second {
					t.Errorf("host %d called %v after a 429 announcing a %v reset", parked, gap, reset)
				}
			}
		}
		if limited == 0 {
			t.Fatal("no call was answered 429")
		}
		verifyOnly(t, n, fs, dids(plan))
	})
}

// verifyOnly checks the fold against the network for the given DIDs only
// (a store that holds only those repos).
func verifyOnly(t *testing.T, n *oracle.Network, fs vfs.FS, only []string) {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: fs, Logger: logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	f, stats, err := check.Archive(s)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, d := range only {
		want[d] = true
	}
	checked, bad := check.Compare(f, n.World(), func(a world.Account) bool { return want[a.DID] })
	if len(bad) > 0 || checked != len(only) {
		t.Fatalf("%d of %d accounts differ (checked %d):\n%s", len(bad), len(only), checked, check.Describe(bad, 8))
	}
	t.Logf("fold = ground truth for %d accounts (%d events)", checked, stats.Events)
}
