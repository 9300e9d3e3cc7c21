package oracle

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	comatproto "github.com/bluesky-social/indigo/api/atproto"
	"github.com/bluesky-social/indigo/atproto/atcrypto"
	"github.com/bluesky-social/indigo/atproto/repo"
	"github.com/bluesky-social/indigo/atproto/syntax"
	"github.com/gorilla/websocket"
	car "github.com/ipld/go-car"

	"github.com/backstream/backstream/oracle/world"
)

// faultNet is a quiet network and one active DID with at least a few records.
func faultNet(t *testing.T) (*Network, string) {
	t.Helper()
	n := startNet(t, quietCfg(30))
	for _, did := range activeDIDs(n) {
		if a, _ := n.World().Account(did); a.Records >= 4 {
			return n, did
		}
	}
	t.Fatal("no active account with 4 records")
	return nil, ""
}

func TestFaultFailGetRepoNTimes(t *testing.T) {
	n, did := faultNet(t)
	n.Faults().FailGetRepo(did, 503, 2)
	for i := 0; i < 2; i++ {
		st, b, _ := getRepo(t, n.RelayURL(), did)
		if st != 503 || xrpcErrorName(t, b) != "ServiceUnavailable" {
			t.Fatalf("request %d: %d %s, want 503 ServiceUnavailable", i, st, b)
		}
	}
	if st, b, _ := getRepo(t, n.RelayURL(), did); st != 200 {
		t.Fatalf("third request: %d %s, want 200", st, b)
	}
	if got := n.Faults().Fired(FaultGetRepoStatus); got != 2 {
		t.Fatalf("fired %d, want 2", got)
	}
	c := n.RepoCounts(did)
	for deadline := time.Now().Add(time.Second); c.Complete == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
		c = n.RepoCounts(did)
	}
	if c.Requests != 3 || c.Complete != 1 {
		t.Fatalf("counts %+v", c)
	}
	if p := n.Faults().Pending(); len(p) != 0 {
		t.Fatalf("pending %v", p)
	}
}

func checkRateLimitHeaders(t *testing.T, h http.Header, before time.Time) {
	t.Helper()
	reset, err := strconv.ParseInt(h.Get("ratelimit-reset"), 10, 64)
	if err != nil || reset < before.Unix() || reset > before.Unix()+10 {
		t.Fatalf("ratelimit-reset %q (%v), want unix seconds near %d", h.Get("ratelimit-reset"), err, before.Unix())
	}
	ra, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || ra < 1 || ra > 10 {
		t.Fatalf("Retry-After %q (%v)", h.Get("Retry-After"), err)
	}
	if h.Get("ratelimit-remaining") != "0" || h.Get("ratelimit-limit") == "" {
		t.Fatalf("ratelimit-* headers %v", h)
	}
}

func TestFaultRateLimitHostCarriesBothHeaders(t *testing.T) {
	n, did := faultNet(t)
	a, _ := n.World().Account(did)
	n.Faults().RateLimitHost(a.Host, 2, 3*time.Second)
	before := time.Now()
	for i := 0; i < 2; i++ {
		st, b, h := getRepo(t, n.RelayURL(), did)
		if st != 429 || xrpcErrorName(t, b) != "RateLimitExceeded" {
			t.Fatalf("request %d: %d %s, want 429", i, st, b)
		}
		checkRateLimitHeaders(t, h, before)
	}
	if st, _, _ := getRepo(t, n.RelayURL(), did); st != 200 {
		t.Fatalf("after burst: %d", st)
	}
	// Another host is unaffected while the limited one is hit.
	n.Faults().RateLimitHost(a.Host, Always, time.Second)
	for _, other := range activeDIDs(n) {
		if o, _ := n.World().Account(other); o.Host != a.Host {
			if st, _, _ := getRepo(t, n.RelayURL(), other); st != 200 {
				t.Fatalf("other host: %d", st)
			}
			break
		}
	}
}

func TestFaultLimitHostWindow(t *testing.T) {
	n, did := faultNet(t)
	a, _ := n.World().Account(did)
	n.Faults().LimitHost(a.Host, 3, time.Second)
	before := time.Now()
	var ok, limited int
	for i := 0; i < 10; i++ {
		st, _, h := getRepo(t, n.HostURLs()[a.Host], did)
		switch st {
		case 200:
			ok++
		case 429:
			limited++
			checkRateLimitHeaders(t, h, before)
			if h.Get("ratelimit-limit") != "3" || h.Get("ratelimit-policy") != "3;w=1" {
				t.Fatalf("limit headers %v", h)
			}
		default:
			t.Fatalf("status %d", st)
		}
	}
	if ok > 6 || limited < 4 {
		t.Fatalf("ok %d limited %d within at most two 1s windows of 3", ok, limited)
	}
}

