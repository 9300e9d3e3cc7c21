package freeport

import (
	"net"
	"strconv"
	"testing"
)

// TestAddrBelowEphemeralRange: the addresses handed out are bindable and
// below the ephemeral range, where no outgoing connection takes a port.
func TestAddrBelowEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	for range 50 {
		a, err := Addr()
		if err != nil {
			t.Fatal(err)
		}
		_, ps, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, _ := strconv.Atoi(ps)
		if p < lowest || p >= low {
			t.Fatalf("%s: port %d outside [%d, %d)", a, p, lowest, low)
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s handed out, then not bindable: %v", a, err)
		}
		ln.Close()
	}
}
