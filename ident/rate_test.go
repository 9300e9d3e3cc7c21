package ident_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
)

// docTransport answers every request with a DID document naming key, in
// memory (no socket, so the test runs on synctest's clock).
type docTransport struct{ key string }

func (d docTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	did := strings.TrimPrefix(req.URL.Path, "/")
	doc := fmt.Sprintf(`{"id":%q,"alsoKnownAs":["at://h.test"],"verificationMethod":[{"id":"%s#atproto","type":"Multikey","controller":%q,"publicKeyMultibase":%q}],`+
		`"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"https://pds.test"}]}`, did, did, did, d.key)
	return &http.Response{StatusCode: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(doc)), Request: req}, nil
}

// TestPLCRate: resolutions of distinct DIDs beyond the burst wait for the
// PLC request rate (Config.Rate), each wait counted: 12 resolutions at 10/s
// with a burst of 2 take 1 s of the bubble's clock and wait 10 times.
// Without the pacing they take no time at all.
func TestPLCRate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pub := newPublicKey(t)
		reg := prometheus.NewRegistry()
		r := ident.New(ident.Config{PLC: "http://plc.test", Rate: 10, Concurrency: 2, Metrics: ident.NewMetrics(reg),
			HTTPClient: &http.Client{Transport: docTransport{key: pub.Multibase()}}})
		defer r.Close()
		t0 := time.Now()
		for i := range 12 {
			if _, _, err := r.Lookup(context.Background(), fmt.Sprintf("did:plc:%024d", i)); err != nil {
				t.Fatal(err)
			}
		}
		if got := time.Since(t0); got != time.Second {
			t.Errorf("12 resolutions took %v, want 1s (10/s after a burst of 2)", got)
		}
		if got := promtest.Value(t, reg, "backstream_ident_rate_limited_total", nil); got != 10 {
			t.Errorf("rate_limited_total %v, want 10", got)
		}
	})
}
