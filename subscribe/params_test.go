package subscribe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestParamsRefusedBeforeUpgrade (D5): one case per known parameter, valid
// and invalid. Invalid values are a 400 with a JSON body naming the
// parameter, before any upgrade; valid ones upgrade. Unknown parameters are
// ignored and counted.
func TestParamsRefusedBeforeUpgrade(t *testing.T) {
	h := newHarness(t, harnessOpts{cfg: Config{DictSamples: 50}})
	h.commit(genEvents(t, 0, 60, 5)...)
	dictID, err := h.srv.codecs.currentID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	many := func(name string, n int, f func(i int) string) string {
		q := url.Values{}
		for i := 0; i < n; i++ {
			q.Add(name, f(i))
		}
		return q.Encode()
	}
	for _, tc := range []struct {
		name  string
		query string
		param string // "" = valid: the upgrade happens
	}{
		{"collection exact", "wantedCollections=app.bsky.feed.post", ""},
		{"collection prefix", "wantedCollections=app.bsky.feed.*", ""},
		{"collection top-level prefix", "wantedCollections=app.*", ""},
		{"collection repeated", "wantedCollections=app.bsky.feed.post&wantedCollections=app.bsky.graph.*", ""},
		{"collection bad NSID", "wantedCollections=app..bsky", paramCollections},
		{"collection pattern mid-segment", "wantedCollections=app.bsky.fe*", paramCollections},
		{"collection bare star", "wantedCollections=*", paramCollections},
		{"collection empty-segment prefix", "wantedCollections=app..*", paramCollections},
		{"collection 100", many("wantedCollections", 100, func(i int) string { return fmt.Sprintf("com.example.c%d", i) }), ""},
		{"collection 101", many("wantedCollections", 101, func(i int) string { return fmt.Sprintf("com.example.c%d", i) }), paramCollections},
		{"did", "wantedDids=did:plc:ewvi7nxzyoun6zhxrhs64oiz", ""},
		{"did web", "wantedDids=did:web:example.com", ""},
		{"did bad", "wantedDids=plc:abc", paramDIDs},
		{"did 10000", many("wantedDids", 10000, didOf), ""},
		{"did 10001", many("wantedDids", 10001, didOf), paramDIDs},
		{"did 10000 and a cursor", many("wantedDids", 10000, didOf) + "&cursor=0&compress=false", ""},
		{"did 10000 and a bad cursor", many("wantedDids", 10000, didOf) + "&cursor=x", paramCursor},
		{"query too long", many("x", 20200, didOf), "query"},
		{"bad escape", "cursor=%zz", paramCursor},
		{"cursor seq", "cursor=5", ""},
		{"cursor zero", "cursor=0", ""},
		{"cursor time", "cursor=1730801472345678", ""},
		{"cursor beyond tip", "cursor=999999", ""},
		{"cursor negative", "cursor=-1", paramCursor},
		{"cursor plus", "cursor=+5", paramCursor}, // "+" is a space in a query
		{"cursor text", "cursor=abc", paramCursor},
		{"cursor float", "cursor=1.5", paramCursor},
		{"cursor overflow", "cursor=99999999999999999999", paramCursor},
		{"maxMessageSizeBytes", "maxMessageSizeBytes=1000", ""},
		{"maxMessageSizeBytes zero", "maxMessageSizeBytes=0", ""},
		{"maxMessageSizeBytes negative", "maxMessageSizeBytes=-1", ""}, // 0: no limit, as in Jetstream
		{"maxMessageSizeBytes text", "maxMessageSizeBytes=big", ""},
		{"maxMessageSizeBytes overflow", "maxMessageSizeBytes=99999999999999999999", ""},
		{"maxSize alias", "maxSize=1000", ""},
		{"maxSize alias bad", "maxSize=1k", ""},
		{"compress true", "compress=true", ""},
		{"compress false", "compress=false", ""},
		{"compress other", "compress=yes", ""}, // off: only "true" turns it on, as in Jetstream
		{"requireHello false", "requireHello=false", ""},
		{"requireHello other", "requireHello=1", ""},
		{"includeSync true", "includeSync=true", ""},
		{"includeSync false", "includeSync=false", ""},
		{"includeSync other", "includeSync=1", ""}, // off, like compress and requireHello
		{"dictionary current", fmt.Sprintf("zstdDictionary=%d", dictID), ""},
		{"dictionary unknown", "zstdDictionary=12345", paramDictionary},
		{"dictionary text", "zstdDictionary=jetstream", paramDictionary},
		{"unknown parameters only", "foo=1&bar=2", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, resp, err := websocket.DefaultDialer.Dial(h.wsURL("?"+tc.query), nil)
			if tc.param == "" {
				if err != nil {
					t.Fatalf("refused: %v (%v)", err, resp)
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatal("upgraded")
			}
			if resp == nil || resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("response %v, want 400", resp)
			}
			var body struct{ Error, Message, Param string }
			b, _ := io.ReadAll(resp.Body)
			if err := json.Unmarshal(b, &body); err != nil || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("body %q (%s) is not JSON: %v", b, resp.Header.Get("Content-Type"), err)
			}
			if body.Error == "" || body.Param != tc.param || !strings.Contains(body.Message, tc.param) {
				t.Fatalf("body %s does not name %s", b, tc.param)
			}
			if tc.param == paramDictionary && !strings.Contains(body.Message, fmt.Sprint(dictID)) {
				t.Fatalf("body %s does not name the current dictionary %d", b, dictID)
			}
		})
	}
	if got := testutil.ToFloat64(h.m.unknownParams); got != 2 {
		t.Errorf("unknown params counted %v, want 2", got)
	}
	if got := testutil.ToFloat64(h.m.refused.WithLabelValues(refusedBadParam)); got < 15 {
		t.Errorf("bad_param refusals %v", got)
	}
}

