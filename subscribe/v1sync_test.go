package subscribe

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/check"
	"github.com/backstream/backstream/upstream"
)

// v1Frame is what a Jetstream v1 client reads of a commit.
type v1Frame struct {
	DID    string `json:"did"`
	Cursor uint64 `json:"cursor"`
	Kind   string `json:"kind"`
	Commit *struct {
		Operation  string `json:"operation"`
		Collection string `json:"collection"`
		RKey       string `json:"rkey"`
		CID        string `json:"cid"`
	} `json:"commit"`
}

// v1Fold reads frames up to and including seq `to`, folds every commit of
// did as a v1 client does (create/update set, delete removes) and returns
// the fold, the frames of did with a cursor above `after`, and the kinds
// seen.
func v1Fold(t *testing.T, c *websocket.Conn, did string, after, to uint64, fold map[string]string) (sent int, kinds map[string]int) {
	t.Helper()
	kinds = map[string]int{}
	for {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		var f v1Frame
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("bad JSON %q: %v", b, err)
		}
		kinds[f.Kind]++
		if f.DID == did {
			if f.Cursor > after {
				sent++
			}
			if f.Commit != nil {
				p := f.Commit.Collection + "/" + f.Commit.RKey
				switch f.Commit.Operation {
				case "create", "update":
					fold[p] = f.Commit.CID
				case "delete":
					delete(fold, p)
				}
			}
		}
		if f.Cursor >= to {
			return sent, kinds
		}
	}
}

