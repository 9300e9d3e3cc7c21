package backfill_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/backoff"
	"github.com/backstream/backstream/oracle/world"
	"github.com/backstream/backstream/upstream"
)

// TestJobPaceWaitOutsideDeadline (E8, E10): a PDS host asked directly
// announces its budget spent on every answer (ratelimit-remaining 0, the
// reset 2–3 s ahead), and the attempt deadline is 1 s. A download of it
// after the first waits for the reset, as announced, before its attempt
// begins: the wait is the host's, not the attempt's, and the repo is
// archived. Before, the download waited for the reset inside the attempt
// deadline and failed class timeout, for the run, without retry: with the
// defaults (a 5 minute deadline, resets up to 330 s ahead) every download
// of a host whose budget was spent lost its deadline, or all of it, to
// the wait.
func TestJobPaceWaitOutsideDeadline(t *testing.T) {
	e := newEnv(t, smallWorld(12, 2))
	var accts []world.Account
	for _, a := range e.activeAccounts(1) {
		if a.Host == 0 && len(accts) < 2 {
			accts = append(accts, a)
		}
	}
	if len(accts) < 2 {
		t.Fatal("want two active accounts with records on host 0")
	}
	target, err := url.Parse(e.net.HostURLs()[0])
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		resp.Header.Set("Ratelimit-Limit", "1")
		resp.Header.Set("Ratelimit-Remaining", "0")
		resp.Header.Set("Ratelimit-Reset", strconv.FormatInt(time.Now().Add(3*time.Second).Unix(), 10))
		return nil
	}
	limited := httptest.NewServer(proxy)
	t.Cleanup(limited.Close)
	host := limited.Listener.Addr().String()
	c, err := upstream.New(e.net.RelayURL(), upstream.Options{ScratchDir: e.store.ScratchDir(),
		LoopbackHosts: append(e.net.LoopbackHosts(), host)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := e.runner(func(o *backfill.Options) {
		o.Source, o.AttemptTimeout, o.Sleep = c, time.Second, backoff.Sleep
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, a := range accts {
		start := time.Now()
		res, err := r.Run(ctx, backfill.Request{DID: a.DID, Host: host, Active: true})
		if err != nil || res.Status != archive.StatusComplete || res.Records != a.Records {
			t.Fatalf("download %d of the host announcing its budget spent, after %v: %v %q %d records (%v); want complete with %d records",
				i+1, time.Since(start).Round(time.Millisecond), res.Status, res.Class, res.Records, err, a.Records)
		}
	}
}

// hiddenPace is a source whose HostPaceWait says 0: the job's check of the
// host's pace happened just before another answer announced it spent.
type hiddenPace struct{ *upstream.Client }

func (hiddenPace) HostPaceWait(string) time.Duration { return 0 }

// TestJobDirectRateLimitHoldsNoWorker (E10): a download from a host
// directly never waits on its worker for the host's 429, nor more than a
// backoff step for its announced reset: the job ends failed at once, class
// rate_limited (the retry schedule takes the repo; a fleet bootstrap's
// dispatcher parks the host meanwhile, upstream's pacer holding its reset).
//   - 429: the host answers 429 with Retry-After: 330 and no ratelimit-*
//     header. Asked once, nothing slept. Before, the job slept 330 s and
//     asked again, up to 20 times, holding its worker: 13 such hosts held
//     all 100 workers of a fleet bootstrap.
//   - 429-short: the same with Retry-After: 5. Asked once, nothing slept.
//   - spent: the host announced its budget spent (an hour ahead, held at
//     330 s) before the job began. Not asked, nothing slept. Before, the job
//     waited for the reset first, holding its worker.
//   - race: the same, announced after the job checked the host's pace. Not
//     asked, nothing slept, no timeout. Before, the request waited for the
//     reset inside the attempt deadline (5 minutes, the reset up to 330 s):
//     the repo could fail timeout, for the run.
//   - relay: the relay's 429 (a download through it) keeps its 429 budget,
//     each retry after the server's wait.
func TestJobDirectRateLimitHoldsNoWorker(t *testing.T) {
	e := newEnv(t, smallWorld(4, 4))
	did := e.activeAccounts(1)[0].DID
	for _, tc := range []string{"429", "429-short", "spent", "race", "relay"} {
		t.Run(tc, func(t *testing.T) {
			var getRepos atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc == "429-short" {
					w.Header().Set("Retry-After", "5")
					w.WriteHeader(http.StatusTooManyRequests)
				} else if tc == "429" || tc == "relay" {
					w.Header().Set("Retry-After", "330")
					w.WriteHeader(http.StatusTooManyRequests)
					io.WriteString(w, `{"error":"RateLimitExceeded"}`)
				} else {
					w.Header().Set("Ratelimit-Remaining", "0")
					w.Header().Set("Ratelimit-Reset", strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10))
					io.WriteString(w, `{"repos":[]}`)
				}
				if strings.HasSuffix(r.URL.Path, "getRepo") {
					getRepos.Add(1)
				}
			}))
			t.Cleanup(srv.Close)
			_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
			host := "pds.example:" + port
			c, err := upstream.New(srv.URL, upstream.Options{ScratchDir: e.store.ScratchDir(), LoopbackHosts: []string{srv.Listener.Addr().String()},
				Resolve: func(ctx context.Context, name string) ([]netip.Addr, error) {
					return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
				}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			var src upstream.RepoSource = c
			switch tc {
			case "spent", "race":
				if _, err := c.HostListRepos(context.Background(), host, "", 10); err != nil {
					t.Fatal(err)
				}
				if tc == "race" {
					src = hiddenPace{c}
				}
			case "relay":
				host = ""
			}
			clock := newFakeClock()
			r := e.runner(func(o *backfill.Options) {
				o.Source, o.Now, o.Sleep, o.RateLimitRetries = src, clock.Now, clock.Sleep, 2
			})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			res, err := r.Run(ctx, backfill.Request{DID: did, Host: host})
			if err != nil {
				t.Fatal(err)
			}
			slept := clock.Sleeps()
			if tc == "relay" {
				if want := []time.Duration{upstream.RetryAfterCeiling, upstream.RetryAfterCeiling}; res.Status != archive.StatusFailed ||
					res.Class != backfill.ClassRateLimited || getRepos.Load() != 3 || !slices.Equal(slept, want) {
					t.Fatalf("the relay answering 429, Retry-After: 330, 2 retries: %v %q, asked %d times, slept %v; want failed rate_limited, asked 3 times, slept %v",
						res.Status, res.Class, getRepos.Load(), slept, want)
				}
				return
			}
			want := int64(0)
			if strings.HasPrefix(tc, "429") {
				want = 1
			}
			if res.Status != archive.StatusFailed || res.Class != backfill.ClassRateLimited || getRepos.Load() != want || len(slept) != 0 {
				t.Fatalf("%s: %v %q (%v), asked %d times, slept %v; want failed rate_limited at once, asked %d times, nothing slept",
					tc, res.Status, res.Class, res.Err, getRepos.Load(), slept, want)
			}
		})
	}
}