func TestFaultTruncateCARFailsIndigoLoader(t *testing.T) {
	n, did := faultNet(t)
	full, _, _ := n.World().RepoCAR(did)
	n.Faults().TruncateCAR(did, 1)
	st, b, h := getRepo(t, n.RelayURL(), did)
	if st != 200 || len(b) != len(full)/2 || h.Get("Content-Length") != strconv.Itoa(len(full)/2) {
		t.Fatalf("truncated: %d, %d bytes (CL %s), want 200 and %d", st, len(b), h.Get("Content-Length"), len(full)/2)
	}
	_, _, err := repo.LoadRepoFromCAR(context.Background(), bytes.NewReader(b))
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("LoadRepoFromCAR: %v, want unexpected EOF", err)
	}
	if c := n.RepoCounts(did); c.Complete != 0 {
		t.Fatalf("truncated CAR counted complete: %+v", c)
	}
}

// verifyCAR is the full check a careful consumer runs.
func verifyCAR(b []byte) error {
	ctx := context.Background()
	_, r, err := repo.LoadRepoFromCAR(ctx, bytes.NewReader(b))
	if err != nil {
		return err
	}
	if r.MST.IsPartial() {
		return errors.New("partial MST")
	}
	return r.MST.Walk(func(_ []byte, v cidT) error {
		_, err := r.RecordStore.Get(ctx, v)
		return err
	})
}

func TestFaultTruncateCARAtBlockParsesButIsIncomplete(t *testing.T) {
	n, did := faultNet(t)
	full, _, _ := n.World().RepoCAR(did)
	n.Faults().TruncateCARAtBlock(did, 1)
	_, b, _ := getRepo(t, n.RelayURL(), did)
	if len(b) >= len(full) || !bytes.Equal(b, full[:len(b)]) {
		t.Fatalf("not a prefix cut: %d of %d bytes", len(b), len(full))
	}
	cr, err := car.NewCarReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := cr.Next(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("cut is not at a block boundary: %v", err)
		}
	}
	if err := verifyCAR(b); err == nil {
		t.Fatal("block-boundary truncated CAR verified as complete")
	}
}

func TestFaultDropBlockLoadsButMissesARecord(t *testing.T) {
	n, did := faultNet(t)
	n.Faults().DropBlock(did, 1)
	_, b, _ := getRepo(t, n.RelayURL(), did)
	if _, _, err := repo.LoadRepoFromCAR(context.Background(), bytes.NewReader(b)); err != nil {
		t.Fatalf("a missing record block should load (indigo is lenient): %v", err)
	}
	if err := verifyCAR(b); err == nil || !strings.Contains(err.Error(), "could not find") {
		t.Fatalf("full verification: %v, want a missing block", err)
	}
}

func TestFaultCorruptBlockFailsHashCheck(t *testing.T) {
	n, did := faultNet(t)
	full, _, _ := n.World().RepoCAR(did)
	n.Faults().CorruptBlock(did, 1)
	_, b, _ := getRepo(t, n.RelayURL(), did)
	if len(b) != len(full) {
		t.Fatalf("corrupt CAR %d bytes, want %d", len(b), len(full))
	}
	_, _, err := repo.LoadRepoFromCAR(context.Background(), bytes.NewReader(b))
	if err == nil || !strings.Contains(err.Error(), "mismatch in content integrity") {
		t.Fatalf("LoadRepoFromCAR: %v, want content integrity mismatch", err)
	}
}

func TestFaultHangBodyStallsAndCloseStillReturns(t *testing.T) {
	n, did := faultNet(t)
	full, _, _ := n.World().RepoCAR(did)
	n.Faults().HangBody(did, 1)
	client := &http.Client{Timeout: 300 * time.Millisecond}
	start := time.Now()
	resp, err := client.Get(n.RelayURL() + "/xrpc/com.atproto.sync.getRepo?did=" + did)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(got) >= len(full) {
		t.Fatalf("hung body: read %d of %d bytes, err %v", len(got), len(full), err)
	}
	if time.Since(start) < 250*time.Millisecond {
		t.Fatalf("hung body returned after %v", time.Since(start))
	}
	// A second hang that the client never abandons: Close must end it.
	n.Faults().HangBody(did, 1)
	a, _ := n.World().Account(did)
	got2 := make(chan int, 1)
	go func() {
		resp, err := http.Get(n.HostURLs()[a.Host] + "/xrpc/com.atproto.sync.getRepo?did=" + did)
		if err != nil {
			got2 <- -1
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got2 <- len(b)
	}()
	for n.Faults().Fired(FaultHangBody) < 2 {
		time.Sleep(time.Millisecond)
	}
	start = time.Now()
	n.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v with a hung body", d)
	}
	if l := <-got2; l >= len(full) {
		t.Fatalf("hung client read %d of %d bytes", l, len(full))
	}
}

func TestFaultSlowBodyIsPaced(t *testing.T) {
	n, did := faultNet(t)
	full, _, _ := n.World().RepoCAR(did)
	bps := len(full) * 2 // about half a second
	n.Faults().SlowBody(did, bps, 1)
	start := time.Now()
	st, b, _ := getRepo(t, n.RelayURL(), did)
	d := time.Since(start)
	if st != 200 || !bytes.Equal(b, full) {
		t.Fatalf("slow body: %d, %d bytes", st, len(b))
	}
	if d < 350*time.Millisecond {
		t.Fatalf("slow body at %d B/s took %v for %d bytes", bps, d, len(full))
	}
}

