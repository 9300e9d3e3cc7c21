package upstream

import (
	"net/netip"
	"net/url"
	"slices"
	"testing"

	"github.com/backstream/backstream/internal/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricsPreinitialised: right after NewMetrics every series of the
// closed label sets exists at 0 (alerts and dashboards see 0, not "no
// data"). The expected values are spelled out here so a value dropped from
// the production lists fails the test.
func TestMetricsPreinitialised(t *testing.T) {
	reg := prometheus.NewRegistry()
	NewMetrics(reg)
	results := []string{"ok", "not_found", "unavailable", "rate_limited", "transient", "permanent", "canceled"}
	promtest.RequireZero(t, reg, "backstream_upstream_requests_total",
		promtest.Cross("endpoint", []string{"listRepos", "getRepo"}, "result", results)...)
	promtest.RequireZero(t, reg, "backstream_upstream_listrepos_dropped_total", promtest.Label("reason", "invalid_did", "malformed")...)
	policy := []string{"invalid", "metadata", "unspecified", "loopback", "private", "link-local", "multicast", "reserved"}
	promtest.RequireZero(t, reg, "backstream_upstream_refused_targets_total", promtest.Cross("stage", []string{"dial"}, "reason", policy)...)
	promtest.RequireZero(t, reg, "backstream_upstream_refused_targets_total",
		promtest.Cross("stage", []string{"redirect"}, "reason", append(policy, "scheme", "empty-host", "too_many"))...)
}

// TestRefusalReasonsArePreinitialised: every reason the guard produces, for
// a sample of each kind of refused address and redirect target, is one of
// the pre-initialised label values of its stage (guards against a new
// reason in guard.go that would appear only after its first occurrence).
func TestRefusalReasonsArePreinitialised(t *testing.T) {
	// With loopback refused outright, and with a loopback relay on 7777.
	for _, p := range []addrPolicy{{}, {loopbackPorts: map[uint16]bool{7777: true}}} {
		for _, s := range []string{"169.254.169.254", "fd00:ec2::254", "0.0.0.0", "::", "127.0.0.1", "::1", "10.1.2.3", "192.168.1.1",
			"172.16.0.1", "fc00::1", "169.254.1.1", "fe80::1", "224.0.0.1", "ff02::1", "100.64.0.1", "192.0.2.1", "198.18.0.1",
			"240.0.0.1", "64:ff9b::10.0.0.1", "2001:db8::1"} {
			err := p.check(netip.MustParseAddr(s), 6008)
			if err == nil {
				continue
			}
			if r := refusalReason(err); !slices.Contains(policyReasons, r) {
				t.Errorf("dial refusal of %s: reason %q is not pre-initialised", s, r)
			}
		}
		c := &Client{relayAddr: "relay.example:443", policy: p}
		for _, raw := range []string{"ftp://host/x", "http:///x", "http://localhost/x", "http://127.0.0.1/x", "http://10.0.0.1/x", "http://[fe80::1]/x"} {
			u, _ := url.Parse(raw)
			err := c.checkTarget(u)
			if err == nil {
				t.Errorf("redirect to %s accepted", raw)
				continue
			}
			if r := refusalReason(err); !slices.Contains(policyReasons, r) && !slices.Contains(redirectReasons, r) {
				t.Errorf("redirect refusal of %s: reason %q is not pre-initialised", raw, r)
			}
		}
	}
}