// TestReplacementFoldsForV1: a repo reset that changed three records of a
// large repo (one updated, one created, one deleted while the archive heard
// nothing) is archived as its sync row and three rows, and a v1 subscriber
// (no includeSync) that folds the stream ends with exactly the network's
// records, having been sent three frames for the reset and never a "sync"
// frame; an includeSync subscriber gets the sync marker. A replacement of an
// account whose repo did not change (a reactivation) archives its sync row
// alone and sends a v1 subscriber nothing.
func TestReplacementFoldsForV1(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	net, err := oracle.Start(ctx, oracle.Config{Accounts: 4, RecordsMean: 300, Hosts: 1, Seed: 5, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	client, err := upstream.New(net.RelayURL(), upstream.Options{ScratchDir: t.TempDir(), LoopbackHosts: net.LoopbackHosts()})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	jobs, err := backfill.NewRunner(backfill.Options{Source: client, Writer: h.w, Current: h.store, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	w := net.World()
	var did string
	for _, a := range w.Accounts() {
		if a.Active && a.Records >= 100 && (did == "" || a.Records > len(w.Records(did))) {
			did = a.DID
		}
	}
	if did == "" {
		t.Fatal("no active account with 100 records")
	}
	run := func(replace bool) backfill.Result {
		t.Helper()
		res, err := jobs.Run(ctx, backfill.Request{DID: did, Replace: replace, Active: true})
		if err != nil || res.Status != archive.StatusComplete {
			t.Fatalf("job (replace %v): %v %v", replace, res.Status, err)
		}
		return res
	}
	run(false)
	n := len(w.Records(did))

	// The network changes three records; the archive hears of none.
	paths := make([]string, 0, n)
	for p := range w.Records(did) {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	post := func(text string) map[string]any {
		return map[string]any{"$type": "app.bsky.feed.post", "text": text, "createdAt": "2024-01-01T00:00:00Z"}
	}
	if _, err := w.UpdateRecord(did, paths[0], post("changed")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.CreateRecord(did, "app.bsky.feed.post", "", post("new")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.DeleteRecord(did, paths[1]); err != nil {
		t.Fatal(err)
	}
	before, err := h.store.Tip()
	if err != nil {
		t.Fatal(err)
	}
	run(true)
	tip, err := h.store.Tip()
	if err != nil {
		t.Fatal(err)
	}
	rows := kindsBetween(t, h.store, before, tip)
	if want := map[archive.Kind]int{archive.KindSync: 1, archive.KindCreate: 1, archive.KindUpdate: 1, archive.KindDelete: 1}; fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("a reset that changed 3 of %d records archived %v, want %v", n, rows, want)
	}
	t.Logf("reset of a %d-record repo that changed 3: %d rows archived (was %d: the sync row and every record)", n, tip-before, n+1)

	truth := map[string]string{}
	for p, c := range w.Records(did) {
		truth[p] = c.String()
	}
	c := h.dial("?cursor=0", nil)
	defer c.Close()
	fold := map[string]string{}
	sent, kinds := v1Fold(t, c, did, before, tip, fold)
	if kinds["sync"] != 0 {
		t.Fatalf("a v1 subscriber got %d sync frames", kinds["sync"])
	}
	if sent != 3 {
		t.Fatalf("a v1 subscriber was sent %d frames for a reset that changed 3 records", sent)
	}
	if fmt.Sprint(fold) != fmt.Sprint(truth) {
		t.Fatalf("the v1 fold (%d records) differs from the network's (%d)", len(fold), len(truth))
	}

	withSync := h.dial(fmt.Sprintf("?cursor=%d&includeSync=true", before+1), nil)
	defer withSync.Close()
	ev, b, err := readEvent(t, withSync, 10*time.Second)
	if err != nil || ev.Kind != "sync" || ev.Cursor != before+1 {
		t.Fatalf("includeSync subscriber: %s %v, want the sync marker at seq %d", b, err, before+1)
	}

	// A reactivation of an account whose repo did not change: the sync row
	// alone, nothing sent to the v1 subscriber. The sentinel row of
	// another account says when everything before it was sent.
	run(true)
	again, err := h.store.Tip()
	if err != nil {
		t.Fatal(err)
	}
	if rows := kindsBetween(t, h.store, tip, again); fmt.Sprint(rows) != fmt.Sprint(map[archive.Kind]int{archive.KindSync: 1}) {
		t.Fatalf("an unchanged replacement archived %v, want its sync row alone", rows)
	}
	_, sentinel := h.commit(archive.Event{Kind: archive.KindIdentity, DID: didOf(9), Handle: "sentinel.test", Source: archive.SourceLive})
	if sent, _ := v1Fold(t, c, did, tip, sentinel, fold); sent != 0 {
		t.Fatalf("an unchanged replacement sent a v1 subscriber %d frames", sent)
	}
	if fmt.Sprint(fold) != fmt.Sprint(truth) {
		t.Fatal("the v1 fold changed after an unchanged replacement")
	}

	// Compaction keeps what the replacements left unchanged: a sync row
	// supersedes nothing, their rows supersede what they change.
	// (Read from ev/, as a client replaying after a restart reads it: the
	// live log still holds what the pass removed.)
	replayFold := func(what string) {
		t.Helper()
		res, err := h.store.Compact(ctx, h.w, archive.CompactOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		f, _, err := check.Archive(h.store)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(f[did]) != fmt.Sprint(truth) {
			t.Fatalf("%s (%d rows removed): the archive folds to %d records, the network has %d", what, res.Rows, len(f[did]), len(truth))
		}
	}
	replayFold("after compaction")
	// A takedown purges the account's records (compaction removes them):
	// the replacement when it comes back creates every record again.
	_, down := h.commit(archive.Event{Kind: archive.KindAccount, DID: did, Status: "takendown", Source: archive.SourceLive})
	run(true)
	back, err := h.store.Tip()
	if err != nil {
		t.Fatal(err)
	}
	if rows := kindsBetween(t, h.store, down, back); fmt.Sprint(rows) != fmt.Sprint(map[archive.Kind]int{archive.KindCreate: len(truth), archive.KindSync: 1}) {
		t.Fatalf("the replacement after a takedown archived %v, want its sync row and %d creates", rows, len(truth))
	}
	replayFold("after a takedown, its replacement and compaction")
}

// kindsBetween counts the archived rows with seq in (after, to] by kind.
func kindsBetween(t *testing.T, s *archive.Store, after, to uint64) map[archive.Kind]int {
	t.Helper()
	it, err := s.Events(after + 1)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[archive.Kind]int{}
	for it.Next() && it.Event().Seq <= to {
		out[it.Event().Kind]++
	}
	if err := it.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
