package clientkey

import (
	"net"
	"net/netip"
	"testing"
)

func TestKeys(t *testing.T) {
	for addr, want := range map[string]string{
		"192.0.2.7:443":             "192.0.2.7",
		"[::ffff:192.0.2.7]:443":    "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:80": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ffff::1]:80": "2001:db8:1:2::/64",
		"[2001:db8:1:3::1]:80":      "2001:db8:1:3::/64",
		"[::1]:5000":                "::/64",
		"not-an-address":            "not-an-address",
	} {
		if got := OfHostPort(addr); got != want {
			t.Errorf("OfHostPort(%s) = %s, want %s", addr, got, want)
		}
		if a, err := net.ResolveTCPAddr("tcp", addr); err == nil {
			if got := OfAddr(a); got != want {
				t.Errorf("OfAddr(%s) = %s, want %s", addr, got, want)
			}
		}
	}
	if got := Of(netip.MustParseAddr("198.51.100.1")); got != "198.51.100.1" {
		t.Errorf("Of = %s", got)
	}
}
