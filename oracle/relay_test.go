package oracle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/identity"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/ipfs/go-cid"

	"github.com/backstream/backstream/oracle/world"
)

// listAll pages listRepos at base with limit and returns every entry and the
// cursors it was given.
func listAll(t *testing.T, base string, limit int) ([]*comatproto.SyncListRepos_Repo, []string) {
	t.Helper()
	var all []*comatproto.SyncListRepos_Repo
	var cursors []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 1000 {
			t.Fatal("listRepos never ended")
		}
		q := url.Values{}
		if limit > 0 {
			q.Set("limit", itoa(int64(limit)))
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var out comatproto.SyncListRepos_Output
		if st := getJSON(t, base+"/xrpc/com.atproto.sync.listRepos?"+q.Encode(), &out); st != 200 {
			t.Fatalf("listRepos status %d", st)
		}
		if limit > 0 && len(out.Repos) > limit {
			t.Fatalf("page of %d repos, limit %d", len(out.Repos), limit)
		}
		all = append(all, out.Repos...)
		if out.Cursor == nil || *out.Cursor == "" {
			return all, cursors
		}
		cursor = *out.Cursor
		cursors = append(cursors, cursor)
	}
}

// listRepos paging covers every account exactly once, with the world's head,
// rev, active and status.
func TestListReposPagingCoversEveryAccountOnce(t *testing.T) {
	n := startNet(t, quietCfg(230))
	var accts []world.Account
	deleted := 0
	for _, a := range n.World().Accounts() {
		if a.Status == world.StatusDeleted {
			deleted++ // deleted accounts have no repo and are not listed
			continue
		}
		accts = append(accts, a)
	}
	if deleted == 0 {
		t.Fatal("world has no deleted account: exclusion untested")
	}
	for _, limit := range []int{0, 1, 100, 229, 230, 1000} {
		got, _ := listAll(t, n.RelayURL(), limit)
		if len(got) != len(accts) {
			t.Fatalf("limit %d: %d entries, want %d", limit, len(got), len(accts))
		}
		for i, r := range got {
			a := accts[i]
			if r.Did != a.DID || r.Rev != a.Rev || r.Head != a.Head.String() {
				t.Fatalf("limit %d entry %d: %+v, want %s %s %s", limit, i, r, a.DID, a.Rev, a.Head)
			}
			if r.Active == nil || *r.Active != a.Active {
				t.Fatalf("limit %d %s: active %v, want %v", limit, a.DID, r.Active, a.Active)
			}
			st := ""
			if r.Status != nil {
				st = *r.Status
			}
			if st != a.Status {
				t.Fatalf("limit %d %s: status %q, want %q", limit, a.DID, st, a.Status)
			}
		}
	}
	var inactive int
	for _, a := range accts {
		if !a.Active {
			inactive++
		}
	}
	if inactive == 0 {
		t.Fatal("world has no inactive account: status fields untested")
	}
	// Per-host listRepos partitions the accounts.
	seen := map[string]int{}
	for i, u := range n.HostURLs() {
		got, _ := listAll(t, u, 7)
		for _, r := range got {
			a, _ := n.World().Account(r.Did)
			if a.Host != i {
				t.Fatalf("host %d lists %s of host %d", i, r.Did, a.Host)
			}
			seen[r.Did]++
		}
	}
	if len(seen) != len(accts) {
		t.Fatalf("hosts list %d accounts, want %d", len(seen), len(accts))
	}
}

func TestListReposDefaultLimitAndBadRequests(t *testing.T) {
	n := startNet(t, Config{Accounts: 600, RecordsMean: 1, Hosts: 1, Seed: 3, Traffic: TrafficNone})
	var out comatproto.SyncListRepos_Output
	getJSON(t, n.RelayURL()+"/xrpc/com.atproto.sync.listRepos", &out)
	if len(out.Repos) != listReposDefaultLimit || out.Cursor == nil {
		t.Fatalf("default page: %d repos, cursor %v; want 500 and a cursor", len(out.Repos), out.Cursor)
	}
	for _, q := range []string{"limit=1001", "limit=0", "limit=x", "cursor=%21%21", "cursor=" + encodeCursor("nodid", 0)} {
		var e xrpcError
		if st := getJSON(t, n.RelayURL()+"/xrpc/com.atproto.sync.listRepos?"+q, &e); st != 400 || e.Error != "InvalidRequest" {
			t.Fatalf("%s: %d %q, want 400 InvalidRequest", q, st, e.Error)
		}
	}
}

