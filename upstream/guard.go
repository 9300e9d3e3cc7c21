// guard.go owns the address policy of E14: which schemes and addresses a
// request may reach, enforced both on redirect URLs (CheckRedirect) and on
// every resolved IP at dial time, so DNS cannot be used to slip past it.

package upstream

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// MaxRedirects is the most redirects a getRepo follows (E14).
const MaxRedirects = 5

// Resolver maps a host name to its addresses. nil in Options means
// net.DefaultResolver. Tests and the simulated network use it to give
// non-loopback names to loopback servers.
type Resolver func(ctx context.Context, host string) ([]netip.Addr, error)

var (
	metadataV4 = netip.MustParseAddr("169.254.169.254")
	metadataV6 = netip.MustParseAddr("fd00:ec2::254")

	// refused regardless of AllowLoopback. netip's IsPrivate covers
	// 10/8, 172.16/12, 192.168/16 and fc00::/7; IsLinkLocal* covers
	// 169.254/16 and fe80::/10.
	refusedPrefixes = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),          // "this network"
		netip.MustParsePrefix("100.64.0.0/10"),      // carrier-grade NAT
		netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments
		netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking
		netip.MustParsePrefix("240.0.0.0/4"),        // reserved, incl. broadcast
		netip.MustParsePrefix("100::/64"),           // discard-only
		netip.MustParsePrefix("2001:db8::/32"),      // documentation
		netip.MustParsePrefix("64:ff9b:1::/48"),     // local-use NAT64
		netip.MustParsePrefix("::/128"),             // unspecified
		netip.MustParsePrefix("::ffff:0:0:0/96"),    // SIIT
		netip.MustParsePrefix("2002::/16"),          // 6to4 (embeds any v4)
		netip.MustParsePrefix("2001::/32"),          // Teredo (embeds any v4)
		netip.MustParsePrefix("fec0::/10"),          // deprecated site-local
		netip.MustParsePrefix("ff00::/8"),           // multicast (also caught below)
		netip.MustParsePrefix("255.255.255.255/32"), // broadcast
	}
	nat64 = netip.MustParsePrefix("64:ff9b::/96")
)

// addrPolicy decides which addresses a non-relay dial may reach.
type addrPolicy struct {
	// loopbackPorts are the ports a loopback address may be reached on:
	// none unless the relay itself is on loopback, then the relay's own
	// port and those of Options.LoopbackHosts. Every loopback address
	// reaches the same wildcard listeners, so only the port tells one
	// local server from another (the process's own listener among them).
	loopbackPorts map[uint16]bool
}

// newAddrPolicy is the policy of a client following relay (a canonical
// host:port): loopback only when the relay is on loopback, and then only on
// its port and the ports of extra (host:port, each on loopback).
func newAddrPolicy(relay *url.URL, extra []string) (addrPolicy, error) {
	if !isLoopbackHost(relay.Hostname()) {
		if len(extra) > 0 {
			return addrPolicy{}, fmt.Errorf("loopback hosts %q given for a relay that is not on loopback", extra)
		}
		return addrPolicy{}, nil
	}
	p := addrPolicy{loopbackPorts: map[uint16]bool{}}
	_, port, _ := net.SplitHostPort(canonicalHostPort(relay))
	for _, hp := range append([]string{net.JoinHostPort(relay.Hostname(), port)}, extra...) {
		n, err := ParseLoopbackHost(hp)
		if err != nil {
			return addrPolicy{}, err
		}
		p.loopbackPorts[n] = true
	}
	return p, nil
}

// ParseLoopbackHost returns the port of hp, one of Options.LoopbackHosts:
// host:port with the host on loopback and a port from 1 to 65535.
func ParseLoopbackHost(hp string) (uint16, error) {
	host, port, err := net.SplitHostPort(strings.TrimSpace(hp))
	if err != nil || !isLoopbackHost(host) {
		return 0, fmt.Errorf("loopback host %q: want host:port on loopback", hp)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("loopback host %q: bad port", hp)
	}
	return uint16(n), nil
}

