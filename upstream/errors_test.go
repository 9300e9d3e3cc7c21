package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestClassifyRawErrors(t *testing.T) {
	cases := []struct {
		err  error
		want Class
	}{
		{nil, ClassNone},
		{context.Canceled, ClassCanceled},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), ClassCanceled},
		{io.ErrUnexpectedEOF, ClassTransient},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, ClassTransient},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, ClassTransient},
		{&net.DNSError{Err: "no such host", Name: "x", IsNotFound: true}, ClassTransient},
		{errors.New("something else"), ClassPermanent},
		{ErrTooLarge, ClassPermanent},
		{fmt.Errorf("x: %w", ErrIdleTimeout), ClassTransient},
		{fmt.Errorf("x: %w", ErrRateLimited), ClassRateLimited},
		{&Error{Op: "getRepo", StatusCode: 429, RetryAfter: time.Minute, Err: ErrRateLimited}, ClassRateLimited},
		{&refusal{reason: "private", addr: "10.0.0.1"}, ClassPermanent},
		{fmt.Errorf("getRepo: %w", &Error{Op: "getRepo", StatusCode: 400, Name: "RepoTakendown", kind: ErrRepoTakendown}), ClassUnavailable},
	}
	for _, tc := range cases {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestErrorIsGroups(t *testing.T) {
	mk := func(k error) error { return &Error{Op: "getRepo", kind: k} }
	if !errors.Is(mk(ErrTooLarge), ErrPermanent) || !errors.Is(mk(ErrForbiddenRedirect), ErrPermanent) ||
		!errors.Is(mk(ErrTooManyRedirects), ErrPermanent) || !errors.Is(mk(ErrMalformedResponse), ErrPermanent) {
		t.Fatal("permanent kinds must match ErrPermanent")
	}
	if !errors.Is(mk(ErrIdleTimeout), ErrTransient) || errors.Is(mk(ErrIdleTimeout), ErrPermanent) {
		t.Fatal("idle timeout must be transient only")
	}
	for _, k := range []error{ErrRepoNotFound, ErrRepoDeactivated, ErrRepoSuspended, ErrRepoTakendown, ErrRateLimited} {
		if errors.Is(mk(k), ErrPermanent) || errors.Is(mk(k), ErrTransient) {
			t.Fatalf("%v must match neither group", k)
		}
	}
	if ClassCanceled.String() != "canceled" || Class(99).String() != "class(99)" {
		t.Fatal("class names")
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := map[string]time.Duration{
		"":                              0,
		"0":                             0,
		"-3":                            0,
		"7":                             7 * time.Second,
		" 12 ":                          12 * time.Second,
		"99999999999999999999":          0,
		"100000":                        RetryAfterCeiling,
		"Wed, 01 Jan 2025 00:01:00 GMT": time.Minute,
		"Tue, 31 Dec 2024 23:00:00 GMT": 0,
		"tomorrow":                      0,
	}
	for in, want := range cases {
		if got := parseRetryAfter(in, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", in, got, want)
		}
	}
	if !parseReset("1735689600").Equal(now) || !parseReset("x").IsZero() || !parseReset("-1").IsZero() {
		t.Error("parseReset")
	}
	e := &Error{Reset: now.Add(time.Hour), kind: ErrRateLimited}
	if got := retryAfterAt(e, now); got != RetryAfterCeiling {
		t.Errorf("reset an hour out: %v", got)
	}
	if got := RetryAfter(errors.New("plain")); got != 0 {
		t.Errorf("plain error: %v", got)
	}
}

func TestAddrPolicy(t *testing.T) {
	allowed := []string{"8.8.8.8", "1.1.1.1", "203.0.113.9", "2606:4700::1111", "2a01:4f8::1", "::ffff:8.8.8.8", "64:ff9b::808:808"}
	refused := []string{
		"10.0.0.1", "10.255.255.255", "172.16.0.1", "172.31.255.254", "192.168.0.1",
		"169.254.169.254", "169.254.1.1", "fd00:ec2::254", "fc00::1", "fe80::1",
		"0.0.0.0", "0.1.2.3", "::", "224.0.0.1", "239.255.255.250", "ff02::1",
		"100.64.0.1", "198.18.0.1", "255.255.255.255", "240.0.0.1",
		"::ffff:10.0.0.1", "::ffff:169.254.169.254", "64:ff9b::a00:1", "2002:a00:1::1",
		"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1",
	}
	p := addrPolicy{}
	for _, s := range allowed {
		if err := p.check(netip.MustParseAddr(s), 443); err != nil {
			t.Errorf("%s refused: %v", s, err)
		}
	}
	for _, s := range refused {
		err := p.check(netip.MustParseAddr(s), 443)
		if !errors.Is(err, ErrForbiddenRedirect) {
			t.Errorf("%s allowed", s)
		}
	}
	lp := addrPolicy{loopbackPorts: map[uint16]bool{7777: true}}
	for _, s := range []string{"127.0.0.1", "127.1.2.3", "::1", "::ffff:127.0.0.1"} {
		if err := lp.check(netip.MustParseAddr(s), 7777); err != nil {
			t.Errorf("loopback relay: %s refused: %v", s, err)
		}
		if err := lp.check(netip.MustParseAddr(s), 6008); !errors.Is(err, ErrForbiddenRedirect) || refusalReason(err) != "loopback-port" {
			t.Errorf("loopback relay: %s on another port: %v", s, err)
		}
	}
	for _, s := range []string{"10.0.0.1", "169.254.169.254", "0.0.0.0"} {
		if err := lp.check(netip.MustParseAddr(s), 7777); err == nil {
			t.Errorf("loopback relay: %s allowed", s)
		}
	}
}

func TestMetricsCountRequestsAndRefusals(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	var nilM *Metrics
	nilM.request("getRepo", ClassNone) // nil-safe
	nilM.refused("dial", "private")
	pds := pdsServer(t)
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("did") {
		case testDID:
			http.Redirect(w, r, pds.URL+"/car", http.StatusFound)
		case "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa":
			http.Redirect(w, r, "http://10.0.0.1/car", http.StatusFound)
		default:
			xrpcError(w, 400, "RepoNotFound", "nope")
		}
	})
	c, _ := testClient(t, relay.URL, func(o *Options) { o.Metrics = m })
	d, err := c.GetRepo(context.Background(), testDID)
	if err != nil {
		t.Fatal(err)
	}
	d.Remove()
	c.GetRepo(context.Background(), "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa")
	c.GetRepo(context.Background(), "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb")
	for _, tc := range []struct {
		c    prometheus.Counter
		want float64
	}{
		{m.requests.WithLabelValues("getRepo", "ok"), 1},
		{m.requests.WithLabelValues("getRepo", "permanent"), 1},
		{m.requests.WithLabelValues("getRepo", "not_found"), 1},
		{m.refusedTarget.WithLabelValues("redirect", "private"), 1},
		{m.bytes, float64(len(carBody))},
	} {
		if got := counterValue(t, tc.c); got != tc.want {
			t.Errorf("counter = %v, want %v", got, tc.want)
		}
	}
}