// loadCAR loads and fully verifies a CAR: every MST node and record present.
func loadCAR(t *testing.T, b []byte) (*repo.Commit, map[string]cid.Cid) {
	t.Helper()
	ctx := context.Background()
	commit, r, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(b))
	if err != nil {
		t.Fatalf("LoadRepoFromCAR: %v", err)
	}
	if r.MST.IsPartial() {
		t.Fatal("partial MST")
	}
	recs := map[string]cid.Cid{}
	err = r.MST.Walk(func(k []byte, v cid.Cid) error {
		if _, err := r.RecordStore.Get(ctx, v); err != nil {
			return err
		}
		recs[string(k)] = v
		return nil
	})
	if err != nil {
		t.Fatalf("walk: %v", err)
	}
	return commit, recs
}

// getRepo at the relay redirects to the account's PDS, which serves a CAR
// indigo loads to exactly the world's records, signed by the DID document's key.
func TestGetRepoRedirectsToPDSAndServesVerifiableCAR(t *testing.T) {
	n := startNet(t, quietCfg(30))
	ctx := context.Background()
	dir := directory(n)
	for _, did := range activeDIDs(n)[:5] {
		a, _ := n.World().Account(did)
		resp, err := noRedirect.Get(n.RelayURL() + "/xrpc/com.atproto.sync.getRepo?did=" + did)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		want := n.HostURLs()[a.Host] + "/xrpc/com.atproto.sync.getRepo?did="
		if resp.StatusCode != http.StatusFound || !strings.HasPrefix(loc, want) {
			t.Fatalf("relay getRepo %s: %d %q, want 302 to %s", did, resp.StatusCode, loc, want)
		}
		st, b, h := getRepo(t, n.RelayURL(), did)
		if st != 200 || h.Get("Content-Type") != carContentType {
			t.Fatalf("getRepo %s: %d %q", did, st, h.Get("Content-Type"))
		}
		commit, recs := loadCAR(t, b)
		if commit.DID != did || commit.Rev != a.Rev || commit.Data != a.Data {
			t.Fatalf("commit %s %s %s, want %s %s %s", commit.DID, commit.Rev, commit.Data, did, a.Rev, a.Data)
		}
		if w := n.World().Records(did); len(w) != len(recs) {
			t.Fatalf("%s: CAR has %d records, world %d", did, len(recs), len(w))
		} else {
			for k, v := range w {
				if recs[k] != v {
					t.Fatalf("%s %s: CAR %s, world %s", did, k, recs[k], v)
				}
			}
		}
		if _, err := repo.VerifyCommitSignatureFromCar(ctx, dir, b); err != nil {
			t.Fatalf("%s: signature: %v", did, err)
		}
		c := n.RepoCounts(did)
		for deadline := time.Now().Add(time.Second); c.Complete == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond) // the handler counts after its last write returns
			c = n.RepoCounts(did)
		}
		if c.RelayRequests != 2 || c.Requests != 1 || c.Complete != 1 {
			t.Fatalf("%s counts %+v, want relay 2, pds 1, complete 1", did, c)
		}
	}
	var total int64
	for i := range n.HostURLs() {
		total += n.HostGetRepoRequests(i)
	}
	if total != 5 {
		t.Fatalf("host getRepo total %d, want 5", total)
	}
	// Unknown DID at the relay.
	st, b, _ := getRepo(t, n.RelayURL(), "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa")
	if st != 400 || xrpcErrorName(t, b) != "RepoNotFound" {
		t.Fatalf("unknown DID: %d %s", st, b)
	}
}

// The PDS answers each inactive status with its atproto error name.
func TestPDSErrorNamesPerStatus(t *testing.T) {
	n := startNet(t, quietCfg(30))
	dids := activeDIDs(n)
	want := map[string]string{
		world.StatusDeactivated: "RepoDeactivated",
		world.StatusTakendown:   "RepoTakendown",
		world.StatusSuspended:   "RepoSuspended",
		world.StatusDeleted:     "RepoNotFound",
	}
	statuses := []string{world.StatusDeactivated, world.StatusTakendown, world.StatusSuspended, world.StatusDeleted}
	for i, st := range statuses {
		did := dids[i]
		if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.SetStatus(did, st) }); err != nil {
			t.Fatal(err)
		}
		code, b, _ := getRepo(t, n.RelayURL(), did)
		if code != 400 || xrpcErrorName(t, b) != want[st] {
			t.Fatalf("status %s: %d %s, want 400 %s", st, code, b, want[st])
		}
	}
	// A DID asked of the wrong host, and an unknown DID, are RepoNotFound.
	a, _ := n.World().Account(dids[10])
	other := n.HostURLs()[(a.Host+1)%len(n.HostURLs())]
	for _, did := range []string{dids[10], "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"} {
		code, b, _ := getRepo(t, other, did)
		if code != 400 || xrpcErrorName(t, b) != "RepoNotFound" {
			t.Fatalf("%s at %s: %d %s", did, other, code, b)
		}
	}
	code, b, _ := getRepo(t, other, "not-a-did")
	if code != 400 || xrpcErrorName(t, b) != "InvalidRequest" {
		t.Fatalf("bad did: %d %s", code, b)
	}
}