// GateBody: the host sends half of the CAR the repo had when the request
// arrived and the rest only once released, whatever the world did
// meanwhile.
func TestFaultGateBodyServesTheOlderRepo(t *testing.T) {
	n, did := faultNet(t)
	full, _, _ := n.World().RepoCAR(did)
	gate := n.Faults().GateBody(did)
	type answer struct {
		status int
		body   []byte
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := http.Get(n.RelayURL() + "/xrpc/com.atproto.sync.getRepo?did=" + did)
		if err != nil {
			got <- answer{status: -1}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		got <- answer{resp.StatusCode, b}
	}()
	<-gate.Reached()
	path := ""
	for p := range n.World().Records(did) {
		path = p
		break
	}
	if _, err := n.Emit(func(w *world.World) (world.Event, error) { return w.DeleteRecord(did, path) }); err != nil {
		t.Fatal(err)
	}
	select {
	case a := <-got:
		t.Fatalf("the gated body ended before its release: %d, %d bytes", a.status, len(a.body))
	default:
	}
	gate.Release()
	if a := <-got; a.status != 200 || !bytes.Equal(a.body, full) {
		t.Fatalf("gated body: %d, %d bytes, want the %d bytes of the repo before the delete", a.status, len(a.body), len(full))
	}
	if got := n.Faults().Fired(FaultGatedBody); got != 1 {
		t.Fatalf("gated_body fired %d times, want 1", got)
	}
	if now, _, _ := n.World().RepoCAR(did); bytes.Equal(now, full) {
		t.Fatal("the delete did not change the repo")
	}
}

func TestFaultResetMidBody(t *testing.T) {
	n, did := faultNet(t)
	full, _, _ := n.World().RepoCAR(did)
	n.Faults().ResetMidBody(did, 1)
	resp, err := http.Get(n.RelayURL() + "/xrpc/com.atproto.sync.getRepo?did=" + did)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(got) >= len(full) {
		t.Fatalf("reset mid-body: %d of %d bytes, err %v", len(got), len(full), err)
	}
	t.Logf("client saw: %v after %d bytes", err, len(got))
}

// signedCommit decodes the root commit of a CAR without indigo's structure
// checks (so an invalid rev still decodes) and returns it with the non-commit
// blocks' CIDs.
func signedCommit(t *testing.T, b []byte) (repo.Commit, map[cidT]bool) {
	t.Helper()
	root, bs, err := splitCAR(b)
	if err != nil {
		t.Fatal(err)
	}
	var c repo.Commit
	found := false
	rest := map[cidT]bool{}
	for _, blk := range bs {
		if blk.c == root {
			if err := c.UnmarshalCBOR(bytes.NewReader(blk.data)); err != nil {
				t.Fatal(err)
			}
			found = true
			continue
		}
		rest[blk.c] = true
	}
	if !found {
		t.Fatal("no commit block")
	}
	return c, rest
}

// didDocKey is did's #atproto key as the relay's PLC-style endpoint serves it.
func didDocKey(t *testing.T, n *Network, did string) atcrypto.PublicKey {
	t.Helper()
	ident, err := directory(n).LookupDID(context.Background(), mustDID(t, did))
	if err != nil {
		t.Fatal(err)
	}
	k, err := ident.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// The other DID's CAR is complete and validly signed by that DID (its
// document's key), so the only defect is that it names another DID.
func TestFaultCommitForOtherDID(t *testing.T) {
	n, did := faultNet(t)
	n.Faults().CommitForOtherDID(did, 1)
	_, b, _ := getRepo(t, n.RelayURL(), did)
	commit, recs := loadCAR(t, b)
	if commit.DID == did {
		t.Fatal("commit names the requested DID")
	}
	if _, err := repo.VerifyCommitSignatureFromCar(context.Background(), directory(n), b); err != nil {
		t.Fatalf("other DID's CAR should be validly signed by that DID: %v", err)
	}
	if err := commit.VerifySignature(didDocKey(t, n, did)); err == nil {
		t.Fatal("other DID's commit verifies against the requested DID's key")
	}
	if want := n.World().Records(commit.DID); !reflect.DeepEqual(recs, want) {
		t.Fatalf("other DID's CAR: %d records, world %d", len(recs), len(want))
	}
}

// The invalid-rev CAR is the account's repo with its commit re-signed by the
// account's own key: the signature verifies against the DID document, the
// MST and records are the world's, and only the rev fails (indigo's
// VerifyStructure, inside LoadRepoFromCAR).
func TestFaultInvalidRev(t *testing.T) {
	n, did := faultNet(t)
	full, acct, err := n.World().RepoCAR(did)
	if err != nil {
		t.Fatal(err)
	}
	n.Faults().InvalidRev(did, 1)
	_, b, _ := getRepo(t, n.RelayURL(), did)
	_, _, err = repo.LoadRepoFromCAR(context.Background(), bytes.NewReader(b))
	if err == nil || !strings.Contains(err.Error(), "TID") {
		t.Fatalf("LoadRepoFromCAR: %v, want a rev (TID) error", err)
	}
	c, rest := signedCommit(t, b)
	if c.Rev != InvalidRevValue || c.DID != did || c.Data != acct.Data || c.Version != repo.ATPROTO_REPO_VERSION {
		t.Fatalf("commit rev %q did %q data %s, want data %s", c.Rev, c.DID, c.Data, acct.Data)
	}
	if err := c.VerifySignature(didDocKey(t, n, did)); err != nil {
		t.Fatalf("invalid-rev commit not signed by the DID document's key: %v", err)
	}
	_, worldRest := signedCommit(t, full)
	if !reflect.DeepEqual(rest, worldRest) {
		t.Fatalf("non-commit blocks differ from the world's CAR: %d vs %d", len(rest), len(worldRest))
	}
	// With the rev fixed (and re-signed), the same CAR would load: the rev is
	// the only defect.
	c.Rev = acct.Rev
	if err := c.VerifyStructure(); err != nil {
		t.Fatalf("commit with the world's rev: %v", err)
	}
}

// The invalid-paths CAR is signed by the account's own key at the world's
// rev; its valid records are exactly the world's and the extra ones fail
// syntax.ParseRepoPath.
func TestFaultInvalidRecordPaths(t *testing.T) {
	n, did := faultNet(t)
	acct := mustAccount(t, n, did)
	n.Faults().InvalidRecordPaths(did, 1)
	_, b, _ := getRepo(t, n.RelayURL(), did)
	commit, recs := loadCAR(t, b)
	if commit.DID != did || commit.Rev != acct.Rev {
		t.Fatalf("commit DID %s rev %s, want %s %s", commit.DID, commit.Rev, did, acct.Rev)
	}
	world := n.World().Records(did)
	bad := 0
	for k, v := range recs {
		if _, _, err := syntax.ParseRepoPath(k); err != nil {
			bad++
			continue
		}
		if world[k] != v {
			t.Fatalf("valid record %s: %s, world %s", k, v, world[k])
		}
	}
	if bad != len(InvalidRecordPathKeys()) || len(recs)-bad != len(world) {
		t.Fatalf("%d invalid + %d valid records, want %d + %d", bad, len(recs)-bad, len(InvalidRecordPathKeys()), len(world))
	}
	if _, err := repo.VerifyCommitSignatureFromCar(context.Background(), directory(n), b); err != nil {
		t.Fatalf("re-signed commit does not verify against the DID document: %v", err)
	}
}

func TestFaultRedirectPrivate(t *testing.T) {
	n, did := faultNet(t)
	n.Faults().RedirectPrivate(did, 1)
	resp, err := noRedirect.Get(n.RelayURL() + "/xrpc/com.atproto.sync.getRepo?did=" + did)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if loc := resp.Header.Get("Location"); resp.StatusCode != 302 || !strings.HasPrefix(loc, "http://10.0.0.1/") {
		t.Fatalf("redirect %d %q, want 302 to a private address", resp.StatusCode, loc)
	}
	if st, _, _ := getRepo(t, n.RelayURL(), did); st != 200 {
		t.Fatalf("after the one private redirect: %d", st)
	}
}

func TestFaultListReposCursorLoopReturnsSameCursor(t *testing.T) {
	n := startNet(t, quietCfg(30))
	n.Faults().ListReposCursorLoop(1)
	base := n.RelayURL() + "/xrpc/com.atproto.sync.listRepos?limit=5"
	var p1, p2, p3 comatproto.SyncListRepos_Output
	getJSON(t, base, &p1)
	getJSON(t, base+"&cursor="+*p1.Cursor, &p2)
	if p2.Cursor == nil || *p2.Cursor != *p1.Cursor {
		t.Fatalf("loop page cursor %v, want the request's %s", p2.Cursor, *p1.Cursor)
	}
	getJSON(t, base+"&cursor="+*p2.Cursor, &p3)
	if p3.Cursor == nil || *p3.Cursor == *p1.Cursor {
		t.Fatal("loop did not end after its one use")
	}
	if n.Faults().Fired(FaultListReposLoop) != 1 {
		t.Fatal("loop not counted")
	}
}

func TestFaultLongCursorStillPages(t *testing.T) {
	n := startNet(t, quietCfg(30))
	n.Faults().LongCursor(4096)
	all, cursors := listAll(t, n.RelayURL(), 4)
	if len(cursors) == 0 {
		t.Fatal("no cursor")
	}
	for _, c := range cursors {
		if len(c) != 4096 {
			t.Fatalf("cursor length %d, want 4096", len(c))
		}
	}
	want := 0
	for _, a := range n.World().Accounts() {
		if listed(a) {
			want++
		}
	}
	if len(all) != want {
		t.Fatalf("paged %d accounts of %d", len(all), want)
	}
}

func TestFaultFirehoseDisconnectEvery(t *testing.T) {
	n := startNet(t, quietCfg(20))
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 10)
	n.Faults().FirehoseDisconnectEvery(3)
	var got []int64
	cursor := "0"
	for conns := 0; conns < 4; conns++ {
		c := dialFirehose(t, n, cursor)
		got = append(got, c.seqs(3)...)
		_, err := c.next(5 * time.Second)
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseAbnormalClosure {
			t.Fatalf("after 3 frames: %v, want abnormal closure (no close frame)", err)
		}
		cursor = itoa(got[len(got)-1])
		if got[len(got)-1] == 9 {
			break
		}
	}
	if !reflect.DeepEqual(got, seqRange(1, 9)) {
		t.Fatalf("seqs over reconnects %v", got)
	}
	if n.Faults().Fired(FaultFirehoseDisconnect) != 3 {
		t.Fatalf("fired %d", n.Faults().Fired(FaultFirehoseDisconnect))
	}
}

// TestFaultRefuseFirehose: while RefuseFirehose holds, subscribeRepos is
// answered 503 (counted); once lifted, a subscription from the live tip
// gets the events emitted after it, none of those emitted while refused.
func TestFaultRefuseFirehose(t *testing.T) {
	n := startNet(t, quietCfg(20))
	n.Faults().RefuseFirehose(true)
	u := strings.Replace(n.RelayURL(), "http://", "ws://", 1) + "/xrpc/com.atproto.sync.subscribeRepos"
	_, resp, err := websocket.DefaultDialer.Dial(u, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("dial while refused: %v (response %v), want 503", err, resp)
	}
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 3)
	if got := n.Faults().Fired(FaultFirehoseRefused); got != 1 {
		t.Fatalf("fired %d, want 1", got)
	}
	n.Faults().RefuseFirehose(false)
	c := dialFirehose(t, n, "")
	emitTraffic(t, n, n.World().NewTraffic("basic", 4), 1)
	if got := c.seqs(1); !reflect.DeepEqual(got, []int64{4}) {
		t.Fatalf("seqs from the live tip after the refusal %v, want [4]", got)
	}
}

