package upstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var carBody = bytes.Repeat([]byte("0123456789abcdef"), 4096) // 64 KiB stand-in CAR

// pdsServer serves carBody at /car and counts hits.
func pdsServer(t *testing.T) *server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept") != "application/vnd.ipld.car" {
			http.Error(w, "bad accept "+r.Header.Get("Accept"), 400)
			return
		}
		if r.Header.Get("User-Agent") != "backstream-test" {
			http.Error(w, "bad UA", 400)
			return
		}
		w.Header().Set("Content-Type", "application/vnd.ipld.car")
		w.Write(carBody)
	})
}

// redirectRelay redirects every getRepo to target (a URL prefix + did).
func redirectRelay(t *testing.T, target func(did string) string) *server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/xrpc/com.atproto.sync.getRepo" {
			http.NotFound(w, r)
			return
		}
		http.Redirect(w, r, target(r.URL.Query().Get("did")), http.StatusFound)
	})
}

func TestGetRepoRedirectFollowedFinalHostRecorded(t *testing.T) {
	pds := pdsServer(t)
	relay := redirectRelay(t, func(did string) string { return pds.URL + "/car?did=" + did })
	c, scratch := testClient(t, relay.URL, nil)
	d, err := c.GetRepo(context.Background(), testDID)
	if err != nil {
		t.Fatalf("GetRepo: %v", err)
	}
	defer d.Remove()
	if d.FinalHost != pds.Listener.Addr().String() {
		t.Fatalf("FinalHost %q, want %q", d.FinalHost, pds.Listener.Addr().String())
	}
	if d.Redirects != 1 || d.Size != int64(len(carBody)) || d.DID != testDID {
		t.Fatalf("download: %+v", d)
	}
	got, err := os.ReadFile(d.Path)
	if err != nil || !bytes.Equal(got, carBody) {
		t.Fatalf("scratch content mismatch (err %v, %d bytes)", err, len(got))
	}
	if !strings.HasPrefix(d.Path, scratch+string(os.PathSeparator)) {
		t.Fatalf("download %q not in scratch %q", d.Path, scratch)
	}
	if err := d.Remove(); err != nil {
		t.Fatal(err)
	}
	if err := d.Remove(); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	assertScratchEmpty(t, scratch)
}

// TestGetRepoRedirectChain: 5 redirects are followed, a 6th is refused.
func TestGetRepoRedirectChain(t *testing.T) {
	pds := pdsServer(t)
	var hop *server
	hop = newServer(t, func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if n <= 1 {
			http.Redirect(w, r, pds.URL+"/car", http.StatusTemporaryRedirect)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("%s/hop?n=%d", hop.URL, n-1), http.StatusFound)
	})
	for _, tc := range []struct {
		redirects int
		ok        bool
	}{{1, true}, {5, true}, {6, false}, {9, false}} {
		t.Run(strconv.Itoa(tc.redirects), func(t *testing.T) {
			// relay redirect + (n-1) hops + final hop to pds = n redirects
			relay := redirectRelay(t, func(string) string { return fmt.Sprintf("%s/hop?n=%d", hop.URL, tc.redirects-1) })
			if tc.redirects == 1 {
				relay = redirectRelay(t, func(string) string { return pds.URL + "/car" })
			}
			before := pds.hits.Load()
			c, scratch := testClient(t, relay.URL, nil)
			d, err := c.GetRepo(context.Background(), testDID)
			if tc.ok {
				if err != nil {
					t.Fatalf("GetRepo: %v", err)
				}
				if d.Redirects != tc.redirects {
					t.Fatalf("redirects %d, want %d", d.Redirects, tc.redirects)
				}
				d.Remove()
				return
			}
			if !errors.Is(err, ErrTooManyRedirects) || !errors.Is(err, ErrPermanent) || Classify(err) != ClassPermanent {
				t.Fatalf("want too many redirects, got %v (class %v)", err, Classify(err))
			}
			if pds.hits.Load() != before {
				t.Fatalf("PDS reached after too many redirects")
			}
			assertScratchEmpty(t, scratch)
		})
	}
}

