package subscribe

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
)

// matrixStream: three accounts × (commits in five collections, identity,
// account, sync), ending with one account row per account (so every filter
// that names an account has a last event to wait for).
func matrixStream(t *testing.T, rev int) []archive.Event {
	recs := testRecords(t)
	var evs []archive.Event
	for round := 0; round < 2; round++ {
		for d := 0; d < 3; d++ {
			did := didOf(d)
			for _, r := range recs {
				rev++
				evs = append(evs, archive.Event{Kind: archive.KindCreate, DID: did, Collection: r.coll, RKey: fmt.Sprintf("3k%011d", rev),
					Rev: fmt.Sprintf("3l%011d", rev), Record: r.cbor, CID: r.cid, Source: archive.SourceLive})
				rev++
				evs = append(evs, archive.Event{Kind: archive.KindDelete, DID: did, Collection: r.coll, RKey: fmt.Sprintf("3k%011d", rev),
					Rev: fmt.Sprintf("3l%011d", rev), Source: archive.SourceLive})
			}
			rev++
			evs = append(evs,
				archive.Event{Kind: archive.KindIdentity, DID: did, Handle: fmt.Sprintf("u%d.test", d), Source: archive.SourceLive},
				// A replacement's sync row (an upstream #sync archives none).
				archive.Event{Kind: archive.KindSync, DID: did, Rev: fmt.Sprintf("3l%011d", rev), Source: archive.SourceRetry},
			)
		}
	}
	for d := 0; d < 3; d++ {
		evs = append(evs, archive.Event{Kind: archive.KindAccount, DID: didOf(d), Active: true, Source: archive.SourceLive})
	}
	return evs
}

type filterCase struct {
	name        string
	collections []string
	dids        []string
	sync        bool // includeSync=true
}

// want is the test's own statement of D4, independent of filter.admit.
func (fc filterCase) want(ev *archive.Event) bool {
	if ev.Kind == archive.KindSync && !fc.sync {
		return false // v1 never sends the kind: opt-in only
	}
	if len(fc.dids) > 0 {
		found := false
		for _, d := range fc.dids {
			found = found || d == ev.DID
		}
		if !found {
			return false
		}
	}
	if !ev.Kind.IsCommit() || len(fc.collections) == 0 {
		return true
	}
	for _, c := range fc.collections {
		if p, ok := strings.CutSuffix(c, "*"); ok {
			if strings.HasPrefix(ev.Collection, p) {
				return true
			}
		} else if c == ev.Collection {
			return true
		}
	}
	return false
}

func (fc filterCase) query() url.Values {
	q := url.Values{}
	for _, c := range fc.collections {
		q.Add("wantedCollections", c)
	}
	for _, d := range fc.dids {
		q.Add("wantedDids", d)
	}
	if fc.sync {
		q.Set("includeSync", "true")
	}
	return q
}

func filterCases() []filterCase {
	manyDIDs := []string{didOf(1)}
	for i := 1000; len(manyDIDs) < MaxWantedDIDs; i++ {
		manyDIDs = append(manyDIDs, didOf(i))
	}
	return []filterCase{
		{name: "none"},
		{name: "exact post", collections: []string{"app.bsky.feed.post"}},
		{name: "exact two", collections: []string{"app.bsky.feed.like", "com.example.thing"}},
		{name: "prefix feed", collections: []string{"app.bsky.feed.*"}},
		{name: "prefix app", collections: []string{"app.*"}},
		{name: "prefix and exact", collections: []string{"app.bsky.graph.*", "com.example.thing"}},
		{name: "no such collection", collections: []string{"org.nothing.here"}},
		{name: "prefix not a segment", collections: []string{"app.bsky.fe.*"}},
		{name: "did", dids: []string{didOf(1)}},
		{name: "two dids", dids: []string{didOf(0), didOf(2)}},
		{name: "did and prefix", collections: []string{"app.bsky.feed.*"}, dids: []string{didOf(2)}},
		{name: "did and nothing", collections: []string{"org.nothing.here"}, dids: []string{didOf(0)}},
		{name: "10000 dids", dids: manyDIDs},
		{name: "sync", sync: true},
		{name: "sync did and prefix", collections: []string{"app.bsky.feed.*"}, dids: []string{didOf(2)}, sync: true},
		{name: "sync no such collection", collections: []string{"org.nothing.here"}, sync: true},
	}
}