// TestNotReady: before steady_state /subscribe is a 503 with the status as
// JSON and Retry-After; /readyz follows Ready; /healthz is always 200.
func TestNotReady(t *testing.T) {
	status := func() any {
		return map[string]any{"phase": "bootstrap", "bootstrap": map[string]any{"done": 10, "known": 40, "eta_seconds": 90}}
	}
	h := newHarness(t, harnessOpts{notReady: true, status: status})
	_, resp, err := websocket.DefaultDialer.Dial(h.wsURL(""), nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial before ready: %v %v", err, resp)
	}
	if resp.Header.Get("Retry-After") == "" {
		t.Error("no Retry-After")
	}
	var body map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body["phase"] != "bootstrap" || body["bootstrap"] == nil || body["error"] == nil {
		t.Fatalf("503 body %v", body)
	}
	get := func(path string, hdr ...string) (int, string) {
		req, _ := http.NewRequest("GET", h.url(path), nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != 503 {
		t.Errorf("readyz before ready: %d", code)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("healthz: %d", code)
	}
	code, js := get("/status")
	if code != 200 || !strings.Contains(js, `"phase": "bootstrap"`) || !strings.Contains(js, `"subscribers"`) {
		t.Errorf("status JSON %d %s", code, js)
	}
	code, page := get("/status", "Accept", "text/html,application/xhtml+xml")
	// The page renders the inlined report in the browser (TestStatusPageInBrowser).
	if code != 200 || !strings.Contains(page, "<!doctype html>") || !strings.Contains(page, `"phase":"bootstrap"`) {
		t.Errorf("status HTML %d, the report is not inlined:\n%s", code, page)
	}
	h.ready.Store(true)
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("readyz when ready: %d", code)
	}
	c := h.dial("", nil)
	c.Close()
	if got := testutil.ToFloat64(h.m.refused.WithLabelValues(refusedNotReady)); got != 1 {
		t.Errorf("not_ready refusals %v", got)
	}
}

// TestV1FlagValues: compress and requireHello read as Jetstream reads them:
// exactly "true" turns them on, and any other value — "1", "True", "yes" —
// connects with the flag off (before, those were a 400): text events
// without a hello.
func TestV1FlagValues(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	_, last := h.commit(genEvents(t, 0, 5, 2)...)
	for _, q := range []string{"compress=1", "compress=True", "requireHello=1", "requireHello=yes", "compress=1&requireHello=TRUE"} {
		c := h.dial("?cursor=0&"+q, nil)
		got := readUntil(t, c, last) // fails on a binary (zstd) message or no event
		c.Close()
		if err := checkContiguous(got, 1, last); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
