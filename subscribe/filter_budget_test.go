package subscribe

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
)

// didsQuery is a wantedDids query of n DIDs, didOf(0) to didOf(n-1).
func didsQuery(n int) string {
	var b strings.Builder
	for i := range n {
		if i == 0 {
			b.WriteString("?")
		} else {
			b.WriteString("&")
		}
		b.WriteString("wantedDids=" + didOf(i))
	}
	return b.String()
}

// didsUpdate is an options_update asking for n DIDs, didOf(0) to didOf(n-1).
func didsUpdate(n int) []byte {
	dids := make([]string, n)
	for i := range dids {
		dids[i] = `"` + didOf(i) + `"`
	}
	return []byte(`{"type":"options_update","payload":{"wantedDids":[` + strings.Join(dids, ",") + `]}}`)
}

// updater sends options_updates on a connection and waits until the
// server has read each: it reads a client's frames in order, so its pong
// to a ping sent after an update says the update was handled. It reads the
// connection until it ends, and says how (ended).
type updater struct {
	t     *testing.T
	c     *websocket.Conn
	pongs chan struct{}
	ended chan error
}

func newUpdater(t *testing.T, c *websocket.Conn) *updater {
	u := &updater{t: t, c: c, pongs: make(chan struct{}, 1), ended: make(chan error, 1)}
	c.SetPongHandler(func(string) error { u.pongs <- struct{}{}; return nil })
	go func() { // pongs are handled while reading
		for {
			_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
			if _, _, err := c.ReadMessage(); err != nil {
				u.ended <- err
				return
			}
		}
	}()
	return u
}

// send sends msg, then a ping, and returns once the pong came back.
func (u *updater) send(msg []byte) {
	u.t.Helper()
	if err := u.c.WriteMessage(websocket.TextMessage, msg); err != nil {
		u.t.Fatal(err)
	}
	if err := u.c.WriteControl(websocket.PingMessage, nil, time.Now().Add(time.Second)); err != nil {
		u.t.Fatal(err)
	}
	select {
	case <-u.pongs:
	case err := <-u.ended:
		u.t.Fatalf("no pong after the update: %v", err)
	case <-time.After(10 * time.Second):
		u.t.Fatal("no pong within 10s of the update")
	}
}

// TestFilterReservedFromBudget: a subscriber's filter is reserved from the
// buffer budget with its output buffers, at the upgrade: a budget that
// admits 8 subscribers without a filter admits fewer asking for 1,000
// DIDs each, at most as many as fit when each reserves at least the DIDs'
// own bytes; beyond, 503 BufferBudgetExhausted. When they leave, nothing
// stays reserved.
func TestFilterReservedFromBudget(t *testing.T) {
	const nDIDs = 1000
	res := bufferReservation(DefaultFlushBytes)
	budget := 8 * res
	h := newHarness(t, harnessOpts{cfg: Config{BufferBudget: budget}})
	q := didsQuery(nDIDs)
	least := res + int64(nDIDs*len(didOf(0))) // the buffers and the DIDs' bytes alone
	var conns []*websocket.Conn
	var refused *http.Response
	for len(conns) <= 8 {
		c, resp, err := websocket.DefaultDialer.Dial(h.wsURL(q), nil)
		if err != nil {
			if resp == nil {
				t.Fatalf("dial: %v", err)
			}
			refused = resp
			break
		}
		conns = append(conns, c)
	}
	_, _, reserved := h.admissionHeld()
	t.Logf("a budget of %d bytes (8 subscribers without a filter) admitted %d subscribers of %d DIDs; reserved %d bytes", budget, len(conns), nDIDs, reserved)
	if n := int64(len(conns)); n == 0 || n*least > budget {
		t.Errorf("a budget of %d bytes admitted %d subscribers of %d DIDs, want 1 to %d (each reserving at least %d bytes)", budget, n, nDIDs, budget/least, least)
	}
	if refused == nil || refused.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("the next subscriber: %v, want 503", refused)
	}
	if got := metricValue(h.m.refused.WithLabelValues(refusedBufferBudget)); got != 1 {
		t.Errorf("refused{buffer_budget} %v, want 1", got)
	}
	if got := metricValue(h.m.reserved); got != float64(reserved) {
		t.Errorf("gauge of reserved bytes %v, the admission holds %d", got, reserved)
	}
	for _, c := range conns {
		c.Close()
	}
	promtest.Eventually(t, 10*time.Second, "every subscriber to leave", func() bool {
		total, _, _ := h.admissionHeld()
		return total == 0
	})
	if _, _, reserved := h.admissionHeld(); reserved != 0 {
		t.Errorf("after every subscriber left, %d bytes reserved, want 0", reserved)
	}
}