// DID documents are served PLC-style and resolve through indigo's identity package.
func TestDIDDocumentResolvesWithIndigo(t *testing.T) {
	n := startNet(t, quietCfg(10))
	ctx := context.Background()
	dir := directory(n)
	for _, a := range n.World().Accounts() {
		var doc identity.DIDDocument
		if st := getJSON(t, n.RelayURL()+"/"+a.DID, &doc); st != 200 {
			t.Fatalf("GET /%s: %d", a.DID, st)
		}
		ident := identity.ParseIdentity(&doc)
		if got, _ := ident.DeclaredHandle(); got.String() != a.Handle {
			t.Fatalf("%s handle %q, want %q", a.DID, got, a.Handle)
		}
		if ident.PDSEndpoint() != n.HostURLs()[a.Host] {
			t.Fatalf("%s PDS %q, want %q", a.DID, ident.PDSEndpoint(), n.HostURLs()[a.Host])
		}
		pub, err := ident.PublicKey()
		if err != nil || pub.Multibase() != a.PublicKeyMultibase {
			t.Fatalf("%s key %v %v, want %s", a.DID, pub, err, a.PublicKeyMultibase)
		}
		resolved, err := dir.LookupDID(ctx, mustDID(t, a.DID))
		if err != nil || resolved.PDSEndpoint() != n.HostURLs()[a.Host] {
			t.Fatalf("LookupDID %s: %v %v", a.DID, resolved, err)
		}
	}
	_, err := dir.ResolveDID(ctx, mustDID(t, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"))
	if !errors.Is(err, identity.ErrDIDNotFound) {
		t.Fatalf("unknown DID: %v, want ErrDIDNotFound", err)
	}
}

func TestListHostsAndStatus(t *testing.T) {
	cfg := quietCfg(40)
	cfg.Hosts = 3
	n := startNet(t, cfg)
	emitTraffic(t, n, n.World().NewTraffic("basic", 1), 4)
	var out comatproto.SyncListHosts_Output
	if st := getJSON(t, n.RelayURL()+"/xrpc/com.atproto.sync.listHosts", &out); st != 200 {
		t.Fatalf("listHosts %d", st)
	}
	if len(out.Hosts) != 3 {
		t.Fatalf("%d hosts, want 3", len(out.Hosts))
	}
	var names []string
	for i, h := range out.Hosts {
		if "http://"+h.Hostname != n.HostURLs()[i] || h.AccountCount == nil || *h.AccountCount == 0 {
			t.Fatalf("host %d: %+v", i, h)
		}
		names = append(names, h.Hostname)
	}
	sort.Strings(names)
	for i := 1; i < len(names); i++ {
		if names[i] == names[i-1] {
			t.Fatalf("duplicate host %s", names[i])
		}
	}
	var st Status
	getJSON(t, n.RelayURL()+"/_devnet/status", &st)
	if st != (Status{Seq: 4, Events: 4, Done: true, Accounts: 40, LiveRecords: n.World().LiveRecords()}) || st.LiveRecords == 0 {
		t.Fatalf("status %+v", st)
	}
	raw := map[string]any{}
	getJSON(t, n.RelayURL()+"/_devnet/status", &raw)
	for _, k := range []string{"seq", "events", "done", "accounts", "live_records"} {
		if _, ok := raw[k]; !ok {
			b, _ := json.Marshal(raw)
			t.Fatalf("status lacks %q: %s", k, b)
		}
	}
}

// TestFailListHosts: FailListHosts answers the next n listHosts requests
// with its status, counted and pending until spent; then the roster is
// served again.
func TestFailListHosts(t *testing.T) {
	cfg := quietCfg(10)
	cfg.Hosts = 2
	n := startNet(t, cfg)
	n.Faults().FailListHosts(http.StatusInternalServerError, 2)
	url := n.RelayURL() + "/xrpc/com.atproto.sync.listHosts"
	var out comatproto.SyncListHosts_Output
	for i := range 2 {
		if st := getJSON(t, url, &out); st != http.StatusInternalServerError {
			t.Fatalf("listHosts %d under FailListHosts: %d, want 500", i, st)
		}
	}
	if got := n.Faults().Fired(FaultListHostsFailing); got != 2 {
		t.Fatalf("listhosts_failing fired %d, want 2", got)
	}
	if p := n.Faults().Pending(); len(p) != 0 {
		t.Fatalf("faults pending after their uses: %v", p)
	}
	if st := getJSON(t, url, &out); st != http.StatusOK || len(out.Hosts) != 2 {
		t.Fatalf("listHosts after FailListHosts spent: %d, %d hosts", st, len(out.Hosts))
	}
}
