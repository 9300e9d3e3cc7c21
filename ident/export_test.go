package ident_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// ReadExport against the simulated directory, over two pages with
// malformed lines in each: every did:plc account (legacy creates and
// nullified forks among them) is loaded with the key and PDS GET /<did>
// gives, and written through Persist, so a lookup is a memory hit with no
// request; tombstoned DIDs are not loaded and resolve (to nothing) over
// the network; malformed lines are counted, not fatal; the checkpoint
// follows the pages, and a read from it sees exactly the later changes.
func TestReadExport(t *testing.T) {
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 1200, RecordsMean: 1, Hosts: 2, Seed: 5, WebDIDs: 4, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	n.Faults().HostileExport(oracle.Always)
	reg := prometheus.NewRegistry()
	st := &memStore{m: map[string]archive.Ident{}}
	r := ident.New(ident.Config{PLC: n.RelayURL(), Metrics: ident.NewMetrics(reg), Store: st, Persist: st.persist, Sleep: noSleep})
	defer r.Close()
	ctx := context.Background()
	var cursors []string
	stats, err := r.ReadExport(ctx, "", func(_ context.Context, c string) error {
		cursors = append(cursors, c)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Pages != 2 || len(cursors) != 2 || cursors[1] != stats.Cursor || !(cursors[0] < cursors[1]) {
		t.Fatalf("stats %+v, cursors %v: want two pages, each checkpointed", stats, cursors)
	}
	if want := n.Faults().Fired(oracle.FaultExportMalformed); stats.Dropped != want || want != 2*int64(oracle.HostileExportLines()) {
		t.Fatalf("dropped %d, the directory sent %d malformed lines", stats.Dropped, want)
	}
	if stats.Tombstoned != int64(len(n.RetiredDIDs())) || stats.Nullified == 0 || stats.Skipped != 0 {
		t.Fatalf("stats %+v", stats)
	}
	// Each op once, though ops share createdAt values across the page
	// boundary (the second page re-reads the first's last ones).
	if read := stats.Loaded + stats.Tombstoned + stats.Nullified + stats.Skipped; read != int64(n.PLCOps()) {
		t.Fatalf("stats %+v: %d ops read, the directory holds %d", stats, read, n.PLCOps())
	}
	expect(t, reg, "backstream_ident_export_total", map[string]string{"result": "dropped"}, float64(stats.Dropped))
	expect(t, reg, "backstream_ident_export_total", map[string]string{"result": "loaded"}, float64(stats.Loaded))

	before := n.DIDDocRequests()
	plc := 0
	for _, a := range n.World().Accounts() {
		if !strings.HasPrefix(a.DID, "did:plc:") {
			if r.Known(a.DID) {
				t.Fatalf("%s loaded from the export", a.DID)
			}
			continue
		}
		plc++
		info, fresh, err := r.Lookup(ctx, a.DID)
		if err != nil || fresh {
			t.Fatalf("lookup %s: %v fresh=%v, want a memory hit", a.DID, err, fresh)
		}
		if info.ResolvedSince(time.Time{}) {
			t.Fatalf("%s: a document from the export counts as resolved", a.DID)
		}
		if info.KeyMultibase != a.PublicKeyMultibase || info.PDSHost() != hostOf(n.HostURLs()[a.Host]) || info.Handle != "" {
			t.Fatalf("%s: loaded %+v, account %+v", a.DID, info, a)
		}
		// The row is marked as the export's.
		if got := st.m[a.DID]; got.Key != a.PublicKeyMultibase || !got.Exported || got.FetchedUS == 0 {
			t.Fatalf("%s: durable copy %+v", a.DID, got)
		}
	}
	if got := n.DIDDocRequests() - before; got != 0 {
		t.Fatalf("%d GET /<did> requests for %d loaded accounts, want none", got, plc)
	}
	if stats.Loaded < int64(plc) {
		t.Fatalf("loaded %d identities for %d did:plc accounts", stats.Loaded, plc)
	}
	for _, did := range n.RetiredDIDs() {
		if _, _, err := r.Lookup(ctx, did); !errors.Is(err, ident.ErrUnresolvable) {
			t.Fatalf("tombstoned %s: %v, want ErrUnresolvable", did, err)
		}
	}

	// From the cursor: one rotation since, one identity loaded.
	a := n.World().Accounts()[7]
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(a.DID) }); err != nil {
		t.Fatal(err)
	}
	n.Faults().HostileExport(0)
	more, err := r.ReadExport(ctx, stats.Cursor, nil)
	if err != nil || more.Loaded != 1 || more.Dropped != 0 {
		t.Fatalf("read from the cursor: %+v %v, want the one rotation", more, err)
	}
	rotated, _ := n.World().Account(a.DID)
	if info, _, err := r.Lookup(ctx, a.DID); err != nil || info.KeyMultibase != rotated.PublicKeyMultibase {
		t.Fatalf("after the rotation: %+v %v", info, err)
	}
}

