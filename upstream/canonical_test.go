package upstream

import (
	"context"
	"net/http"
	"slices"
	"testing"
)

// TestCanonicalHost: the one form hosts are named and compared in.
func TestCanonicalHost(t *testing.T) {
	for _, c := range []struct{ scheme, host, want string }{
		{"https", "pds.example.com", "pds.example.com"},
		{"https", "PDS.Example.COM", "pds.example.com"},
		{"https", "pds.example.com:443", "pds.example.com"},
		{"HTTPS", "pds.example.com:0443", "pds.example.com"},
		{"https", "pds.example.com.", "pds.example.com"},
		{"https", "pds.example.com.:443", "pds.example.com"},
		{"https", "pds.example.com:", "pds.example.com"},
		{"https", "pds.example.com:80", "pds.example.com:80"},
		{"https", "pds.example.com:8443", "pds.example.com:8443"},
		{"http", "pds.example.com:80", "pds.example.com"},
		{"http", "pds.example.com:443", "pds.example.com:443"},
		{"wss", "relay.example.com:443", "relay.example.com"},
		{"ws", "relay.example.com:80", "relay.example.com"},
		{"https", "[2001:DB8::1]:443", "[2001:db8::1]"},
		{"https", "[2001:db8::1]", "[2001:db8::1]"},
		{"https", "[2001:db8::1]:8443", "[2001:db8::1]:8443"},
		{"http", "127.0.0.1:8080", "127.0.0.1:8080"},
		{"", "PDS.example.com.:443", "pds.example.com:443"},
		{"https", "", ""},
	} {
		if got := CanonicalHost(c.scheme, c.host); got != c.want {
			t.Errorf("CanonicalHost(%q, %q) = %q, want %q", c.scheme, c.host, got, c.want)
		}
		if got := CanonicalHost(c.scheme, CanonicalHost(c.scheme, c.host)); got != c.want {
			t.Errorf("CanonicalHost(%q, %q) twice = %q, want %q", c.scheme, c.host, got, c.want)
		}
	}
}

// TestFinalHostCanonical: a download redirected to a URL that writes its
// host in upper case with a trailing dot names the host as a DID document
// naming it does (ident compares the two): lower case, no dot.
func TestFinalHostCanonical(t *testing.T) {
	pds := pdsServer(t)
	relay := redirectRelay(t, func(did string) string { return pds.hostURL("PDS.Internal.") + "/car?did=" + did })
	c, _ := testClient(t, relay.URL, func(o *Options) {
		o.Resolve = staticResolver(map[string]string{"pds.internal.": "127.0.0.1", "pds.internal": "127.0.0.1"})
	})
	d, err := c.GetRepo(context.Background(), testDID)
	if err != nil {
		t.Fatalf("GetRepo: %v", err)
	}
	defer d.Remove()
	if want := "pds.internal:" + pds.port(); d.FinalHost != want {
		t.Fatalf("FinalHost %q, want %q", d.FinalHost, want)
	}
}

// TestListHostsCanonical: a roster hostname written with the relay's
// scheme's default port, in upper case or with a trailing dot is the host
// a download from it names (FinalHost) and a DID document names.
func TestListHostsCanonical(t *testing.T) {
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"hosts":[{"hostname":"PDS.Example.com:80","status":"active"},` +
			`{"hostname":"pds2.example.com.","status":"active"},{"hostname":"[2001:DB8::1]:80"},` +
			`{"hostname":"pds3.example.com:8080"}]}`))
	})
	c, _ := testClient(t, relay.URL, nil)
	pg, err := c.ListHosts(context.Background(), "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range pg.Hosts {
		got = append(got, h.Host)
	}
	want := []string{"pds.example.com", "pds2.example.com", "[2001:db8::1]", "pds3.example.com:8080"}
	if !slices.Equal(got, want) || pg.Dropped != 0 {
		t.Fatalf("roster hosts %v (dropped %d), want %v", got, pg.Dropped, want)
	}
}
