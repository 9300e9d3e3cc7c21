package backfill_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
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
