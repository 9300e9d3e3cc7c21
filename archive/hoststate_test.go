package archive

import (
	"bytes"
	"errors"
	"testing"
)

// TestHostStateRoster: a host state without a roster entry keeps its
// version 1 bytes (a value written by an earlier build decodes unchanged);
// one with a roster entry is version 2 and round-trips; a version 2 value
// without a roster entry, an unknown version, trailing bytes and an
// over-long status are malformed.
func TestHostStateRoster(t *testing.T) {
	v1 := []byte{0x01, 0x02, 0x03, 0x04, 'h', 't', 't', 'p'} // parked 1, failures 3, class "http"
	h, err := DecodeHostState(v1)
	if err != nil || h != (HostState{ParkedUntilUS: 1, Failures: 3, LastErrClass: "http"}) {
		t.Fatalf("version 1: %+v, %v", h, err)
	}
	if b, _ := EncodeHostState(h); !bytes.Equal(b, v1) {
		t.Fatalf("version 1 re-encoded as %x", b)
	}
	r := HostState{Failures: 3, Status: "active", Accounts: 1200, Seq: 99}
	b, err := EncodeHostState(r)
	if err != nil || b[0] != 0x02 {
		t.Fatalf("roster entry encoded %x, %v", b, err)
	}
	if got, err := DecodeHostState(b); err != nil || got != r {
		t.Fatalf("roster round trip: %+v, %v", got, err)
	}
	empty := append([]byte{0x02}, v1[1:]...)
	empty = append(empty, 0x00, 0x00, 0x00)
	for name, bad := range map[string][]byte{
		"version 2 without a roster entry": empty,
		"version 3":                        append([]byte{0x03}, b[1:]...),
		"trailing byte":                    append(bytes.Clone(b), 0x00),
	} {
		if _, err := DecodeHostState(bad); !errors.Is(err, ErrMalformed) {
			t.Fatalf("%s: %v, want malformed", name, err)
		}
	}
	if _, err := EncodeHostState(HostState{Status: string(make([]byte, 65))}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("a 65-byte status: %v", err)
	}
}