// check returns nil when ip may be dialed on port, else an error naming
// why not.
func (p addrPolicy) check(ip netip.Addr, port uint16) error {
	ip = ip.Unmap()
	if ip.Is6() && nat64.Contains(ip) {
		// Well-known NAT64: judge the embedded IPv4 address.
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	reason := ""
	switch {
	case !ip.IsValid():
		reason = "invalid"
	case ip == metadataV4 || ip == metadataV6:
		reason = "metadata"
	case ip.IsUnspecified():
		reason = "unspecified"
	case ip.IsLoopback():
		switch {
		case p.loopbackPorts[port]:
			return nil
		case len(p.loopbackPorts) > 0:
			return &refusal{reason: "loopback-port", addr: netip.AddrPortFrom(ip, port).String()}
		}
		reason = "loopback"
	case ip.IsPrivate():
		reason = "private"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		reason = "link-local"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		reason = "multicast"
	}
	if reason == "" {
		for _, pfx := range refusedPrefixes {
			if pfx.Contains(ip) {
				reason = "reserved"
				break
			}
		}
	}
	if reason == "" {
		return nil
	}
	return &refusal{reason: reason, addr: ip.String()}
}

// refusal is the cause carried by ErrForbiddenRedirect errors.
type refusal struct {
	reason string // closed set: scheme, loopback, private, link-local, ...
	addr   string
}

func (r *refusal) Error() string {
	switch r.reason {
	case "scheme", "empty-host":
		return fmt.Sprintf("%s: %s: %s", ErrForbiddenRedirect, r.reason, r.addr)
	case "loopback-port":
		return fmt.Sprintf("%s: loopback address %s is not on the relay's port (nor a declared loopback host)", ErrForbiddenRedirect, r.addr)
	}
	return fmt.Sprintf("%s: %s address %s", ErrForbiddenRedirect, r.reason, r.addr)
}

func (r *refusal) Is(target error) bool { return target == ErrForbiddenRedirect }

// refusalReason returns the closed-set reason of a guard refusal, or "".
func refusalReason(err error) string {
	var r *refusal
	if errors.As(err, &r) {
		return r.reason
	}
	return ""
}

// isLoopbackHost reports whether a URL host names the loopback interface
// without resolving it: an IP literal in 127/8 or ::1, "localhost", or a
// name under ".localhost" (RFC 6761).
func isLoopbackHost(hostname string) bool {
	h := strings.TrimSuffix(strings.ToLower(hostname), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return ip.Unmap().IsLoopback()
	}
	return false
}

// guardedDialer dials only addresses the policy allows, except for the relay
// itself (the operator's configuration is trusted). Each dial resolves once
// and connects to the checked IP literals, so the checked address is the one
// connected to.
type guardedDialer struct {
	policy    addrPolicy
	relayAddr string   // the relay's key (canonicalHostPort); exempt from the policy
	exempt    []string // further host:port addresses exempt (GuardedDial)
	resolve   Resolver
	dialer    net.Dialer
	timeout   time.Duration // covers resolution and every dial attempt
	metrics   *Metrics
}

func (g *guardedDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	if g.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	exempt := g.exempts(addr)
	portNum, _ := strconv.ParseUint(port, 10, 16)
	var ips []netip.Addr
	if ip, perr := netip.ParseAddr(host); perr == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = g.resolve(ctx, host)
		if err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		if len(ips) == 0 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}}
		}
	}
	if !exempt {
		// One bad answer refuses the host: a mixed answer is a rebinding
		// attempt or a misconfiguration, never worth the risk.
		for _, ip := range ips {
			if err := g.policy.check(ip, uint16(portNum)); err != nil {
				g.metrics.refused("dial", refusalReason(err))
				return nil, err
			}
		}
	}
	var firstErr error
	for _, ip := range ips {
		c, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, firstErr
}

// exempts reports whether addr (host:port, in any spelling) is the relay's
// or another trusted address.
func (g *guardedDialer) exempts(addr string) bool {
	key := canonicalHostPort(&url.URL{Host: addr})
	if key == g.relayAddr {
		return true
	}
	for _, e := range g.exempt {
		if key == e {
			return true
		}
	}
	return false
}

// GuardedDial returns a DialContext that applies the client's address policy
// to connections made for other components (DID documents and handles, which
// name hosts anyone chooses): the relay's address and those of the
// endpoints the operator configured (trusted, base URLs such as the PLC
// directory's; an unparsable one is ignored) are exempt; every other
// resolved address must pass the policy, or the dial fails with
// ErrForbiddenRedirect and is counted on stage "dial".
func (c *Client) GuardedDial(trusted ...string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	g := *c.dialer
	for _, t := range trusted {
		if u, err := url.Parse(t); err == nil && u.Host != "" {
			g.exempt = append(g.exempt, canonicalHostPort(u))
		}
	}
	return g.DialContext
}

func defaultResolve(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// checkRedirect is the http.Client CheckRedirect of the getRepo client:
// at most MaxRedirects hops, http(s) only, and IP-literal or localhost
// targets checked against the policy before any dial. Hostnames are checked
// again, after resolution, by the guarded dialer.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		c.metrics.refused("redirect", "too_many")
		return fmt.Errorf("%w: more than %d", ErrTooManyRedirects, MaxRedirects)
	}
	if err := c.checkTarget(req.URL); err != nil {
		c.metrics.refused("redirect", refusalReason(err))
		return err
	}
	return c.redirected(req, len(via))
}

// checkTarget applies the static part of the policy to a redirect URL.
func (c *Client) checkTarget(u *url.URL) error {
	switch u.Scheme {
	case "http", "https":
	default:
		return &refusal{reason: "scheme", addr: u.Scheme + "://" + u.Host}
	}
	host := u.Hostname()
	if host == "" {
		return &refusal{reason: "empty-host", addr: u.String()}
	}
	hp := canonicalHostPort(u)
	if hp == c.relayAddr {
		return nil
	}
	_, ps, _ := net.SplitHostPort(hp)
	port, err := strconv.ParseUint(ps, 10, 16)
	if err != nil {
		return &refusal{reason: "invalid", addr: u.Host}
	}
	if isLoopbackHost(host) {
		// A loopback name ("localhost"): judged as the loopback address
		// it stands for; its answers are checked again at dial time.
		if err := c.policy.check(netip.IPv6Loopback(), uint16(port)); err != nil {
			return &refusal{reason: refusalReason(err), addr: net.JoinHostPort(host, ps)}
		}
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return c.policy.check(ip, uint16(port))
	}
	return nil
}

// canonicalHostPort is the key of u's host for the per-host limits (pace,
// download slots) and the exempt addresses: its canonical form
// (CanonicalHost) with the scheme's default port filled in (80 for a scheme
// of no known default), so every spelling of one host is one key.
func canonicalHostPort(u *url.URL) string {
	c := url.URL{Host: CanonicalHost(u.Scheme, u.Host)}
	port := c.Port()
	if port == "" {
		if port = defaultPort(u.Scheme); port == "" {
			port = "80"
		}
	}
	return net.JoinHostPort(c.Hostname(), port)
}