func TestFaultMalformedFramesPrecedeRealOnes(t *testing.T) {
	n := startNet(t, quietCfg(20))
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 5)
	n.Faults().MalformedFrames(1)
	c := dialFirehose(t, n, "0")
	for i := int64(1); i <= 5; i++ {
		f, err := c.next(5 * time.Second)
		if err == nil {
			if _, serr := f.seq(); serr == nil {
				t.Fatalf("frame before seq %d decoded cleanly", i)
			}
		}
		if got := c.seqs(1); got[0] != i {
			t.Fatalf("real frame seq %d, want %d", got[0], i)
		}
	}
	if n.Faults().Fired(FaultMalformedFrame) != 5 {
		t.Fatalf("fired %d", n.Faults().Fired(FaultMalformedFrame))
	}
}

func TestFaultDuplicateFrames(t *testing.T) {
	n := startNet(t, quietCfg(20))
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 4)
	n.Faults().DuplicateFrames(1)
	c := dialFirehose(t, n, "0")
	if got := c.seqs(8); !reflect.DeepEqual(got, []int64{1, 1, 2, 2, 3, 3, 4, 4}) {
		t.Fatalf("seqs %v", got)
	}
}

func TestFaultDropFramesLeavesHoles(t *testing.T) {
	n := startNet(t, quietCfg(20))
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 40)
	n.Faults().DropFrames(0.5)
	c := dialFirehose(t, n, "0")
	dropped := n.Faults() // fired is counted as frames are skipped
	var got []int64
	for {
		f, err := c.next(300 * time.Millisecond)
		if err != nil {
			break
		}
		s, _ := f.seq()
		got = append(got, s)
	}
	if len(got) == 0 || len(got) == 40 || int64(40-len(got)) != dropped.Fired(FaultDroppedFrame) {
		t.Fatalf("received %d of 40, fired %d", len(got), dropped.Fired(FaultDroppedFrame))
	}
}