// TestGetRepoForbiddenRedirects: E14 targets refused before any dial, with
// the right error, and nothing left in scratch.
func TestGetRepoForbiddenRedirects(t *testing.T) {
	for _, target := range []string{
		"http://10.0.0.1/car",
		"http://10.0.0.1:8080/car",
		"https://192.168.1.20/car",
		"http://172.16.5.4/car",
		"http://169.254.169.254/latest/meta-data/",
		"http://[fd00:ec2::254]/latest/meta-data/",
		"http://[fd12:3456::1]/car",
		"http://[fe80::1]/car",
		"http://[::ffff:10.0.0.1]/car",
		"http://[64:ff9b::a00:1]/car", // NAT64 of 10.0.0.1
		"http://0.0.0.0/car",
		"http://[::]/car",
		"http://224.0.0.1/car",
		"http://100.64.0.1/car",
		"ftp://pds.example.com/car",
		"file:///etc/passwd",
		"gopher://pds.example.com/",
	} {
		t.Run(target, func(t *testing.T) {
			relay := redirectRelay(t, func(string) string { return target })
			c, scratch := testClient(t, relay.URL, nil)
			_, err := c.GetRepo(context.Background(), testDID)
			if !errors.Is(err, ErrForbiddenRedirect) || !errors.Is(err, ErrPermanent) || Classify(err) != ClassPermanent {
				t.Fatalf("want forbidden redirect, got %v (class %v)", err, Classify(err))
			}
			assertScratchEmpty(t, scratch)
		})
	}
}

// TestGetRepoLoopbackOnlyWhenRelayLoopback: a relay reached by a
// non-loopback name (the resolver seam maps it to 127.0.0.1) may not
// redirect to loopback, whether named by literal, by "localhost" or by a
// name that resolves to loopback (checked at dial time). The same redirects
// are allowed when the relay itself is on loopback.
func TestGetRepoLoopbackOnlyWhenRelayLoopback(t *testing.T) {
	pds := pdsServer(t)
	targets := map[string]string{
		"literal":   pds.URL + "/car",
		"localhost": pds.hostURL("localhost") + "/car",
		"dns-trick": pds.hostURL("pds.example.com") + "/car",
	}
	resolve := staticResolver(map[string]string{
		"relay.example.com": "127.0.0.1",
		"pds.example.com":   "127.0.0.1",
		"localhost":         "127.0.0.1",
	})
	for name, target := range targets {
		t.Run(name, func(t *testing.T) {
			relay := redirectRelay(t, func(string) string { return target })
			before := pds.hits.Load()

			// Relay on a non-loopback name: refused.
			c, scratch := testClient(t, relay.hostURL("relay.example.com"), func(o *Options) { o.Resolve = resolve })
			if c.AllowLoopback() {
				t.Fatal("AllowLoopback for a non-loopback relay name")
			}
			_, err := c.GetRepo(context.Background(), testDID)
			if !errors.Is(err, ErrForbiddenRedirect) || Classify(err) != ClassPermanent {
				t.Fatalf("want forbidden redirect, got %v", err)
			}
			if pds.hits.Load() != before {
				t.Fatal("loopback PDS was reached")
			}
			assertScratchEmpty(t, scratch)

			// Relay on loopback: allowed.
			c2, _ := testClient(t, relay.URL, func(o *Options) { o.Resolve = resolve })
			if !c2.AllowLoopback() {
				t.Fatal("AllowLoopback false for a loopback relay")
			}
			d, err := c2.GetRepo(context.Background(), testDID)
			if err != nil {
				t.Fatalf("loopback relay: %v", err)
			}
			d.Remove()
		})
	}
}

// TestGetRepoDialGuardDNSRebind: a hostname whose answer includes a private
// address is refused at dial time even with a loopback relay.
func TestGetRepoDialGuardDNSRebind(t *testing.T) {
	pds := pdsServer(t)
	relay := redirectRelay(t, func(string) string { return pds.hostURL("evil.example.com") + "/car" })
	for _, answer := range []string{"10.0.0.7", "169.254.169.254", "127.0.0.1,10.0.0.7", "fd00:ec2::254"} {
		t.Run(answer, func(t *testing.T) {
			c, scratch := testClient(t, relay.URL, func(o *Options) {
				o.Resolve = staticResolver(map[string]string{"evil.example.com": answer})
			})
			_, err := c.GetRepo(context.Background(), testDID)
			if !errors.Is(err, ErrForbiddenRedirect) || Classify(err) != ClassPermanent {
				t.Fatalf("want forbidden, got %v", err)
			}
			assertScratchEmpty(t, scratch)
		})
	}
}

