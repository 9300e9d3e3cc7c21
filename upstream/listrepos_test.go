package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestListReposPagingLongCursor pages through a relay whose cursor is a
// 4 KiB string full of characters that need query escaping; the relay must
// receive it back byte for byte.
func TestListReposPagingLongCursor(t *testing.T) {
	long := strings.Repeat("a+b/c=d&e%f g?h#", 256) // 4096 bytes
	if len(long) != 4096 {
		t.Fatalf("cursor len %d", len(long))
	}
	var mu sync.Mutex
	var seen []string
	var limits []string
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/xrpc/com.atproto.sync.listRepos" {
			http.NotFound(w, r)
			return
		}
		cur := r.URL.Query().Get("cursor")
		mu.Lock()
		seen = append(seen, cur)
		limits = append(limits, r.URL.Query().Get("limit"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch cur {
		case "":
			json.NewEncoder(w).Encode(map[string]any{
				"cursor": long,
				"repos": []map[string]any{
					{"did": "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "head": "bafyhead1", "rev": "3l2aaaaaaaa22"},
					{"did": "did:web:example.com", "head": "bafyhead2", "rev": "3l2aaaaaaaa23", "active": false, "status": "deactivated"},
					{"did": "not-a-did", "head": "x", "rev": "y"},
					{"did": 42},
					{"did": "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", "head": "bafyhead3", "rev": "3l2aaaaaaaa24", "active": true},
				},
			})
		case long:
			json.NewEncoder(w).Encode(map[string]any{
				"repos": []map[string]any{
					{"did": "did:plc:cccccccccccccccccccccccc", "head": "bafyhead4", "rev": "3l2aaaaaaaa25"},
				},
			})
		default:
			xrpcError(w, 400, "InvalidRequest", "bad cursor")
		}
	})
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	c, _ := testClient(t, relay.URL, func(o *Options) { o.Metrics = m })
	ctx := context.Background()

	p1, err := c.ListRepos(ctx, "", 3)
	if err != nil {
		t.Fatalf("page 1: %v", err)
	}
	if p1.Cursor != long {
		t.Fatalf("page 1 cursor: got %d bytes, want the 4 KiB cursor", len(p1.Cursor))
	}
	if len(p1.Repos) != 3 || p1.Dropped != 2 {
		t.Fatalf("page 1: %d repos, %d dropped; want 3, 2: %+v", len(p1.Repos), p1.Dropped, p1.Repos)
	}
	if r := p1.Repos[0]; !r.Active || r.Status != "" || r.DID != "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa" || r.Head != "bafyhead1" || r.Rev != "3l2aaaaaaaa22" {
		t.Fatalf("absent active must mean true: %+v", r)
	}
	if r := p1.Repos[1]; r.Active || r.Status != "deactivated" {
		t.Fatalf("inactive entry: %+v", r)
	}
	p2, err := c.ListRepos(ctx, p1.Cursor, 3)
	if err != nil {
		t.Fatalf("page 2: %v", err)
	}
	if p2.Cursor != "" || len(p2.Repos) != 1 {
		t.Fatalf("page 2: %+v", p2)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "" || seen[1] != long {
		t.Fatalf("relay saw cursors of lengths %d", len(seen))
	}
	if limits[0] != "3" {
		t.Fatalf("limit sent: %q", limits[0])
	}
	if got := counterValue(t, m.listDropped.WithLabelValues("invalid_did")); got != 1 {
		t.Fatalf("invalid_did dropped = %v", got)
	}
	if got := counterValue(t, m.listDropped.WithLabelValues("malformed")); got != 1 {
		t.Fatalf("malformed dropped = %v", got)
	}
	if got := counterValue(t, m.requests.WithLabelValues("listRepos", "ok")); got != 2 {
		t.Fatalf("ok requests = %v", got)
	}
}

func TestListReposDefaultLimitAndErrors(t *testing.T) {
	var gotLimit string
	mode := "garbage"
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		gotLimit = r.URL.Query().Get("limit")
		switch mode {
		case "garbage":
			w.Write([]byte("<html>not json"))
		case "503":
			xrpcError(w, 503, "", "")
		case "429":
			w.Header().Set("Retry-After", "3")
			xrpcError(w, 429, "RateLimitExceeded", "slow down")
		}
	})
	c, _ := testClient(t, relay.URL, nil)
	_, err := c.ListRepos(context.Background(), "", 0)
	if gotLimit != "1000" {
		t.Fatalf("default limit: %q", gotLimit)
	}
	if !errors.Is(err, ErrMalformedResponse) || Classify(err) != ClassPermanent {
		t.Fatalf("garbage body: %v (%v)", err, Classify(err))
	}
	mode = "503"
	if _, err = c.ListRepos(context.Background(), "", 0); Classify(err) != ClassTransient {
		t.Fatalf("503: %v", err)
	}
	mode = "429"
	_, err = c.ListRepos(context.Background(), "", 0)
	if Classify(err) != ClassRateLimited || RetryAfter(err).Seconds() != 3 {
		t.Fatalf("429: %v retry after %v", err, RetryAfter(err))
	}
}