func TestFaultSeqGapsKeepEveryEvent(t *testing.T) {
	n := startNet(t, quietCfg(20))
	n.Faults().SeqGaps(1)
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 5) // seqs 2,4,6,8,10
	c := dialFirehose(t, n, "0")
	if got := c.seqs(5); !reflect.DeepEqual(got, []int64{2, 4, 6, 8, 10}) {
		t.Fatalf("seqs %v", got)
	}
	c2 := dialFirehose(t, n, "5") // a skipped number: replay seq > 5
	if got := c2.seqs(3); !reflect.DeepEqual(got, []int64{6, 8, 10}) {
		t.Fatalf("cursor=5 seqs %v", got)
	}
	if st := n.Status(); st.Seq != 10 || st.Events != 5 {
		t.Fatalf("status %+v", st)
	}
}

func TestFaultProfiles(t *testing.T) {
	t.Run("flaky", func(t *testing.T) {
		cfg := quietCfg(400)
		cfg.Faults = ProfileFlaky
		cfg.Hosts = 4
		n := startNet(t, cfg)
		p := n.Faults().Pending()
		if len(p) < 20 || len(p) > 70 {
			t.Fatalf("flaky armed %d repos, want about a tenth of 400", len(p))
		}
		for _, s := range p {
			if !strings.HasSuffix(s, string(FaultGetRepoStatus)+" 5") {
				t.Fatalf("flaky pending %q", s)
			}
		}
		if n.Faults().firehose().disconnectEvery == 0 {
			t.Fatal("flaky firehose never drops")
		}
		// A flaky repo answers 503 five times, then its CAR.
		did := strings.Fields(p[0])[0]
		for i := 0; i < 5; i++ {
			if st, _, _ := getRepo(t, n.HostURLs()[mustAccount(t, n, did).Host], did); st != 503 && st != 429 {
				t.Fatalf("flaky request %d: %d", i, st)
			}
		}
	})
	t.Run("hostile", func(t *testing.T) {
		cfg := quietCfg(300)
		cfg.Faults = ProfileHostile
		n := startNet(t, cfg)
		joined := strings.Join(n.Faults().Pending(), "\n")
		for _, k := range []FaultKind{FaultGetRepoStatus, FaultTruncateCAR, FaultTruncateCARAtBlock, FaultDropBlock,
			FaultCorruptBlock, FaultHangBody, FaultSlowBody, FaultResetMidBody, FaultRedirect, FaultRateLimit, FaultListReposLoop, FaultHiddenDelete} {
			if !strings.Contains(joined, " "+string(k)+" ") {
				t.Fatalf("hostile does not arm %s:\n%s", k, joined)
			}
		}
		desc := n.Faults().describe()
		for _, k := range []FaultKind{FaultCommitForOtherDID, FaultInvalidRev, FaultInvalidRecordPaths, FaultForgedSignature} {
			if !strings.Contains(desc, string(k)) {
				t.Fatalf("hostile does not arm %s: %s", k, desc)
			}
		}
		fh := n.Faults().firehose()
		if fh.disconnectEvery == 0 || fh.malformed == 0 || fh.duplicate == 0 || n.Faults().seqGapRate() == 0 ||
			n.Faults().hostileCommitRate() == 0 || n.Faults().forgedCommitRate() == 0 || n.Faults().badHandleRate() == 0 ||
			n.Faults().longCursorSize() != 4096 {
			t.Fatalf("hostile firehose/cursor faults %+v", fh)
		}
	})
}