// TestGetRepoRelayOnPrivateNameAllowed: the relay's own host is exempt from
// the policy (operator configuration), and so are redirects back to it.
func TestGetRepoRelayOnPrivateNameAllowed(t *testing.T) {
	var relay *server
	relay = newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/car" {
			w.Write(carBody)
			return
		}
		http.Redirect(w, r, relay.hostURL("relay.internal")+"/car", http.StatusFound)
	})
	c, _ := testClient(t, relay.hostURL("relay.internal"), func(o *Options) {
		o.Resolve = staticResolver(map[string]string{"relay.internal": "127.0.0.1"})
	})
	d, err := c.GetRepo(context.Background(), testDID)
	if err != nil {
		t.Fatalf("GetRepo: %v", err)
	}
	defer d.Remove()
	if d.FinalHost != "relay.internal:"+relay.port() {
		t.Fatalf("FinalHost %q", d.FinalHost)
	}
}

func TestGetRepoXRPCErrors(t *testing.T) {
	cases := []struct {
		status   int
		name     string
		msg      string
		sentinel error
		class    Class
	}{
		{400, "RepoNotFound", "Could not find repo for DID", ErrRepoNotFound, ClassNotFound},
		{404, "NotFound", "Repo not found: did:plc:x", ErrRepoNotFound, ClassNotFound},
		{400, "RepoDeactivated", "Repo has been deactivated", ErrRepoDeactivated, ClassUnavailable},
		{400, "RepoSuspended", "Repo has been suspended", ErrRepoSuspended, ClassUnavailable},
		{400, "RepoTakendown", "Repo has been takendown", ErrRepoTakendown, ClassUnavailable},
		{400, "InvalidRequest", "bad did", ErrPermanent, ClassPermanent},
		{401, "AuthRequired", "", ErrPermanent, ClassPermanent},
		{404, "NotFound", "no such route", ErrPermanent, ClassPermanent},
		{410, "", "", ErrPermanent, ClassPermanent},
		{408, "", "", ErrTransient, ClassTransient},
		{500, "InternalServerError", "boom", ErrTransient, ClassTransient},
		{502, "", "", ErrTransient, ClassTransient},
		{503, "", "", ErrTransient, ClassTransient},
		{504, "", "", ErrTransient, ClassTransient},
		{429, "RateLimitExceeded", "", ErrRateLimited, ClassRateLimited},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%d-%s", tc.status, tc.name), func(t *testing.T) {
			relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tc.name == "" {
					w.WriteHeader(tc.status)
					w.Write([]byte("<html>gateway trouble</html>"))
					return
				}
				xrpcError(w, tc.status, tc.name, tc.msg)
			})
			c, scratch := testClient(t, relay.URL, nil)
			_, err := c.GetRepo(context.Background(), testDID)
			var ue *Error
			if !errors.As(err, &ue) {
				t.Fatalf("not an *Error: %v", err)
			}
			if !errors.Is(err, tc.sentinel) || Classify(err) != tc.class {
				t.Fatalf("got %v (class %v), want %v / %v", err, Classify(err), tc.sentinel, tc.class)
			}
			if ue.StatusCode != tc.status || ue.Name != tc.name || ue.Message != tc.msg || ue.Op != "getRepo" {
				t.Fatalf("fields: %+v", ue)
			}
			for _, other := range []error{ErrRepoNotFound, ErrRepoDeactivated, ErrRepoSuspended, ErrRepoTakendown, ErrRateLimited} {
				if other != tc.sentinel && errors.Is(err, other) {
					t.Fatalf("%v also matches %v", err, other)
				}
			}
			assertScratchEmpty(t, scratch)
		})
	}
}