// A directory whose export fails is ErrExportUnavailable after the retry
// budget, and lookups resolve each DID as without it.
func TestReadExportUnavailable(t *testing.T) {
	n := startNet(t)
	n.Faults().FailExport(oracle.Always)
	r := ident.New(ident.Config{PLC: n.RelayURL(), Sleep: noSleep})
	defer r.Close()
	ctx := context.Background()
	if _, err := r.ReadExport(ctx, "", nil); !errors.Is(err, ident.ErrExportUnavailable) {
		t.Fatalf("failing export: %v", err)
	}
	if got := n.Faults().Fired(oracle.FaultExportFailing); got != 1+ident.DefaultRetries {
		t.Fatalf("%d export requests, want 1 and %d retries", got, ident.DefaultRetries)
	}
	a := firstActive(t, n)
	if _, fresh, err := r.Lookup(ctx, a.DID); err != nil || !fresh {
		t.Fatalf("lookup without the export: %v fresh=%v", err, fresh)
	}
	if _, err := r.ReadExport(ctx, "not a time", nil); err == nil {
		t.Fatal("a cursor that is no createdAt was accepted")
	}
}

// A document resolved over the network is as new as the export or newer:
// the export does not replace it.
func TestReadExportKeepsResolvedDocuments(t *testing.T) {
	n := startNet(t)
	a := firstActive(t, n)
	reg := prometheus.NewRegistry()
	r := ident.New(ident.Config{PLC: n.RelayURL(), Metrics: ident.NewMetrics(reg), Now: time.Now})
	defer r.Close()
	ctx := context.Background()
	resolved, fresh, err := r.Lookup(ctx, a.DID)
	if err != nil || !fresh {
		t.Fatal(err)
	}
	if _, err := r.ReadExport(ctx, "", nil); err != nil {
		t.Fatal(err)
	}
	if info, _, _ := r.Lookup(ctx, a.DID); info != resolved {
		t.Fatalf("the export replaced a resolved document: %+v, was %+v", info, resolved)
	}
}

// exportOp is an export line: a plc_operation of did naming key (a
// did:key) as its atproto key, created at `at`.
func exportOp(did, key, at string) string {
	return fmt.Sprintf(`{"did":%q,"operation":{"type":"plc_operation","verificationMethods":{"atproto":%q},"alsoKnownAs":["at://a.test"],`+
		`"services":{"atproto_pds":{"type":"AtprotoPersonalDataServer","endpoint":"https://pds.test"}},"rotationKeys":[],"prev":null,"sig":"x"},`+
		`"cid":"bafyreia","nullified":false,"createdAt":%q}`, did, key, at)
}

// exportTransport answers GET /export with lines (one page, then none),
// and counts every other request.
type exportTransport struct {
	lines  []string
	others int
}

func (x *exportTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	body := ""
	if req.URL.Path == "/export" && req.URL.Query().Get("after") == "" {
		body = strings.Join(x.lines, "\n")
	} else if req.URL.Path != "/export" {
		x.others++
		return &http.Response{StatusCode: http.StatusNotFound, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	}
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader(body)), Request: req}, nil
}

// A DID whose later op is malformed (a signing key that does not parse,
// an operation the reader cannot render) is not left holding its earlier
// op's identity: what the DID is now is unknown, so its lookup resolves it.
func TestReadExportUnloadsADIDWithAMalformedOp(t *testing.T) {
	pub := newPublicKey(t)
	const kept, broken = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "did:plc:bbbbbbbbbbbbbbbbbbbbbbbb"
	x := &exportTransport{lines: []string{
		exportOp(kept, pub.DIDKey(), "2024-01-01T00:00:00.001Z"),
		exportOp(broken, pub.DIDKey(), "2024-01-01T00:00:00.002Z"),
		exportOp(broken, "did:key:zNotAKey", "2024-01-01T00:00:00.003Z"),
	}}
	r := ident.New(ident.Config{PLC: "http://plc.test", Sleep: noSleep, HTTPClient: &http.Client{Transport: x}})
	defer r.Close()
	st, err := r.ReadExport(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Loaded != 2 || st.Dropped != 1 {
		t.Fatalf("stats %+v, want 2 loaded and 1 dropped", st)
	}
	if !r.Known(kept) || r.Known(broken) {
		t.Fatalf("known: %s %v, %s %v; want only the DID whose last op was read", kept, r.Known(kept), broken, r.Known(broken))
	}
	if _, _, err := r.Lookup(context.Background(), broken); err == nil || x.others != 1 {
		t.Fatalf("lookup of %s: %v after %d requests, want it resolved (here: not found)", broken, err, x.others)
	}
}
