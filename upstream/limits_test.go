package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/diskspace"
	"github.com/backstream/backstream/internal/promtest"
)

// endlessBody writes 64 KiB chunks until the client goes away.
func endlessBody(w http.ResponseWriter, r *http.Request) {
	chunk := make([]byte, 64<<10)
	for r.Context().Err() == nil {
		if _, err := w.Write(chunk); err != nil {
			return
		}
	}
}

// scratchBytes is a lower bound of what dir's files held on disk at one
// instant: the sizes of its files, each read once, counting only the files
// still there in a listing taken after the last read. A spill file only
// grows until it is removed, so at that listing every counted file held at
// least the size read; a file removed meanwhile is not counted (a plain sum
// of sizes read one after the other counted it beside another file that had
// grown into the budget it gave back: "held 4259840 bytes at its peak,
// budget 4194304" under load, one run in 40).
func scratchBytes(dir string) int64 {
	ents, _ := os.ReadDir(dir)
	sizes := make(map[string]int64, len(ents))
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			sizes[e.Name()] = fi.Size()
		}
	}
	after, _ := os.ReadDir(dir)
	var n int64
	for _, e := range after {
		n += sizes[e.Name()]
	}
	return n
}

// TestGetRepoScratchBudgetBoundsEndlessBodies: 100 concurrent never-ending
// bodies, each allowed 64 MiB by the per-repo cap, never hold more scratch
// than the shared budget (measured on disk by a sampler, not by the
// client's own count); each ends too_large (larger than the whole budget:
// no retry can hold it) or local (budget held by the others), and every
// byte is returned.
func TestGetRepoScratchBudgetBoundsEndlessBodies(t *testing.T) {
	const budget = 4 << 20
	pds := newServer(t, endlessBody)
	c, scratch := testClient(t, pds.URL, func(o *Options) {
		o.ScratchBudget = budget
		o.MaxCARBytes = 64 << 20
		o.MinFree = 1 // the floor is another test's subject
	})
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			peak.Store(max(peak.Load(), scratchBytes(scratch)))
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	classes := make([]Class, 100)
	for i := range classes {
		wg.Go(func() {
			_, err := c.GetRepo(context.Background(), testDID)
			classes[i] = Classify(err)
			if Classify(err) == ClassPermanent && !errors.Is(err, ErrTooLarge) {
				t.Errorf("download %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-sampled
	for i, cl := range classes {
		if cl != ClassPermanent && cl != ClassLocal {
			t.Errorf("download %d ended %v, want permanent (too large) or local", i, cl)
		}
	}
	if p := peak.Load(); p > budget {
		t.Errorf("scratch held %d bytes at its peak, budget %d", p, budget)
	}
	t.Logf("peak scratch %d bytes on disk for 100 endless bodies, budget %d", peak.Load(), budget)
	if h := c.ScratchHeld(); h != 0 {
		t.Errorf("%d scratch bytes still held after every download ended", h)
	}
	assertScratchEmpty(t, scratch)
}

// TestGetRepoScratchBudgetHeldUntilRemove: a finished download keeps its
// bytes in the budget until Remove, so files waiting for verification
// count too.
func TestGetRepoScratchBudgetHeldUntilRemove(t *testing.T) {
	pds := pdsServer(t)
	c, _ := testClient(t, pds.URL, func(o *Options) { o.ScratchBudget = int64(len(carBody)) + 10 })
	d, err := c.GetRepo(context.Background(), testDID)
	if err != nil {
		t.Fatal(err)
	}
	if c.ScratchHeld() != d.Size {
		t.Fatalf("held %d, want %d", c.ScratchHeld(), d.Size)
	}
	if _, err := c.GetRepo(context.Background(), testDID); Classify(err) != ClassLocal || !errors.Is(err, ErrLocal) {
		t.Fatalf("second download with the budget held: %v (class %v), want local", err, Classify(err))
	}
	d.Remove()
	d.Remove()
	if c.ScratchHeld() != 0 {
		t.Fatalf("held %d after Remove", c.ScratchHeld())
	}
	d2, err := c.GetRepo(context.Background(), testDID)
	if err != nil {
		t.Fatalf("download after Remove: %v", err)
	}
	d2.Remove()
}

// TestGetRepoScratchFloor: a scratch volume at its free-space floor refuses
// a spill before any file exists, and a floor crossed while spilling stops
// the body: both local, never permanent, the file removed.
func TestGetRepoScratchFloor(t *testing.T) {
	t.Run("before", func(t *testing.T) {
		pds := newServer(t, endlessBody)
		c, scratch := testClient(t, pds.URL, func(o *Options) { o.MinFree = 1 << 62 })
		_, err := c.GetRepo(context.Background(), testDID)
		if Classify(err) != ClassLocal || !errors.Is(err, ErrLocal) {
			t.Fatalf("got %v (class %v), want local", err, Classify(err))
		}
		assertScratchEmpty(t, scratch)
	})
	t.Run("while spilling", func(t *testing.T) {
		pds := newServer(t, endlessBody)
		dir := t.TempDir()
		sp, err := diskspace.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Free < 256<<20 {
			t.Fatalf("test volume has only %d bytes free", sp.Free)
		}
		// The floor sits 48 MiB below the free space: the first check
		// passes, a later one (every MiB) fails.
		c, scratch := testClient(t, pds.URL, func(o *Options) {
			o.ScratchDir = filepath.Join(dir, "scratch")
			o.MinFree = int64(sp.Free) - 48<<20
			o.MaxCARBytes = 1 << 30
			o.ScratchBudget = 1 << 30
		})
		d, err := c.GetRepo(context.Background(), testDID)
		if err == nil {
			d.Remove()
			t.Fatal("an endless body spilled past the floor")
		}
		if Classify(err) != ClassLocal || !errors.Is(err, ErrLocal) {
			t.Fatalf("got %v (class %v), want local", err, Classify(err))
		}
		assertScratchEmpty(t, scratch)
		if c.ScratchHeld() != 0 {
			t.Fatalf("held %d", c.ScratchHeld())
		}
	})
	t.Run("write fails", func(t *testing.T) {
		c, scratch := testClient(t, pdsServer(t).URL, nil)
		if err := os.Remove(scratch); err != nil {
			t.Fatal(err)
		}
		_, err := c.GetRepo(context.Background(), testDID)
		if Classify(err) != ClassLocal {
			t.Fatalf("got %v (class %v), want local", err, Classify(err))
		}
	})
}

// TestTrickleCut: a body sending one byte per 20 ms (far under 1 KiB per
// 200 ms) but never idle long enough for the idle timeout is cut as
// slow_body within about one window, not at the caller's deadline: a
// getRepo, and the small JSON reads (listRepos, listHosts, getRepoStatus),
// which the bootstrap calls without a deadline.
func TestTrickleCut(t *testing.T) {
	var status atomic.Int32 // of the answer whose body trickles: an error answer's body is cut too
	pds := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		for r.Context().Err() == nil {
			if _, err := w.Write([]byte{'x'}); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			time.Sleep(20 * time.Millisecond)
		}
	})
	c, scratch := testClient(t, pds.URL, func(o *Options) {
		o.MinBodyBytes, o.BodyWindow = 1<<10, 200*time.Millisecond
	})
	host := strings.TrimPrefix(pds.URL, "http://")
	for _, code := range []int32{http.StatusOK, http.StatusServiceUnavailable} {
		status.Store(code)
		trickleCut(t, c, host, code)
	}
	assertScratchEmpty(t, scratch)
}

// trickleCut reads each kind of body from a server trickling it with code.
func trickleCut(t *testing.T, c *Client, host string, code int32) {
	t.Helper()
	for name, read := range map[string]func(ctx context.Context) error{
		"getRepo":       func(ctx context.Context) error { _, err := c.GetRepo(ctx, testDID); return err },
		"listRepos":     func(ctx context.Context) error { _, err := c.ListRepos(ctx, "", 0); return err },
		"listHosts":     func(ctx context.Context) error { _, err := c.ListHosts(ctx, "", 0); return err },
		"getRepoStatus": func(ctx context.Context) error { _, err := c.GetRepoStatus(ctx, host, testDID); return err },
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		err := read(ctx)
		cancel()
		if !errors.Is(err, ErrSlowBody) || Classify(err) != ClassTransient {
			t.Fatalf("%s, status %d: got %v (class %v) after %v, want slow body", name, code, err, Classify(err), time.Since(start))
		}
		t.Logf("%s, status %d: trickle cut after %v", name, code, time.Since(start))
	}
}

// TestGetRepoHostWorkersCap: downloads redirected by the relay to two PDS
// hosts, held open by them: each host never serves more than the cap at
// once; a download beyond it fails fast (host busy, transient) without the
// host seeing the request, and the other host's downloads are unaffected.
func TestGetRepoHostWorkersCap(t *testing.T) {
	const cap = 2
	release := make(chan struct{})
	type host struct {
		srv        *server
		now, peak  atomic.Int64
		arrivedAny chan struct{}
	}
	mk := func() *host {
		h := &host{}
		h.srv = newServer(t, func(w http.ResponseWriter, r *http.Request) {
			n := h.now.Add(1)
			defer h.now.Add(-1)
			for p := h.peak.Load(); n > p && !h.peak.CompareAndSwap(p, n); p = h.peak.Load() {
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			w.Write(carBody)
		})
		return h
	}
	a, b := mk(), mk()
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		target := a
		if r.URL.Query().Get("did") == testDID+"b" {
			target = b
		}
		http.Redirect(w, r, target.srv.URL+"/car", http.StatusFound)
	})
	c, _ := testClient(t, relay.URL, func(o *Options) { o.HostWorkers = cap })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	type result struct {
		d   *Download
		err error
	}
	results := make(chan result, 6)
	get := func(did string) {
		go func() {
			d, err := c.GetRepo(ctx, did)
			results <- result{d, err}
		}()
	}
	for range cap {
		get(testDID)
		get(testDID + "b")
	}
	promtest.Eventually(t, 10*time.Second, "both hosts holding their cap", func() bool { return a.now.Load() == cap && b.now.Load() == cap })
	get(testDID) // a third to host a: busy
	r := <-results
	if !errors.Is(r.err, ErrHostBusy) || Classify(r.err) != ClassTransient {
		t.Fatalf("download beyond the cap: %v (class %v), want host busy", r.err, Classify(r.err))
	}
	if a.srv.hits.Load() != cap {
		t.Fatalf("host a saw %d requests, want %d", a.srv.hits.Load(), cap)
	}
	close(release)
	for range 2 * cap {
		r := <-results
		if r.err != nil {
			t.Fatalf("held download: %v", r.err)
		}
		r.d.Remove()
	}
	if a.peak.Load() != cap || b.peak.Load() != cap {
		t.Fatalf("peak concurrency a=%d b=%d, want %d each", a.peak.Load(), b.peak.Load(), cap)
	}
	hostA := a.srv.Listener.Addr().String()
	if n := c.HostDownloads(hostA); n != 0 {
		t.Fatalf("%d slots of %s still held", n, hostA)
	}
	d, err := c.GetRepo(ctx, testDID)
	if err != nil {
		t.Fatalf("after the slots were returned: %v", err)
	}
	d.Remove()
}

// TestPaceResetBounded: a host announcing its request budget spent until a
// reset centuries ahead holds its requests at most RetryAfterCeiling, as a
// Retry-After does; without the bound a fleet listing of that host would
// wait for good.
func TestPaceResetBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	p := newPacer()
	p.now = func() time.Time { return now }
	tr := newTrips(slog.New(slog.DiscardHandler), nil)
	if err := p.acquire(context.Background(), "pds.example:443", tr); err != nil {
		t.Fatal(err)
	}
	p.observe("pds.example:443", http.StatusOK, http.Header{"Ratelimit-Remaining": {"0"}, "Ratelimit-Reset": {"99999999999"}}) // year 5138
	p.release("pds.example:443")
	spent, cancel := context.WithCancel(context.Background())
	cancel() // acquire may not wait
	if err := p.acquire(spent, "pds.example:443", tr); err == nil {
		t.Fatal("a request went through a spent budget before its reset")
	}
	now = now.Add(RetryAfterCeiling)
	if err := p.acquire(spent, "pds.example:443", tr); err != nil {
		t.Fatalf("a request %v after the announcement still waits for its reset (%v): the wait is not bounded", RetryAfterCeiling, err)
	}
}

// TestPacerForgetsHostsPastTheirReset: every answer of a host announces a
// request budget with a reset a few seconds ahead (as a PDS does), so the
// pacer keeps the host's pace after its last request. Over months of
// distinct hosts (a roster's churn, or DID documents naming hosts of
// their own) those paces must not pile up: once their reset has passed
// they are forgotten, and the pacer holds about the hosts whose budget is
// still running.
func TestPacerForgetsHostsPastTheirReset(t *testing.T) {
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Ratelimit-Remaining", "100")
		w.Header().Set("Ratelimit-Reset", strconv.FormatInt(clock().Add(5*time.Second).Unix(), 10))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"repos":[]}`)
	})
	names := map[string]string{}
	const hosts = 2000
	for i := range hosts {
		names[fmt.Sprintf("pds%d.example", i)] = "127.0.0.1"
	}
	c, _ := testClient(t, srv.URL, func(o *Options) { o.Resolve = staticResolver(names) })
	c.pace.now = clock
	ctx := context.Background()
	for i := range hosts {
		if _, err := c.HostListRepos(ctx, fmt.Sprintf("pds%d.example:%s", i, srv.port()), "", 10); err != nil {
			t.Fatalf("host %d: %v", i, err)
		}
		if i%100 == 99 { // a hundred hosts a minute
			mu.Lock()
			now = now.Add(time.Minute)
			mu.Unlock()
		}
	}
	c.pace.mu.Lock()
	n := len(c.pace.hosts)
	c.pace.mu.Unlock()
	if n > 2*100+64 {
		t.Fatalf("the pacer holds %d host paces after %d hosts, each last asked over a minute after its reset (at most %d may still run)", n, hosts, 100)
	}
}

// TestPaceTakesA429sWait: a host asked directly answers a getRepo with a
// 429 and Retry-After: 330, no ratelimit-* header. The pacer takes the
// server-directed wait as the host's reset, its budget spent: HostPaceWait
// reports it (so a fleet bootstrap's dispatcher parks the host instead of
// handing its repos to workers that would wait), and the next direct
// getRepo fails at once, rate limited with the wait, without asking the
// host. A 429 of the relay (a download through it) is not taken: relay
// mode keeps retrying on its own 429 budget.
func TestPaceTakesA429sWait(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "330")
		xrpcError(w, http.StatusTooManyRequests, "RateLimitExceeded", "Rate Limit Exceeded")
	})
	c, _ := testClient(t, srv.URL, func(o *Options) {
		o.Resolve = staticResolver(map[string]string{"pds.example": "127.0.0.1"})
	})
	ctx := context.Background()
	if _, err := c.GetRepo(ctx, testDID); Classify(err) != ClassRateLimited {
		t.Fatalf("a getRepo through the relay answering 429: %v, want rate limited", err)
	}
	if wait := c.HostPaceWait(srv.Listener.Addr().String()); wait != 0 {
		t.Fatalf("the relay answered a download through it 429: its pace waits %v, want 0 (relay mode retries on its 429 budget)", wait)
	}
	host := "pds.example:" + srv.port()
	if _, err := c.HostGetRepo(ctx, host, testDID); Classify(err) != ClassRateLimited || RetryAfter(err) != RetryAfterCeiling {
		t.Fatalf("a direct getRepo answered 429 with Retry-After: 330: %v (wait %v), want rate limited, 330 s", err, RetryAfter(err))
	}
	if wait := c.HostPaceWait(host); wait < RetryAfterCeiling-10*time.Second || wait > RetryAfterCeiling {
		t.Fatalf("after the host answered 429 with Retry-After: 330, HostPaceWait %v, want about 330 s: the host's requests are not known to wait", wait)
	}
	hits := srv.hits.Load()
	start := time.Now()
	_, err := c.HostGetRepo(ctx, host, testDID)
	if Classify(err) != ClassRateLimited || RetryAfter(err) < RetryAfterCeiling-10*time.Second || Answered(err) || srv.hits.Load() != hits {
		t.Fatalf("a direct getRepo during the host's Retry-After: %v (wait %v, answered %v) after %v, %d requests; want rate limited at once with the wait, the host not asked",
			err, RetryAfter(err), Answered(err), time.Since(start), srv.hits.Load()-hits)
	}
}

// TestDirectGetRepoPacedFailsAtOnce: a getRepo asked of a host directly
// after it announced its budget spent (ratelimit-remaining 0, the reset
// an hour ahead, bounded at 330 s) fails at once, rate limited with the
// wait, the host not asked, instead of waiting for the reset inside the
// caller's deadline: a job that passed its check of the host's pace
// before the announcement would otherwise lose its attempt deadline
// (5 minutes, shorter than the 330 s a reset may be ahead) to the wait.
// A listRepos of the host still waits for the reset (a fleet listing
// checks the pace before it takes its request slot).
func TestDirectGetRepoPacedFailsAtOnce(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Ratelimit-Remaining", "0")
		w.Header().Set("Ratelimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"repos":[]}`)
	})
	c, _ := testClient(t, srv.URL, func(o *Options) {
		o.Resolve = staticResolver(map[string]string{"pds.example": "127.0.0.1"})
	})
	host := "pds.example:" + srv.port()
	if _, err := c.HostListRepos(context.Background(), host, "", 10); err != nil {
		t.Fatal(err)
	}
	hits := srv.hits.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.HostGetRepo(ctx, host, testDID)
	if Classify(err) != ClassRateLimited || RetryAfter(err) < RetryAfterCeiling-10*time.Second || srv.hits.Load() != hits {
		t.Fatalf("a direct getRepo after the host announced its budget spent: %v (wait %v) after %v, %d requests; want rate limited at once with the wait (about 330 s), the host not asked",
			err, RetryAfter(err), time.Since(start).Round(time.Millisecond), srv.hits.Load()-hits)
	}
}