func TestGetRepoRateLimitHeaders(t *testing.T) {
	reset := time.Now().Add(42 * time.Second).Truncate(time.Second)
	cases := []struct {
		name    string
		headers map[string]string
		want    time.Duration
		slack   time.Duration
	}{
		{"retry-after-seconds", map[string]string{"Retry-After": "7"}, 7 * time.Second, 0},
		{"both-prefers-retry-after", map[string]string{"Retry-After": "7", "RateLimit-Reset": strconv.FormatInt(reset.Unix(), 10)}, 7 * time.Second, 0},
		{"ratelimit-reset", map[string]string{"RateLimit-Limit": "3000", "RateLimit-Remaining": "0", "RateLimit-Reset": strconv.FormatInt(reset.Unix(), 10)}, 42 * time.Second, 2 * time.Second},
		{"retry-after-date", map[string]string{"Retry-After": reset.UTC().Format(http.TimeFormat)}, 42 * time.Second, 2 * time.Second},
		{"ceiling", map[string]string{"Retry-After": "86400"}, RetryAfterCeiling, 0},
		{"reset-in-past", map[string]string{"RateLimit-Reset": "1000"}, 0, 0},
		{"none", nil, 0, 0},
		{"garbage", map[string]string{"Retry-After": "soon", "RateLimit-Reset": "later"}, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				for k, v := range tc.headers {
					w.Header().Set(k, v)
				}
				xrpcError(w, 429, "RateLimitExceeded", "Rate Limit Exceeded")
			})
			c, _ := testClient(t, relay.URL, nil)
			_, err := c.GetRepo(context.Background(), testDID)
			if Classify(err) != ClassRateLimited || !errors.Is(err, ErrRateLimited) {
				t.Fatalf("got %v", err)
			}
			got := RetryAfter(err)
			if got < tc.want-tc.slack || got > tc.want {
				t.Fatalf("RetryAfter %v, want %v (-%v)", got, tc.want, tc.slack)
			}
		})
	}
}

// hijackServer runs fn on the raw connection of every request.
func hijackServer(t *testing.T, fn func(conn net.Conn, rw io.ReadWriter)) *server {
	return newServer(t, func(w http.ResponseWriter, r *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("no hijacker")
			return
		}
		conn, buf, err := hj.Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		fn(conn, buf)
	})
}

func TestGetRepoConnectionResetMidBody(t *testing.T) {
	for _, mode := range []string{"rst", "eof-short-content-length", "eof-chunked"} {
		t.Run(mode, func(t *testing.T) {
			relay := hijackServer(t, func(conn net.Conn, rw io.ReadWriter) {
				if mode == "eof-chunked" {
					fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1000\r\n%s\r\n", bytes.Repeat([]byte("x"), 0x1000))
				} else {
					fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
					conn.Write(bytes.Repeat([]byte("x"), 5000))
				}
				time.Sleep(50 * time.Millisecond)
				if mode == "rst" {
					conn.(*net.TCPConn).SetLinger(0)
				}
			})
			c, scratch := testClient(t, relay.URL, nil)
			_, err := c.GetRepo(context.Background(), testDID)
			if err == nil || Classify(err) != ClassTransient || !errors.Is(err, ErrTransient) {
				t.Fatalf("want transient, got %v (class %v)", err, Classify(err))
			}
			assertScratchEmpty(t, scratch)
		})
	}
}

func TestGetRepoIdleBodyTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.Write(bytes.Repeat([]byte("y"), 3000))
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c, scratch := testClient(t, relay.URL, func(o *Options) { o.IdleBodyTimeout = 300 * time.Millisecond })
	start := time.Now()
	_, err := c.GetRepo(context.Background(), testDID)
	el := time.Since(start)
	if !errors.Is(err, ErrIdleTimeout) || !errors.Is(err, ErrTransient) || Classify(err) != ClassTransient {
		t.Fatalf("want idle timeout, got %v (class %v)", err, Classify(err))
	}
	if el < 300*time.Millisecond || el > 3*time.Second {
		t.Fatalf("idle timeout fired after %v", el)
	}
	assertScratchEmpty(t, scratch)
}

// TestGetRepoSlowButSteadyBodyNotIdle: a body trickling faster than the idle
// timeout is not cut, even though the whole transfer takes longer.
func TestGetRepoSlowButSteadyBodyNotIdle(t *testing.T) {
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 8; i++ {
			w.Write([]byte("chunk"))
			w.(http.Flusher).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	c, _ := testClient(t, relay.URL, func(o *Options) { o.IdleBodyTimeout = 300 * time.Millisecond })
	d, err := c.GetRepo(context.Background(), testDID)
	if err != nil {
		t.Fatalf("steady body cut: %v", err)
	}
	defer d.Remove()
	if d.Size != 40 {
		t.Fatalf("size %d", d.Size)
	}
}

func TestGetRepoResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c, scratch := testClient(t, relay.URL, func(o *Options) { o.ResponseHeaderTimeout = 200 * time.Millisecond })
	_, err := c.GetRepo(context.Background(), testDID)
	if Classify(err) != ClassTransient {
		t.Fatalf("want transient, got %v (class %v)", err, Classify(err))
	}
	assertScratchEmpty(t, scratch)
}

