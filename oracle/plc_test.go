package oracle

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bluesky-social/indigo/atproto/identity"

	"github.com/backstream/backstream/oracle/world"
)

// exportEntry is one line of GET /export.
type exportEntry struct {
	DID       string `json:"did"`
	Operation struct {
		Type                string            `json:"type"`
		VerificationMethods map[string]string `json:"verificationMethods"`
		AlsoKnownAs         []string          `json:"alsoKnownAs"`
		Services            map[string]struct {
			Type, Endpoint string
		} `json:"services"`
		SigningKey string  `json:"signingKey"`
		Handle     string  `json:"handle"`
		Service    string  `json:"service"`
		Prev       *string `json:"prev"`
		Sig        string  `json:"sig"`
	} `json:"operation"`
	CID       string `json:"cid"`
	Nullified bool   `json:"nullified"`
	CreatedAt string `json:"createdAt"`
}

// exportPage GETs one page and decodes its lines.
func exportPage(t *testing.T, base string, count int, after string) []exportEntry {
	t.Helper()
	q := url.Values{"count": {itoa(int64(count))}}
	if after != "" {
		q.Set("after", after)
	}
	resp, err := http.Get(base + "/export?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/jsonlines" {
		t.Fatalf("export: status %d, content type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	b, _ := io.ReadAll(resp.Body)
	var out []exportEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e exportEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		out = append(out, e)
	}
	if len(b) > 0 && b[len(b)-1] == '\n' {
		t.Fatal("export body ends with a newline; plc.directory's does not")
	}
	return out
}

// exportAll pages the whole export from after with count and returns it
// and the last cursor.
func exportAll(t *testing.T, base string, count int, after string) ([]exportEntry, string) {
	t.Helper()
	var all []exportEntry
	for pages := 0; ; pages++ {
		if pages > 10_000 {
			t.Fatal("export never ended")
		}
		p := exportPage(t, base, count, after)
		if len(p) > count {
			t.Fatalf("page of %d lines, count %d", len(p), count)
		}
		if len(p) < count {
			all = append(all, p...)
			if len(p) > 0 {
				after = p[len(p)-1].CreatedAt
			}
			return all, after
		}
		// The ops at the page's last createdAt may go on in the next page
		// (after is exclusive): read them again from the one before.
		j := len(p) - 1
		for j >= 0 && p[j].CreatedAt == p[len(p)-1].CreatedAt {
			j--
		}
		if j < 0 {
			t.Fatalf("a page of %d ops of one createdAt %s", len(p), p[0].CreatedAt)
		}
		all = append(all, p[:j+1]...)
		after = p[j].CreatedAt
	}
}

// folded is a DID's document as its latest non-nullified op gives it.
type folded struct {
	key, handle, pds string
	tombstoned       bool
	head             string
}

func fold(t *testing.T, all []exportEntry, into map[string]folded) {
	t.Helper()
	for _, e := range all {
		if e.Nullified {
			continue
		}
		o := e.Operation
		prev := into[e.DID]
		if (o.Prev == nil) != (prev.head == "") || (o.Prev != nil && *o.Prev != prev.head) {
			t.Fatalf("%s op %s: prev %v, want the head %q", e.DID, e.CID, o.Prev, prev.head)
		}
		switch o.Type {
		case "plc_operation":
			into[e.DID] = folded{key: strings.TrimPrefix(o.VerificationMethods["atproto"], "did:key:"),
				handle: strings.TrimPrefix(o.AlsoKnownAs[0], "at://"), pds: o.Services["atproto_pds"].Endpoint, head: e.CID}
		case "create":
			into[e.DID] = folded{key: strings.TrimPrefix(o.SigningKey, "did:key:"), handle: o.Handle, pds: o.Service, head: e.CID}
		case "plc_tombstone":
			into[e.DID] = folded{tombstoned: true, head: e.CID}
		default:
			t.Fatalf("op type %q", o.Type)
		}
	}
}

// checkAgainstDocs compares the fold with GET /<did> for every did:plc
// account and every retired DID.
func checkAgainstDocs(t *testing.T, n *Network, got map[string]folded) {
	t.Helper()
	for _, a := range n.World().Accounts() {
		if !strings.HasPrefix(a.DID, "did:plc:") {
			if _, ok := got[a.DID]; ok {
				t.Fatalf("the export holds %s", a.DID)
			}
			continue
		}
		var doc identity.DIDDocument
		if st := getJSON(t, n.RelayURL()+"/"+a.DID, &doc); st != 200 {
			t.Fatalf("GET /%s: %d", a.DID, st)
		}
		id := identity.ParseIdentity(&doc)
		h, _ := id.DeclaredHandle()
		want := folded{key: id.Keys["atproto"].PublicKeyMultibase, handle: h.String(), pds: id.PDSEndpoint()}
		f := got[a.DID]
		if f.key != want.key || f.handle != want.handle || f.pds != want.pds || f.tombstoned {
			t.Fatalf("%s: export says %+v, GET /<did> %+v", a.DID, f, want)
		}
	}
	for _, did := range n.RetiredDIDs() {
		if !got[did].tombstoned {
			t.Fatalf("retired %s: %+v, want tombstoned", did, got[did])
		}
		if st := getJSON(t, n.RelayURL()+"/"+did, nil); st != http.StatusNotFound {
			t.Fatalf("GET /%s of a tombstone: %d, want 404", did, st)
		}
	}
}

// GET /export pages every did:plc account's log in createdAt order (each
// op once, count capped at 1000, after exclusive), with legacy creates,
// nullified forks and tombstones, and the fold of it is what GET /<did>
// serves, before and after key rotations and handle changes.
func TestExportMatchesDocuments(t *testing.T) {
	cfg := quietCfg(300)
	cfg.WebDIDs = 5
	n := startNet(t, cfg)
	all, cursor := exportAll(t, n.RelayURL(), 37, "")
	seen := map[string]bool{}
	var last time.Time
	kinds := map[string]int{}
	shared := 0 // ops with the createdAt of the op before
	for _, e := range all {
		if seen[e.CID] {
			t.Fatalf("op %s twice", e.CID)
		}
		seen[e.CID] = true
		at, err := time.Parse(time.RFC3339Nano, e.CreatedAt)
		if err != nil || at.Before(last) {
			t.Fatalf("createdAt %q after %v: %v", e.CreatedAt, last, err)
		}
		if at.Equal(last) {
			shared++
		}
		last = at
		kinds[e.Operation.Type]++
		if e.Nullified {
			kinds["nullified"]++
		}
		if len(e.Operation.Sig) != 86 || !strings.HasPrefix(e.CID, "bafyrei") {
			t.Fatalf("op %+v: sig or cid not of their real shape", e)
		}
	}
	if shared == 0 {
		t.Fatal("no two ops share a createdAt: a reader's paging across one is never exercised")
	}
	if kinds["create"] == 0 || kinds["nullified"] == 0 || kinds["plc_tombstone"] != len(n.RetiredDIDs()) {
		t.Fatalf("op kinds %v: want legacy creates, nullified ops and %d tombstones", kinds, len(n.RetiredDIDs()))
	}
	got := map[string]folded{}
	fold(t, all, got)
	checkAgainstDocs(t, n, got)

	// Changes after the first read: a rotation and a handle change each
	// append one op after the cursor.
	did := n.World().Accounts()[3].DID
	if !strings.HasPrefix(did, "did:plc:") {
		t.Fatalf("%s is not a did:plc", did)
	}
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.RotateKey(did) }); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.SetHandle(did, "renamed.test") }); err != nil {
		t.Fatal(err)
	}
	more, _ := exportAll(t, n.RelayURL(), 1000, cursor)
	if len(more) != 1 || more[0].DID != did {
		t.Fatalf("after the cursor: %+v, want one op of %s (both changes seen at once)", more, did)
	}
	fold(t, more, got)
	checkAgainstDocs(t, n, got)

	// The paging contract's edges.
	if st := getJSON(t, n.RelayURL()+"/export?count=0", nil); st != http.StatusBadRequest {
		t.Fatalf("count=0: %d, want 400", st)
	}
	if st := getJSON(t, n.RelayURL()+"/export?after=yesterday", nil); st != http.StatusBadRequest {
		t.Fatalf("after=yesterday: %d, want 400", st)
	}
	if p, q := exportPage(t, n.RelayURL(), 5000, ""), exportPage(t, n.RelayURL(), 1000, ""); len(p) != len(q) {
		t.Fatalf("count=5000 gave %d lines, count=1000 %d", len(p), len(q))
	}
	if n.ExportRequests() == 0 || n.Status().ExportRequests != n.ExportRequests() {
		t.Fatalf("export requests %d, status %d", n.ExportRequests(), n.Status().ExportRequests)
	}
}

// HostileExport puts its malformed lines after a page's first line and
// counts them; FailExport answers 500.
func TestExportFaults(t *testing.T) {
	n := startNet(t, quietCfg(20))
	n.Faults().HostileExport(1)
	resp, err := http.Get(n.RelayURL() + "/export")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	lines := strings.Split(string(b), "\n")
	clean := exportPage(t, n.RelayURL(), 1000, "")
	if len(lines) != len(clean)+HostileExportLines() {
		t.Fatalf("%d lines, want %d real and %d malformed", len(lines), len(clean), HostileExportLines())
	}
	if got := n.Faults().Fired(FaultExportMalformed); got != int64(HostileExportLines()) {
		t.Fatalf("fired %d", got)
	}
	n.Faults().FailExport(1)
	if st := getJSON(t, n.RelayURL()+"/export", nil); st != http.StatusInternalServerError {
		t.Fatalf("FailExport: %d", st)
	}
	if n.Faults().Fired(FaultExportFailing) != 1 {
		t.Fatal("FailExport not counted")
	}
}