// TestOptionsUpdateReservesFilter: an options_update reserves the new
// filter from the budget and gives back the old one's; one whose filter
// would take the budget past its bound closes the connection (1008, with
// the reason), counted as buffer_budget; the subscriber's reservation goes
// with it.
func TestOptionsUpdateReservesFilter(t *testing.T) {
	res := bufferReservation(DefaultFlushBytes)
	h := newHarness(t, harnessOpts{cfg: Config{BufferBudget: 3 * res}})
	c := h.dial("", nil)
	defer c.Close()
	if _, _, r := h.admissionHeld(); r != res {
		t.Fatalf("a subscriber without a filter reserves %d bytes, want %d", r, res)
	}
	u := newUpdater(t, c)
	u.send(didsUpdate(1000))
	_, _, grown := h.admissionHeld()
	if least := res + 1000*int64(len(didOf(0))); grown < least {
		t.Fatalf("after an update to 1000 DIDs the subscriber reserves %d bytes, want at least %d", grown, least)
	}
	u.send([]byte(`{"type":"options_update","payload":{}}`))
	if _, _, r := h.admissionHeld(); r != res {
		t.Fatalf("after an update back to no filter the subscriber reserves %d bytes, want %d", r, res)
	}
	u.send(didsUpdate(1000))
	if _, _, r := h.admissionHeld(); r != grown {
		t.Fatalf("after the same 1000 DIDs again the subscriber reserves %d bytes, want %d", r, grown)
	}
	// 10,000 DIDs do not fit in what is left of 3 reservations.
	if err := c.WriteMessage(websocket.TextMessage, didsUpdate(MaxWantedDIDs)); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-u.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection still open 10s after an update past the budget")
	}
	var ce *websocket.CloseError
	if !asCloseError(err, &ce) || ce.Code != closePolicy || !strings.Contains(ce.Text, "budget") {
		t.Fatalf("an update past the budget: %v, want close 1008 naming the budget", err)
	}
	promtest.Eventually(t, 5*time.Second, "a buffer_budget disconnect", func() bool {
		return metricValue(h.m.disconnects.WithLabelValues(ReasonBufferBudget)) == 1
	})
	promtest.Eventually(t, 5*time.Second, "the subscriber to leave", func() bool {
		total, _, _ := h.admissionHeld()
		return total == 0
	})
	if _, _, r := h.admissionHeld(); r != 0 {
		t.Errorf("after the subscriber left, %d bytes reserved, want 0", r)
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// TestQueryFilterHoldsOnlyItsStrings: a filter parsed from a query holds
// its own strings, not the query they were cut from: a query of one DID
// padded with an unknown parameter to 1 MiB leaves a filter of a few
// hundred bytes once the query is gone (under 64 KiB, the noise of a heap measurement under -race).
func TestQueryFilterHoldsOnlyItsStrings(t *testing.T) {
	const copies = 8
	raw := func(i int) string {
		return "wantedDids=" + didOf(i) + "&wantedCollections=app.bsky.feed.post&pad=" + strings.Repeat("x", 1<<20)
	}
	before := heapInUse()
	filters := make([]*filter, copies)
	for i := range filters {
		q, perr := parseQuery(raw(i))
		if perr != nil {
			t.Fatal(perr)
		}
		f, perr := newFilter(q[paramCollections], q[paramDIDs], 0)
		if perr != nil {
			t.Fatal(perr)
		}
		filters[i] = f
	}
	held := (heapInUse() - before) / copies
	runtime.KeepAlive(filters)
	t.Logf("a filter of one DID and one collection from a 1 MiB query holds %d bytes", held)
	if held > 64<<10 {
		t.Errorf("a filter of one DID and one collection from a 1 MiB query holds %d bytes of heap, want under 64 KiB: it keeps the query", held)
	}
}

// TestFilterHeldBytesBoundsHeap calibrates heldBytes against the heap: for
// filters of every shape up to the limits, built as newFilter builds them
// and with the replay plan's ranges made from them, the heap they hold
// (measured over several copies, after a collection) is at most the
// estimate, and the estimate is not far above it.
func TestFilterHeldBytesBoundsHeap(t *testing.T) {
	long := func(i int) string { // a 208-byte DID
		s := fmt.Sprintf("did:web:%d.", i)
		return s + strings.Repeat("x", 208-len(s))
	}
	list := func(n int, f func(int) string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = f(i)
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		collections []string
		dids        []string
		copies      int
	}{
		{"10000 did:plc", nil, list(MaxWantedDIDs, didOf), 4},
		{"10000 long DIDs", nil, list(MaxWantedDIDs, long), 4},
		{"1000 did:plc", nil, list(1000, didOf), 16},
		{"897 did:plc", nil, list(897, didOf), 16}, // one past a table's split: the emptiest tables
		{"458 did:plc", nil, list(458, didOf), 32}, // just past a table's growth
		{"1 did:plc", nil, list(1, didOf), 256},
		{"100 collections", list(MaxWantedCollections, func(i int) string { return fmt.Sprintf("com.example.c%d.record", i) }), nil, 64},
		{"100 long prefixes", list(MaxWantedCollections, func(i int) string {
			return fmt.Sprintf("com.example%d.", i) + strings.Repeat("a", 60) + ".*"
		}), nil, 64},
		{"every limit", list(MaxWantedCollections, func(i int) string { return fmt.Sprintf("com.example.c%d.record", i) }), list(MaxWantedDIDs, long), 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			filters := make([]*filter, tc.copies)
			plans := make([][]archive.IndexRange, tc.copies)
			before := heapInUse()
			for i := range filters {
				f, perr := newFilter(tc.collections, tc.dids, 0)
				if perr != nil {
					t.Fatal(perr)
				}
				filters[i] = f
				plans[i] = didRanges(f)
				if f.prefixes == nil && f.exact != nil {
					cr, err := collectionRanges(nil, f) // exact collections only: the store is not read
					if err != nil {
						t.Fatal(err)
					}
					plans[i] = append(plans[i], cr...)
				}
			}
			// Less the filter struct, which heldBytes leaves to the fixed
			// cost of a connection.
			measured := (heapInUse()-before)/int64(tc.copies) - int64(unsafe.Sizeof(filter{}))
			runtime.KeepAlive(filters)
			runtime.KeepAlive(plans)
			held := filters[0].held
			entries := len(filters[0].dids) + len(filters[0].exact) + len(filters[0].prefixes)
			t.Logf("held %d bytes, estimated %d (%.2f×); %d entries", measured, held, float64(held)/float64(max(measured, 1)), entries)
			if measured > held {
				t.Errorf("the filter and its plan hold %d bytes of heap, over the estimate %d", measured, held)
			}
			if held > 2*measured+4<<10 {
				t.Errorf("the estimate %d is over twice the %d bytes the filter and its plan hold, and 4 KiB", held, measured)
			}
		})
	}
}