func TestGetRepoConnectionRefused(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c, _ := testClient(t, "http://"+addr, nil)
	_, err = c.GetRepo(context.Background(), testDID)
	if Classify(err) != ClassTransient {
		t.Fatalf("want transient, got %v (class %v)", err, Classify(err))
	}
}

func TestGetRepoByteCap(t *testing.T) {
	for _, mode := range []string{"content-length", "chunked", "exact"} {
		t.Run(mode, func(t *testing.T) {
			relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				body := bytes.Repeat([]byte("z"), 5000)
				if mode == "exact" {
					body = body[:1000]
				}
				switch mode {
				case "exact":
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
					w.Write(body)
					return
				case "content-length":
					// Declares too much, sends a little, then stalls: only
					// the Content-Length pre-check fails this fast.
					w.Header().Set("Content-Length", strconv.Itoa(len(body)))
					w.Write(body[:10])
					w.(http.Flusher).Flush()
					<-r.Context().Done()
					return
				}
				for i := 0; i < 5; i++ {
					w.Write(body[:1000])
					w.(http.Flusher).Flush()
				}
			})
			c, scratch := testClient(t, relay.URL, func(o *Options) {
				o.MaxCARBytes = 1000
				o.IdleBodyTimeout = time.Second
			})
			start := time.Now()
			d, err := c.GetRepo(context.Background(), testDID)
			if el := time.Since(start); el > 500*time.Millisecond {
				t.Fatalf("cap enforced after %v", el)
			}
			if mode == "exact" {
				if err != nil || d.Size != 1000 {
					t.Fatalf("body at the cap refused: %v", err)
				}
				d.Remove()
				return
			}
			if !errors.Is(err, ErrTooLarge) || !errors.Is(err, ErrPermanent) || Classify(err) != ClassPermanent {
				t.Fatalf("want too large, got %v (class %v)", err, Classify(err))
			}
			assertScratchEmpty(t, scratch)
		})
	}
}

func TestGetRepoContextCancellation(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("did") == testDID {
			// headers and part of the body, then hang
			w.Header().Set("Content-Length", "100000")
			w.Write([]byte("partial"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	c, scratch := testClient(t, relay.URL, nil)

	t.Run("cancel-mid-body", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(150*time.Millisecond, cancel)
		_, err := c.GetRepo(ctx, testDID)
		if Classify(err) != ClassCanceled || !errors.Is(err, context.Canceled) {
			t.Fatalf("want canceled, got %v (class %v)", err, Classify(err))
		}
		assertScratchEmpty(t, scratch)
	})
	t.Run("deadline-before-headers", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		_, err := c.GetRepo(ctx, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa")
		if Classify(err) != ClassCanceled || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want canceled/deadline, got %v (class %v)", err, Classify(err))
		}
		assertScratchEmpty(t, scratch)
	})
	t.Run("deadline-mid-body", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		defer cancel()
		_, err := c.GetRepo(ctx, testDID)
		if Classify(err) != ClassCanceled || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("want canceled/deadline, got %v (class %v)", err, Classify(err))
		}
		assertScratchEmpty(t, scratch)
	})
}

func TestGetRepoInvalidDID(t *testing.T) {
	relay := pdsServer(t)
	c, _ := testClient(t, relay.URL, nil)
	_, err := c.GetRepo(context.Background(), "not a did")
	if Classify(err) != ClassPermanent || relay.hits.Load() != 0 {
		t.Fatalf("invalid DID: %v, hits %d", err, relay.hits.Load())
	}
}

func TestNewRejectsBadRelayURLs(t *testing.T) {
	for _, u := range []string{"ftp://relay", "relay.example.com", "http://", "http://u:p@relay/", "http://relay/?x=1", "::"} {
		if _, err := New(u, Options{ScratchDir: t.TempDir()}); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
	c, err := New("https://bsky.network/", Options{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if c.AllowLoopback() {
		t.Fatal("public relay allows loopback")
	}
	if got := c.xrpcURL("com.atproto.sync.getRepo", nil); got != "https://bsky.network/xrpc/com.atproto.sync.getRepo" {
		t.Fatalf("xrpc URL %q", got)
	}
	for _, u := range []string{"http://127.0.0.1:2470", "http://localhost:2470", "http://[::1]:80", "http://relay.localhost"} {
		c, err := New(u, Options{ScratchDir: t.TempDir()})
		if err != nil || !c.AllowLoopback() {
			t.Errorf("New(%q): err %v, loopback %v", u, err, err == nil && c.AllowLoopback())
		}
	}
}
