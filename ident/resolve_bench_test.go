package ident

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/atcrypto"

	"github.com/backstream/backstream/internal/cputime"
)

// BenchmarkResolve: one network resolution of a did:plc (request, document
// decode, key parse) against a local directory, by the client New builds
// and by the same client with a Timeout (what New built before: a client
// Timeout over the capped transport costs each request a goroutine and a
// timer). Reports CPU-µs per resolution, the directory's included;
// -count=6 alternates the two.
func BenchmarkResolve(b *testing.B) {
	priv, err := atcrypto.GeneratePrivateKeyK256()
	if err != nil {
		b.Fatal(err)
	}
	pub, _ := priv.PublicKey()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		did := req.URL.Path[1:]
		fmt.Fprintf(w, `{"@context":["https://www.w3.org/ns/did/v1"],"id":%q,"alsoKnownAs":["at://alice.test"],`+
			`"verificationMethod":[{"id":"%s#atproto","type":"Multikey","controller":%q,"publicKeyMultibase":%q}],`+
			`"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"https://pds.test"}]}`,
			did, did, did, pub.Multibase())
	}))
	defer srv.Close()
	for _, c := range []struct {
		name    string
		timeout time.Duration
	}{{"ctx-deadline", 0}, {"client-timeout", DefaultTimeout}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := Config{PLC: srv.URL, Retries: -1}
			cfg.defaults()
			r := New(Config{PLC: srv.URL, Retries: -1, HTTPClient: &http.Client{Timeout: c.timeout, Transport: capBodies{cfg.transport()}}})
			defer r.Close()
			ctx := context.Background()
			cpu0 := cputime.Process(b)
			i := 0
			for b.Loop() {
				i++
				if _, err := r.Refresh(ctx, fmt.Sprintf("did:plc:%024d", i)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/op")
		})
	}
}