// TestFilterMatrix (D4): every filter combination, from the archive and
// live, gets exactly the events the filter admits; account, identity and
// sync events reach every subscriber whatever its collections, gated by
// wantedDids; sync events only with includeSync=true, so a v1 client never
// sees the kind.
func TestFilterMatrix(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	stream := matrixStream(t, 0)
	first, last := h.commit(stream...)
	for i := range stream {
		stream[i].Seq = first + uint64(i)
	}
	// Every case of a group reads at once, so that a broken filter costs
	// one read timeout, not one per case.
	checkAll := func(t *testing.T, group string, cases []filterCase, conns []*websocket.Conn, evs []archive.Event) {
		errs := make([]error, len(cases))
		var wg sync.WaitGroup
		for i := range cases {
			wg.Go(func() { errs[i] = readFiltered(cases[i], conns[i], evs) })
		}
		wg.Wait()
		for i, fc := range cases {
			t.Run(group+"/"+fc.name, func(t *testing.T) {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
			})
		}
	}
	cases := filterCases()
	var conns []*websocket.Conn
	for _, fc := range cases {
		q := fc.query()
		q.Set("cursor", "0")
		conns = append(conns, h.dial("?"+q.Encode(), nil))
	}
	checkAll(t, "replay", cases, conns, stream)
	// Live: subscribe first, then commit the stream again. Each start (the
	// tip + 1) is resolved before the upgrade is answered, so once dialed
	// no subscriber can miss the commit.
	conns = conns[:0]
	for _, fc := range cases {
		conns = append(conns, h.dial("?"+fc.query().Encode(), nil))
	}
	again := matrixStream(t, 1000)
	f2, _ := h.commit(again...)
	for i := range again {
		again[i].Seq = f2 + uint64(i)
	}
	if f2 != last+1 {
		t.Fatalf("seqs %d after %d", f2, last)
	}
	checkAll(t, "live", cases, conns, again)
}

// readFiltered reads from c the events of evs that fc admits, in order, and
// then makes sure nothing else follows; it closes c.
func readFiltered(fc filterCase, c *websocket.Conn, evs []archive.Event) error {
	defer c.Close()
	var want []uint64
	for i := range evs {
		if fc.want(&evs[i]) {
			want = append(want, evs[i].Seq)
		}
	}
	got := []uint64{}
	for len(got) < len(want) {
		ev, _, err := readWire(c, 10*time.Second)
		if err != nil {
			return fmt.Errorf("after %v: %w", got, err)
		}
		got = append(got, ev.Cursor)
	}
	// Nothing else may follow: a marker row for an account outside every
	// filter would be filtered too, so wait briefly for strays.
	if _, b, err := readWire(c, 80*time.Millisecond); err == nil {
		return fmt.Errorf("unexpected extra event %s", b)
	}
	// want is in seq order: got equal to it is also strictly increasing.
	if fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("got  %v\nwant %v", got, want)
	}
	return nil
}