// counterValue reads one counter's current value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatalf("read counter: %v", err)
	}
	return m.GetCounter().GetValue()
}

// TestListReposHostilePages: every shape a hostile relay can give a
// listRepos page ends in an answer the caller can act on, never a panic or
// an unbounded read: a cursor over 64 KiB is refused but the page's repos
// kept (CutCursorTooLong); a body over 32 MiB is ErrTooLarge; a body that
// is not JSON, has fields of the wrong type, or is cut short (with a
// matching Content-Length) is ErrMalformedResponse; a body cut short of its
// Content-Length is transient (worth a retry). CutReason names each.
func TestListReposHostilePages(t *testing.T) {
	entry := `{"did":"did:plc:aaaaaaaaaaaaaaaaaaaaaaaa","head":"h","rev":"r"}`
	page := func(cursor string) string { return `{"cursor":"` + cursor + `","repos":[` + entry + `]}` }
	for _, tc := range []struct {
		name    string
		body    func(w http.ResponseWriter)
		refused int    // Page.CursorRefused
		cursor  int    // len(Page.Cursor)
		reason  string // CutReason of the error; "" = no error
		class   Class
	}{
		{name: "cursor at the cap", body: func(w http.ResponseWriter) { io.WriteString(w, page(strings.Repeat("c", maxCursorLen))) }, cursor: maxCursorLen},
		{name: "cursor over the cap", body: func(w http.ResponseWriter) { io.WriteString(w, page(strings.Repeat("c", maxCursorLen+1))) }, refused: maxCursorLen + 1},
		{name: "10 MiB cursor", body: func(w http.ResponseWriter) { io.WriteString(w, page(strings.Repeat("c", 10<<20))) }, refused: 10 << 20},
		{name: "body over 32 MiB", reason: CutTooLarge, class: ClassPermanent, body: func(w http.ResponseWriter) {
			io.WriteString(w, `{"repos":[],"cursor":"`)
			chunk := strings.Repeat("c", 1<<20)
			for range 33 {
				if _, err := io.WriteString(w, chunk); err != nil {
					return
				}
			}
		}},
		{name: "not JSON", reason: CutMalformed, class: ClassPermanent, body: func(w http.ResponseWriter) { io.WriteString(w, "<html>502</html>") }},
		{name: "wrong types", reason: CutMalformed, class: ClassPermanent, body: func(w http.ResponseWriter) { io.WriteString(w, `{"cursor":42,"repos":{}}`) }},
		{name: "cut short", reason: CutMalformed, class: ClassPermanent, body: func(w http.ResponseWriter) {
			b := page("next")[:20]
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			io.WriteString(w, b)
		}},
		{name: "cut short of its length", reason: CutRetriesExhausted, class: ClassTransient, body: func(w http.ResponseWriter) {
			b := page("next")
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			io.WriteString(w, b[:20])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				tc.body(w)
			})
			c, _ := testClient(t, relay.URL, nil)
			pg, err := c.ListRepos(context.Background(), "", 10)
			if tc.reason != "" {
				if err == nil || CutReason(err) != tc.reason || Classify(err) != tc.class {
					t.Fatalf("err %v: reason %q class %v, want %q %v", err, CutReason(err), Classify(err), tc.reason, tc.class)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if pg.CursorRefused != tc.refused || len(pg.Cursor) != tc.cursor || len(pg.Repos) != 1 {
				t.Fatalf("refused %d, cursor %d bytes, %d repos; want %d, %d, 1", pg.CursorRefused, len(pg.Cursor), len(pg.Repos), tc.refused, tc.cursor)
			}
		})
	}
	// A 4xx is refused (no retry helps).
	if r := CutReason(&Error{Op: "listRepos", StatusCode: 400, kind: ErrPermanent}); r != CutRefused {
		t.Fatalf("400: reason %q", r)
	}
}

