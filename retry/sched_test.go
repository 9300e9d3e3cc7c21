package retry

import (
	"context"
	"testing"
)

// TestRelayParkNeedsARelay: a park of the relay every download passes
// through drops every queued repo and blocks every download until its
// reset; with no relay configured, a park of the unknown host ("", a repo
// recorded without one) drops no other host's queued repos.
func TestRelayParkNeedsARelay(t *testing.T) {
	ctx := context.Background()
	now := func() int64 { return 1_000 }
	for _, tc := range []struct {
		relay  string
		queued int         // left after the park
		next   offerResult // of a PDS's repo offered after it
	}{
		{"", 1, offerQueued},
		{"relay.example:443", 0, offerParked},
	} {
		s := newSched(4, 4, 16, 16, now, nil)
		s.relay = tc.relay
		if got, err := s.offer(ctx, item{did: "did:plc:a", host: "pds.example:443"}); err != nil || got != offerQueued {
			t.Fatalf("relay %q: first offer %v %v", tc.relay, got, err)
		}
		s.park(tc.relay, 1_000_000)
		if s.queued != tc.queued {
			t.Errorf("relay %q: %d queued after a park of %q, want %d", tc.relay, s.queued, tc.relay, tc.queued)
		}
		if got, err := s.offer(ctx, item{did: "did:plc:b", host: "pds.example:443"}); err != nil || got != tc.next {
			t.Errorf("relay %q parked: a PDS's repo offered: %v %v, want %v", tc.relay, got, err, tc.next)
		}
	}
}