// TestOptionsUpdateLetsGoOfOldFilter: a subscriber that replayed from the
// replay index and then follows the tip lets go of the old filter's plan
// (the filter and its ranges, whose reservation the update gave back) once
// an options_update replaced it, though it replays nothing more.
func TestOptionsUpdateLetsGoOfOldFilter(t *testing.T) {
	wr := newIndexWorld(t, 3, 3000, 50)
	h := wr.h
	before := metricValue(h.m.plans.WithLabelValues(planIndex))
	c := h.dial("?cursor=0&wantedDids="+didOf(4), nil)
	defer c.Close()
	promtest.Eventually(t, 10*time.Second, "an index replay to end", func() bool {
		return metricValue(h.m.plans.WithLabelValues(planIndex)) == before+1 && h.srv.Stats().Replaying == 0
	})
	subs := h.subsSnapshot()
	if len(subs) != 1 {
		t.Fatalf("%d subscribers", len(subs))
	}
	sub := subs[0]
	u := newUpdater(t, c)
	u.send([]byte(`{"type":"options_update","payload":{"wantedDids":["` + didOf(5) + `"]}}`))
	// Two live events of the new filter's account, each waited for: the
	// step that sends the second began after the first was read, so after
	// the update.
	for range 2 {
		h.commit(archive.Event{Kind: archive.KindIdentity, DID: didOf(5), Handle: "late.test", Source: archive.SourceLive})
		promtest.Eventually(t, 10*time.Second, "the live event sent", func() bool {
			return sub.position.Load() > h.srv.Stats().TipSeq
		})
	}
	c.Close()
	promtest.Eventually(t, 5*time.Second, "the subscriber to end", func() bool { return len(h.subsSnapshot()) == 0 })
	h.srv.wg.Wait() // its goroutine has returned: its fields are ours to read
	if sub.plan != nil && sub.plan.f != sub.filt.Load() {
		t.Errorf("after an options_update and two live events, the subscriber still holds the plan of its old filter (%d DIDs, %d ranges)",
			len(sub.plan.f.dids), len(sub.plan.ranges))
	}
}

// TestSubscriberLetsGoOfItsRequest: a connected subscriber does not keep
// the request it was upgraded from. Its query and headers may be 1 MiB
// (the listener's bound), most of it parameters the server ignores; held
// for the connection's life, that would be memory outside every bound.
// Eight subscribers whose queries carry 900 KiB of padding hold about what
// eight with none hold.
func TestSubscriberLetsGoOfItsRequest(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	var held [3]int64
	for k, pad := range []int{0, 0, 900 << 10} { // the first round warms up
		before := heapInUse()
		var cs []*websocket.Conn
		for i := range 8 {
			c, resp, err := websocket.DefaultDialer.Dial(h.wsURL("?wantedDids="+didOf(i)+"&pad="+strings.Repeat("x", pad)), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Request = nil // the client's copy of the URL is not the server's to hold
			cs = append(cs, c)
		}
		promtest.Eventually(t, 5*time.Second, "8 subscribers served", func() bool { return len(h.subsSnapshot()) == 8 })
		held[k] = (heapInUse() - before) / 8
		for _, c := range cs {
			c.Close()
		}
		promtest.Eventually(t, 5*time.Second, "every subscriber to leave", func() bool {
			total, _, _ := h.admissionHeld()
			return total == 0
		})
	}
	t.Logf("a subscriber holds %d bytes of heap with a short query (%d in the first round), %d with 900 KiB of padding in it", held[1], held[0], held[2])
	if held[2]-held[1] > 256<<10 {
		t.Errorf("a subscriber whose query carries 900 KiB of padding holds %d bytes more heap than one without: it keeps its request", held[2]-held[1])
	}
}