// TestOptionsUpdate: requireHello holds the stream until the first
// options_update, whose filters apply; a later update replaces them; a
// malformed one closes the connection with a reason.
func TestOptionsUpdate(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	stream := matrixStream(t, 0)
	first, _ := h.commit(stream...)
	for i := range stream {
		stream[i].Seq = first + uint64(i)
	}
	c := h.dial("?cursor=0&requireHello=true&wantedCollections=com.example.thing", nil)
	defer c.Close()
	if _, b, err := readEvent(t, c, 200*time.Millisecond); err == nil {
		t.Fatalf("event %s before the hello", b)
	}
	// gorilla's read deadline error is sticky: use a fresh connection for
	// the rest, with the hello sent right away.
	c.Close()
	c = h.dial("?cursor=0&requireHello=true&wantedCollections=com.example.thing", nil)
	fc := filterCase{collections: []string{"app.bsky.graph.*"}, dids: []string{didOf(1)}}
	if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{"wantedCollections":["app.bsky.graph.*"],"wantedDids":["`+didOf(1)+`"],"maxMessageSizeBytes":0}}`)); err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for i := range stream {
		if fc.want(&stream[i]) {
			want = append(want, stream[i].Seq)
		}
	}
	var got []uint64
	for len(got) < len(want) {
		ev, _, err := readEvent(t, c, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Cursor)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after hello: got %v, want %v", got, want)
	}
	// A message type we do not know is ignored; an update replaces the
	// filter. The server reads a client's frames in order and answers a
	// ping sent after the update only once it has read the update, so the
	// pong says the new filter is in place before anything is committed.
	ponged := make(chan struct{})
	c.SetPongHandler(func(string) error { close(ponged); return nil })
	type read struct {
		b   []byte
		err error
	}
	next := make(chan read, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := c.ReadMessage()
		next <- read{b, err}
	}()
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"something_else","payload":{}}`))
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{"wantedDids":["`+didOf(2)+`"]}}`))
	_ = c.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
	select {
	case <-ponged:
	case <-time.After(10 * time.Second):
		t.Fatal("no pong after the second update")
	}
	evs := []archive.Event{
		{Kind: archive.KindIdentity, DID: didOf(1), Source: archive.SourceLive},
		{Kind: archive.KindSync, DID: didOf(2), Rev: "3l00000009000", Source: archive.SourceRetry}, // a replacement's row
		{Kind: archive.KindIdentity, DID: didOf(2), Source: archive.SourceLive},
	}
	_, l := h.commit(evs...)
	r := <-next
	var ev wireEvent
	if r.err == nil {
		r.err = jsonUnmarshal(r.b, &ev)
	}
	if r.err != nil || ev.Cursor != l || ev.DID != didOf(2) {
		t.Fatalf("after the second update (no includeSync: the sync row is skipped): %+v %v, want seq %d of %s", ev, r.err, l, didOf(2))
	}
	// includeSync in an update opts in.
	ponged = make(chan struct{})
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := c.ReadMessage()
		next <- read{b, err}
	}()
	_ = c.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{"wantedDids":["`+didOf(2)+`"],"includeSync":true}}`))
	_ = c.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second))
	select {
	case <-ponged:
	case <-time.After(10 * time.Second):
		t.Fatal("no pong after the includeSync update")
	}
	_, l = h.commit(archive.Event{Kind: archive.KindSync, DID: didOf(2), Rev: "3l00000009001", Source: archive.SourceRetry})
	r = <-next
	ev = wireEvent{}
	if r.err == nil {
		r.err = jsonUnmarshal(r.b, &ev)
	}
	if r.err != nil || ev.Cursor != l || ev.Kind != "sync" {
		t.Fatalf("after the includeSync update: %+v %v, want the sync row at seq %d", ev, r.err, l)
	}
	// Malformed updates close with 1008 and a reason.
	for _, bad := range []string{
		`not json`,
		`{"type":"options_update"}`,
		`{"type":"options_update","payload":{"wantedCollections":["bad..nsid"]}}`,
		`{"type":"options_update","payload":{"wantedDids":["nope"]}}`,
		`{"type":"options_update","payload":{"maxMessageSizeBytes":"big"}}`,
		`{"type":"options_update","payload":{"wantedDids":"did:plc:notalist"}}`,
		`{"type":"options_update","payload":{"includeSync":"yes"}}`,
	} {
		c := h.dial("", nil)
		if err := c.WriteMessage(websocket.TextMessage, []byte(bad)); err != nil {
			t.Fatal(err)
		}
		_, _, err := readEvent(t, c, 5*time.Second)
		var ce *websocket.CloseError
		if !asCloseError(err, &ce) || ce.Code != closePolicy || ce.Text == "" {
			t.Errorf("%s: %v, want close 1008 with a reason", bad, err)
		}
		c.Close()
	}
	promtest.Eventually(t, 5*time.Second, "seven bad_options disconnects", func() bool {
		return metricValue(h.m.disconnects.WithLabelValues(ReasonBadOptions)) >= 7
	})
	if got := metricValue(h.m.disconnects.WithLabelValues(ReasonBadOptions)); got != 7 {
		t.Errorf("bad_options disconnects %v, want 7", got)
	}
}

// TestMaxMessageSize: events larger than the subscriber's limit are
// skipped (both spellings), others pass.
func TestMaxMessageSize(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	evs := genEvents(t, 0, 40, 3)
	first, last := h.commit(evs...)
	c := h.dial("?cursor=0", nil)
	var sizes []int
	for seq := first; seq <= last; seq++ {
		_, b, err := readEvent(t, c, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, len(b))
	}
	c.Close()
	limit := 300
	var want []uint64
	for i, n := range sizes {
		if n <= limit {
			want = append(want, first+uint64(i))
		}
	}
	if len(want) == 0 || len(want) == len(sizes) {
		t.Fatalf("limit %d does not split sizes %v", limit, sizes)
	}
	for _, p := range []string{"maxMessageSizeBytes", "maxSize"} {
		c := h.dial(fmt.Sprintf("?cursor=0&%s=%d", p, limit), nil)
		var got []uint64
		for len(got) < len(want) {
			ev, _, err := readEvent(t, c, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ev.Cursor)
		}
		c.Close()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: got %v, want %v", p, got, want)
		}
	}
	// Jetstream's reading: a negative, malformed or overflowing size is 0,
	// no limit — the connection is accepted and gets every event; in an
	// options_update a negative size is 0 too.
	for _, q := range []string{"maxMessageSizeBytes=-1", "maxMessageSizeBytes=big", "maxMessageSizeBytes=99999999999999999999", "maxSize=-7",
		"maxMessageSizeBytes=300&requireHello=true"} {
		c := h.dial("?cursor=0&"+q, nil)
		if strings.Contains(q, "requireHello") {
			if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{"maxMessageSizeBytes":-5}}`)); err != nil {
				t.Fatal(err)
			}
		}
		got := readUntil(t, c, last)
		c.Close()
		if err := checkContiguous(got, first, last); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