// TestListReposCutsStatus: a listed account status is at most
// MaxAccountStatus bytes for every reader of the listing (a repo state
// refuses a long one, and the writer would refuse the page), cut without
// splitting a character.
func TestListReposCutsStatus(t *testing.T) {
	ascii := strings.Repeat("s", 100)
	wide := strings.Repeat("x", MaxAccountStatus-1) + "é" + "tail" // é spans bytes 63 and 64
	relay := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"repos": []map[string]any{
			{"did": "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "active": false, "status": ascii},
			{"did": "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb", "active": false, "status": wide},
			{"did": "did:plc:cccccccccccccccccccccccc", "active": false, "status": "takendown"},
		}})
	})
	c, _ := testClient(t, relay.URL, nil)
	p, err := c.ListRepos(context.Background(), "", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ascii[:MaxAccountStatus], wide[:MaxAccountStatus-1], "takendown"}
	for i, r := range p.Repos {
		if r.Status != want[i] || !utf8.ValidString(r.Status) {
			t.Errorf("entry %d: status of %d bytes %q, want %q", i, len(r.Status), r.Status, want[i])
		}
	}
}

// TestHostListReposAnswered: a host's listRepos call is answered when the
// host sent a response, whatever its status (a page, a 503, a 429, a 404,
// a malformed 200), and not when no response came (a refused connection).
// Bootstrap serves the listRepos requests of a host that has answered
// before those of hosts that have not.
func TestHostListReposAnswered(t *testing.T) {
	var mode atomic.Value
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch mode.Load().(string) {
		case "page":
			io.WriteString(w, `{"repos":[]}`)
		case "garbage":
			io.WriteString(w, "<html>not json")
		case "503":
			xrpcError(w, 503, "", "")
		case "429":
			w.Header().Set("Retry-After", "3")
			xrpcError(w, 429, "RateLimitExceeded", "slow down")
		case "404":
			xrpcError(w, 404, "NotFound", "")
		}
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, closed, _ := net.SplitHostPort(l.Addr().String())
	l.Close()
	c, _ := testClient(t, srv.URL, func(o *Options) {
		o.Resolve = staticResolver(map[string]string{"pds.example": "127.0.0.1"})
		o.LoopbackHosts = append(o.LoopbackHosts, "127.0.0.1:"+closed)
	})
	for _, m := range []string{"page", "garbage", "503", "429", "404"} {
		mode.Store(m)
		if _, err := c.HostListRepos(context.Background(), "pds.example:"+srv.port(), "", 10); !Answered(err) {
			t.Errorf("a host answering %s: Answered(%v) false, want true", m, err)
		}
	}
	_, err = c.HostListRepos(context.Background(), "pds.example:"+closed, "", 10)
	if !errors.Is(err, syscall.ECONNREFUSED) || Answered(err) {
		t.Errorf("a host refusing the connection: %v, Answered %v; want a refused connection, not answered", err, Answered(err))
	}
}
