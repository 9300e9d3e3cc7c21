package node

import (
	"context"
	"errors"
	"testing"

	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/upstream"
)

// TestIdentityResolverGuarded: the node hands the identity resolver the
// relay client's address policy: a dial to a private, metadata or
// loopback address is refused before any connection, while the relay and
// the configured PLC directory stay reachable (their dials are attempted).
func TestIdentityResolverGuarded(t *testing.T) {
	client, err := upstream.New("https://relay.example.com", upstream.Options{ScratchDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	c := ident.Config{PLC: "http://10.9.9.9:2582"}
	guardIdent(&c, client)
	if c.Dial == nil {
		t.Fatal("the resolver's dialer is not guarded")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // an allowed dial fails on the context, a refused one on the policy
	for _, addr := range []string{"10.0.0.1:443", "169.254.169.254:80", "127.0.0.1:443", "[::1]:443", "192.168.1.1:443"} {
		if _, err := c.Dial(ctx, "tcp", addr); !errors.Is(err, upstream.ErrForbiddenRedirect) {
			t.Errorf("dial %s: %v, want refused", addr, err)
		}
	}
	// The configured PLC directory, and the relay (its name unresolvable
	// here: the dial gets past the policy to the resolver).
	for _, addr := range []string{"10.9.9.9:2582", "relay.example.com:443"} {
		if _, err := c.Dial(ctx, "tcp", addr); err == nil || errors.Is(err, upstream.ErrForbiddenRedirect) {
			t.Errorf("dial %s: %v, want attempted", addr, err)
		}
	}
}

// TestAuthorityHostCanonical: the source's host the authority check trusts
// and whose 429 parks every retry is in the form downloads name their host
// (upstream.CanonicalHost): a source URL written with its scheme's default
// port, in upper case or with a trailing dot names the host a download
// from it names.
func TestAuthorityHostCanonical(t *testing.T) {
	for in, want := range map[string]string{
		"https://Relay.Example.com:443": "relay.example.com", "https://relay.example.com.": "relay.example.com",
		"http://127.0.0.1:2470": "127.0.0.1:2470", "http://relay.example.com:80/": "relay.example.com",
		"https://relay.example.com:8443": "relay.example.com:8443",
	} {
		if got, _, err := hostOf(in); err != nil || got != want {
			t.Errorf("hostOf(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, _, err := hostOf("ftp://relay.example.com"); err == nil {
		t.Error("a source that is not an http(s) URL is accepted")
	}
}
