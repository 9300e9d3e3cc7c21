package ident

// web.go owns the transport of the resolver's own HTTP client: the dialer
// it is given (the address policy) and, for the simulated network, the
// redirection of every did:web and handle request to one base URL.

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// transport is the RoundTripper of the client New builds: the default one
// keeping an idle connection per slot, dialling through Dial when set (no
// proxy, which would bypass it), sent through Web when set.
func (c *Config) transport() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	// Keep a connection per resolution in flight: the default keeps 2 per
	// host, so concurrent resolutions against one directory would dial and
	// close a connection each.
	t.MaxIdleConnsPerHost = max(c.Concurrency, 2)
	if c.Dial != nil {
		t.Proxy, t.DialContext = nil, c.Dial
	}
	var rt http.RoundTripper = t
	if c.Web == "" {
		return rt
	}
	u, err := url.Parse(c.Web)
	if err != nil || u.Host == "" {
		return failing{err: fmt.Errorf("ident: Web %q: want an http(s) base URL", c.Web)}
	}
	return via{base: u, next: rt}
}

// via sends every did:web and handle request (a /.well-known/ path) to
// base's scheme and host:port, keeping the host asked for as the Host
// header.
type via struct {
	base *url.URL
	next http.RoundTripper
}

func (v via) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(req.URL.Path, "/.well-known/") { // the PLC directory's
		return v.next.RoundTrip(req)
	}
	out := req.Clone(req.Context())
	out.Host = req.URL.Host
	out.URL.Scheme, out.URL.Host = v.base.Scheme, v.base.Host
	return v.next.RoundTrip(out)
}

// failing answers every request with its error (a misconfigured Web).
type failing struct{ err error }

func (f failing) RoundTrip(*http.Request) (*http.Response, error) { return nil, f.err }
