package ident_test

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/upstream"
)

// TestDIDWebAddressPolicy: a did:web names a host anyone chooses. Through
// upstream's address policy (Client.GuardedDial, what node wires), a
// did:web host that resolves to a loopback, private, link-local or
// metadata address is refused before any connection — the DID is
// unresolvable (class identity) and the refusal is counted on upstream's
// metric — while the operator's PLC directory stays reachable. On the
// simulated network (the relay on loopback, answering did:web by Host
// through Config.Web) a did:web resolves end to end, and a did:web asked
// directly of a loopback address off the relay's port is still refused.
func TestDIDWebAddressPolicy(t *testing.T) {
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 6, RecordsMean: 3, Hosts: 2, Seed: 22,
		Traffic: oracle.TrafficNone, WebDIDs: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	names := map[string]string{"loop.test": "127.0.0.1", "private.test": "10.1.2.3", "linklocal.test": "169.254.7.7",
		"metadata.test": "169.254.169.254", "mixed.test": "93.184.216.34,192.168.1.1"}
	resolve := func(_ context.Context, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		if a, ok := names[host]; ok {
			for _, s := range strings.Split(a, ",") {
				out = append(out, netip.MustParseAddr(s))
			}
		}
		return out, nil
	}
	newClient := func(relay string, m *upstream.Metrics) *upstream.Client {
		c, err := upstream.New(relay, upstream.Options{ScratchDir: t.TempDir(), Resolve: resolve, Metrics: m})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	ctx := context.Background()
	var web string
	for _, a := range n.World().Accounts() {
		if a.Active && strings.HasPrefix(a.DID, "did:web:") {
			web = a.DID
		}
	}
	if web == "" {
		t.Fatal("no active did:web account")
	}

	t.Run("production", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m := upstream.NewMetrics(reg)
		c := newClient("https://relay.example.com", m)
		// The PLC directory, on loopback here, is trusted as configured.
		// A refused address is not retried.
		r := ident.New(ident.Config{PLC: n.RelayURL(), Dial: c.GuardedDial(n.RelayURL()), Retries: 2, Sleep: noSleep,
			Metrics: ident.NewMetrics(reg)})
		defer r.Close()
		if _, _, err := r.Lookup(ctx, firstActive(t, n).DID); err != nil {
			t.Fatalf("did:plc through the configured directory: %v", err)
		}
		for name, reason := range map[string]string{"loop.test": "loopback", "private.test": "private",
			"linklocal.test": "link-local", "metadata.test": "metadata", "mixed.test": "private"} {
			_, _, err := r.Lookup(ctx, "did:web:"+name)
			if !errors.Is(err, ident.ErrUnresolvable) || !errors.Is(err, upstream.ErrForbiddenRedirect) || ident.Class(err) != ident.ClassIdentity {
				t.Fatalf("did:web:%s: %v, want unresolvable through a refused address", name, err)
			}
			if got := promtest.Value(t, reg, "backstream_upstream_refused_targets_total", map[string]string{"stage": "dial", "reason": reason}); got == 0 {
				t.Fatalf("did:web:%s: no refusal counted with reason %s", name, reason)
			}
		}
		if got := promtest.Value(t, reg, "backstream_ident_retries_total", nil); got != 0 {
			t.Fatalf("%v retries of refused addresses", got)
		}
	})
	t.Run("devnet", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		c := newClient(n.RelayURL(), upstream.NewMetrics(reg))
		r := ident.New(ident.Config{PLC: n.RelayURL(), Web: n.RelayURL(), Dial: c.GuardedDial(n.RelayURL(), n.RelayURL()), Retries: -1})
		defer r.Close()
		info, _, err := r.Lookup(ctx, web)
		if acct, _ := n.World().Account(web); err != nil || info.KeyMultibase != acct.PublicKeyMultibase {
			t.Fatalf("%s on the simulated network: %+v %v", web, info, err)
		}
		direct := ident.New(ident.Config{PLC: n.RelayURL(), Dial: c.GuardedDial(n.RelayURL()), Retries: -1})
		defer direct.Close()
		if _, _, err := direct.Lookup(ctx, "did:web:loop.test"); !errors.Is(err, upstream.ErrForbiddenRedirect) {
			t.Fatalf("did:web:loop.test off the relay's port: %v, want refused", err)
		}
		if got := promtest.Value(t, reg, "backstream_upstream_refused_targets_total", map[string]string{"stage": "dial", "reason": "loopback-port"}); got != 1 {
			t.Fatalf("loopback-port refusals %v, want 1", got)
		}
	})
}

// TestDIDWebNotAHostnameIsNotRetried: a did:web whose identifier is not a
// bare hostname (a port, a path) is not found at once, with no request and no retry: each
// retry used to hold one of the resolver's slots through its backoff, so
// a relay naming many such DIDs held every slot.
func TestDIDWebNotAHostnameIsNotRetried(t *testing.T) {
	reg := prometheus.NewRegistry()
	sleeps := 0
	r := ident.New(ident.Config{PLC: "http://127.0.0.1:1", Metrics: ident.NewMetrics(reg),
		Sleep: func(context.Context, time.Duration) error { sleeps++; return nil }})
	defer r.Close()
	for _, did := range []string{"did:web:localhost%3A8080", "did:web:example.com:u:alice"} {
		_, _, err := r.Lookup(context.Background(), did)
		if !errors.Is(err, ident.ErrUnresolvable) {
			t.Fatalf("%s: %v, want unresolvable", did, err)
		}
	}
	retries := promtest.Value(t, reg, "backstream_ident_retries_total", nil)
	notFound := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "not_found"})
	if sleeps != 0 || retries != 0 || notFound != 2 {
		t.Fatalf("2 did:web DIDs that are not bare hostnames: %d backoff waits, %v retries, %v resolutions not found; want 0, 0, 2", sleeps, retries, notFound)
	}
}