func mustAccount(t *testing.T, n *Network, did string) worldAccount {
	t.Helper()
	a, ok := n.World().Account(did)
	if !ok {
		t.Fatalf("unknown %s", did)
	}
	return a
}

// HostileCommits follows each #commit with a one-off invalid commit for the
// same account. A subscriber sees both kinds; each hostile commit is signed
// by the account's DID-document key, names the last valid state, and fails
// exactly its intended check; every valid commit still passes
// VerifyCommitMessage and chains from the previous valid one; an
// invalid-path commit is followed by a valid retry of its valid op; and both
// a strict fold (drop invalid commits) and a lenient one (drop only invalid
// ops) give the world's records.
func TestFaultHostileCommits(t *testing.T) {
	ctx := context.Background()
	n := startNet(t, quietCfg(20))
	type head struct {
		rev  string
		data cidT
	}
	last := map[string]head{}
	strict := map[string]map[string]cidT{}
	lenient := map[string]map[string]cidT{}
	for _, a := range n.World().Accounts() {
		last[a.DID] = head{a.Rev, a.Data}
		strict[a.DID] = n.World().Records(a.DID)
		lenient[a.DID] = n.World().Records(a.DID)
	}
	n.Faults().HostileCommits(1)
	const k = 60
	emitTraffic(t, n, n.World().NewTraffic("basic", 5), k)

	dir := directory(n)
	c := dialFirehose(t, n, "0")
	var valid, hostile, retries int
	reasons := map[string]int{}
	prev := ""
	var retry *comatproto.SyncSubscribeRepos_RepoOp // valid op an invalid-path commit left to retry
	total := n.Status().Events
	for i := int64(0); i < total; i++ {
		f, err := c.next(5 * time.Second)
		if err != nil {
			t.Fatalf("frame %d of %d: %v", i+1, total, err)
		}
		if retry != nil && f.t != "#commit" {
			t.Fatalf("frame %d: %s where the retry of %s was due", i+1, f.t, retry.Path)
		}
		if f.t == "#account" {
			m, _ := atdataMap(f.body)
			if s, _ := m["status"].(string); s == world.StatusDeleted {
				strict[m["did"].(string)] = map[string]cidT{}
				lenient[m["did"].(string)] = map[string]cidT{}
			}
		}
		if f.t != "#commit" {
			prev = ""
			continue
		}
		cm, err := f.commit()
		if err != nil {
			t.Fatal(err)
		}
		h := last[cm.Repo]
		if cm.Since == nil || *cm.Since != h.rev || cm.PrevData == nil || cidT(*cm.PrevData) != h.data {
			t.Fatalf("seq %d %s: since %v prevData %v, want the last valid %s %s", cm.Seq, cm.Repo, cm.Since, cm.PrevData, h.rev, h.data)
		}
		_, verr := repo.VerifyCommitMessage(ctx, cm)
		if verr == nil {
			if err := repo.VerifyCommitSignature(ctx, dir, cm); err != nil {
				t.Fatalf("seq %d: signature: %v", cm.Seq, err)
			}
			commit, _ := signedCommit(t, cm.Blocks)
			last[cm.Repo] = head{cm.Rev, commit.Data}
			for _, op := range cm.Ops {
				if op.Action == "delete" {
					delete(strict[cm.Repo], op.Path)
					delete(lenient[cm.Repo], op.Path)
				} else {
					strict[cm.Repo][op.Path] = cidT(*op.Cid)
					lenient[cm.Repo][op.Path] = cidT(*op.Cid)
				}
			}
			if retry != nil {
				if cm.Repo != prev || len(cm.Ops) != 1 || cm.Ops[0].Path != retry.Path || cidT(*cm.Ops[0].Cid) != cidT(*retry.Cid) {
					t.Fatalf("seq %d: %+v is not the retry of %s", cm.Seq, cm.Ops, retry.Path)
				}
				retry = nil
				retries++
				prev = ""
				continue
			}
			valid++
			prev = cm.Repo
			continue
		}
		// A hostile commit: right after a valid commit of the same account.
		hostile++
		if prev != cm.Repo {
			t.Fatalf("seq %d: hostile commit for %s does not follow a commit of it (previous %q)", cm.Seq, cm.Repo, prev)
		}
		commit, _ := signedCommit(t, cm.Blocks)
		if err := commit.VerifySignature(didDocKey(t, n, cm.Repo)); err != nil {
			t.Fatalf("seq %d: hostile commit not signed by the DID document's key: %v", cm.Seq, err)
		}
		switch {
		case cm.Rev == InvalidRevValue && commit.Rev == InvalidRevValue && strings.Contains(verr.Error(), "TID"):
			reasons[world.ReasonInvalidRev]++
			prev = ""
		case strings.Contains(verr.Error(), "invalid repo path"):
			if _, err := syntax.ParseTID(cm.Rev); err != nil || cm.Rev <= h.rev {
				t.Fatalf("seq %d: invalid-path commit rev %q (%v) after %s", cm.Seq, cm.Rev, err, h.rev)
			}
			bad := 0
			for _, op := range cm.Ops {
				if _, _, err := syntax.ParseRepoPath(op.Path); err != nil {
					bad++
					continue
				}
				retry = op
				lenient[cm.Repo][op.Path] = cidT(*op.Cid)
			}
			if bad != 1 || len(cm.Ops) != 2 {
				t.Fatalf("seq %d: %d invalid of %d ops", cm.Seq, bad, len(cm.Ops))
			}
			reasons[world.ReasonInvalidPath]++
		default:
			t.Fatalf("seq %d: hostile commit failed for another reason: %v", cm.Seq, verr)
		}
	}
	if retry != nil {
		t.Fatalf("no retry of %s", retry.Path)
	}
	if valid == 0 || hostile != valid || retries != reasons[world.ReasonInvalidPath] ||
		reasons[world.ReasonInvalidRev] == 0 || reasons[world.ReasonInvalidPath] == 0 {
		t.Fatalf("%d valid, %d hostile commits %v, %d retries", valid, hostile, reasons, retries)
	}
	fired := n.Faults().Fired(FaultInvalidRevCommit) + n.Faults().Fired(FaultInvalidPathCommit)
	if fired != int64(hostile) || n.Faults().Fired(FaultInvalidRevCommit) != int64(reasons[world.ReasonInvalidRev]) {
		t.Fatalf("fired %v, seen %v", n.Faults().FiredAll(), reasons)
	}
	for did := range strict {
		want := n.World().Records(did)
		if !reflect.DeepEqual(strict[did], want) {
			t.Fatalf("%s: strict fold %d records, world %d", did, len(strict[did]), len(want))
		}
		if !reflect.DeepEqual(lenient[did], want) {
			t.Fatalf("%s: lenient fold %d records, world %d", did, len(lenient[did]), len(want))
		}
	}
	evs, err := n.Events()
	if err != nil {
		t.Fatal(err)
	}
	marked := 0
	for _, e := range evs {
		if e.Invalid != "" {
			marked++
			if e.Commit == nil {
				t.Fatalf("seq %d: Invalid %q on a %s", e.Seq, e.Invalid, e.Type())
			}
		}
	}
	if marked != hostile || len(evs) != k+hostile+retries {
		t.Fatalf("Events: %d marked invalid of %d, want %d of %d", marked, len(evs), hostile, k+hostile+retries)
	}
}

