// Package clientkey says what counts as one client for backstream's
// per-client caps (open connections at the public listener, connected
// subscribers): an IPv4 address, or an IPv6 /64 — the block one host or one
// customer is normally given, so rotating addresses inside it gains a
// client nothing. Both caps key by it, so they agree on who a client is.
package clientkey

import (
	"net"
	"net/netip"
)

// Of is the key of ip; an IPv4-mapped IPv6 address is its IPv4 address.
// An invalid ip keys as itself.
func Of(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// OfHostPort is the key of a "host:port" address (http.Request.RemoteAddr,
// net.Addr.String); one that is not an IP address and port keys as itself.
func OfHostPort(addr string) string {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return addr
	}
	return Of(ap.Addr())
}

// OfAddr is the key of a connection's remote address.
func OfAddr(a net.Addr) string {
	if t, ok := a.(*net.TCPAddr); ok {
		if ip, ok := netip.AddrFromSlice(t.IP); ok {
			return Of(ip)
		}
	}
	return OfHostPort(a.String())
}