// Under the hostile profile with full live traffic (resets, status changes,
// deletions, seq gaps), hostile commits keep coming without stopping the
// traffic generator, and exactly the events marked Invalid fail indigo's
// commit check.
func TestFaultHostileProfileTraffic(t *testing.T) {
	cfg := Config{Accounts: 40, RecordsMean: 8, Hosts: 2, Seed: 9, Rate: 5000, Events: 1500, Faults: ProfileHostile}
	n := startNet(t, cfg)
	n.Faults().HostileCommits(0.05) // the profile's rates, raised so a short run sees every kind
	n.Faults().ForgedCommits(0.05)
	n.Faults().BadHandles(0.5)
	deadline := time.Now().Add(20 * time.Second)
	for !n.Status().Done {
		if time.Now().After(deadline) {
			t.Fatalf("traffic not done: %+v", n.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := n.TrafficErr(); err != nil {
		t.Fatalf("traffic stopped: %v", err)
	}
	if n.Faults().Fired(FaultInvalidRevCommit) == 0 || n.Faults().Fired(FaultInvalidPathCommit) == 0 ||
		n.Faults().Fired(FaultForgedCommit) == 0 || n.Faults().Fired(FaultNonInverting) == 0 ||
		n.Faults().Fired(FaultHandleNotResolving) == 0 || n.Faults().Fired(FaultHandleUndeclared) == 0 {
		t.Fatalf("fired %v", n.Faults().FiredAll())
	}
	evs, err := n.Events()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n.Faults().Clear() // the profile's DID-document faults would fail genuine commits here
	dir := directory(n)
	for _, e := range evs {
		if e.Commit == nil {
			continue
		}
		_, err := repo.VerifyCommitMessage(ctx, e.Commit)
		if err == nil {
			err = repo.VerifyCommitSignature(ctx, dir, e.Commit)
		}
		if (err != nil) != (e.Invalid != "") {
			t.Fatalf("seq %d (invalid %q): VerifyCommitMessage/Signature %v", e.Seq, e.Invalid, err)
		}
	}
}

// RewindSequence: the relay restored from a backup 4 events old drops its
// connections, its history ends at seq 6, its next events are new ones
// under seqs 7 and 8, and a cursor above its head (the old 10) is served
// from the live tip with no FutureCursor, until Clear.
func TestFaultRewindSequence(t *testing.T) {
	n := startNet(t, quietCfg(20))
	emitTraffic(t, n, n.World().NewTraffic("basic", 3), 10)
	old := dialFirehose(t, n, "0")
	if got := old.seqs(10); !reflect.DeepEqual(got, seqRange(1, 10)) {
		t.Fatalf("seqs %v", got)
	}
	sent := n.log.snapshot()
	n.Faults().RewindSequence(4)
	var ce *websocket.CloseError
	if _, err := old.next(5 * time.Second); !errors.As(err, &ce) || ce.Code != websocket.CloseAbnormalClosure {
		t.Fatalf("the connection at the rewind: %v, want abnormal closure (no close frame)", err)
	}
	if st := n.Status(); st.Seq != 6 || st.Events != 10 {
		t.Fatalf("status after the rewind %+v, want seq 6 of 10 events", st)
	}
	resumed := dialFirehose(t, n, "10")
	emitTraffic(t, n, n.World().NewTraffic("basic", 4), 2)
	if got := resumed.seqs(2); !reflect.DeepEqual(got, []int64{7, 8}) {
		t.Fatalf("cursor=10 after the rewind: seqs %v, want the new events under 7 and 8", got)
	}
	full := dialFirehose(t, n, "0")
	if got := full.seqs(8); !reflect.DeepEqual(got, seqRange(1, 8)) {
		t.Fatalf("cursor=0 after the rewind: seqs %v", got)
	}
	now := n.log.snapshot()
	for i := range now {
		if same := bytes.Equal(now[i].data, sent[i].data); same != (i < 6) {
			t.Fatalf("seq %d: the frame sent before the rewind again: %v, want %v", now[i].seq, same, i < 6)
		}
	}
	f := n.Faults()
	if f.Fired(FaultRewoundSequence) != 1 || f.Fired(FaultSilentFutureCursor) != 1 {
		t.Fatalf("fired rewound %d, silent future cursor %d, want 1 and 1", f.Fired(FaultRewoundSequence), f.Fired(FaultSilentFutureCursor))
	}
	if d := f.describe(); !strings.Contains(d, "rewound_sequence=4") {
		t.Fatalf("describe %q, want rewound_sequence=4", d)
	}
	f.Clear()
	c := dialFirehose(t, n, "10")
	if fr, err := c.next(5 * time.Second); err != nil || fr.op != -1 {
		t.Fatalf("cursor=10 after Clear: %+v %v, want the FutureCursor error frame", fr, err)
	} else if name, _ := fr.errorName(); name != errFutureCursor {
		t.Fatalf("cursor=10 after Clear: error %q, want FutureCursor", name)
	}
}
