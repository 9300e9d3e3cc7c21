package subscribe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
)

// indexWorld is a generated archive for the replay plans: accounts with
// records in several collection families (one rare), updates and deletes,
// and identity, account (some deleted or taken down) and sync rows; a
// compaction pass in the middle leaves gaps in ev/ and removes index
// entries, and rows written after it are above the watermark.
type indexWorld struct {
	h    *harness
	tip  uint64
	rows []archive.Event
}

var indexWorldCollections = []string{"app.bsky.feed.post", "app.bsky.feed.like", "app.bsky.graph.follow",
	"app.bsky.actor.profile", "com.example.thing", "com.whtwnd.blog.entry"}

func newIndexWorld(t testing.TB, seed uint64, n, accounts int) *indexWorld {
	h := newHarness(t, harnessOpts{liveBytes: 1 << 10})
	recs := map[string]testRecord{}
	for _, c := range indexWorldCollections {
		recs[c] = makeRecord(t, c, map[string]any{"$type": c, "text": "x " + c, "createdAt": "2024-11-05T10:11:12.345Z"})
	}
	r := rand.New(rand.NewPCG(seed, 1))
	dids := make([]string, accounts)
	for i := range dids {
		dids[i] = didOf(i)
	}
	dids[1] = "did:plc:ab" // one DID prefixes another
	dids[2] = "did:plc:abc"
	var units [][]archive.Event
	var unit []archive.Event
	live := map[string][]string{} // did -> collection\x00rkey of live records
	for i := 0; i < n; i++ {
		did := dids[r.IntN(len(dids))]
		ev := archive.Event{DID: did, Source: archive.SourceLive, UpstreamSeq: int64(i + 1)}
		rev := fmt.Sprintf("3l%011d", i+1)
		switch x := r.IntN(100); {
		case x < 1:
			ev.Kind, ev.Handle = archive.KindIdentity, "u.test"
		case x < 2:
			ev.Kind, ev.Active = archive.KindAccount, true
			switch r.IntN(4) {
			case 0:
				ev.Active, ev.Status = false, "deleted"
			case 1:
				ev.Active, ev.Status = false, "takendown"
			case 2:
				ev.Active, ev.Status = false, "deactivated"
			}
		case x < 3:
			// A replacement's sync row: an upstream #sync archives none.
			ev.Kind, ev.Rev, ev.Source = archive.KindSync, rev, archive.SourceRetry
		case x < 30 && len(live[did]) > 0:
			k := live[did][r.IntN(len(live[did]))]
			c, rk, _ := cut(k)
			ev.Collection, ev.RKey, ev.Rev = c, rk, rev
			if x < 20 {
				ev.Kind, ev.Record, ev.CID = archive.KindUpdate, recs[c].cbor, recs[c].cid
			} else {
				ev.Kind = archive.KindDelete
			}
		default:
			c := indexWorldCollections[r.IntN(len(indexWorldCollections)-1)]
			if r.IntN(200) == 0 {
				c = "com.whtwnd.blog.entry" // rare
			}
			ev.Kind, ev.Collection, ev.RKey, ev.Rev = archive.KindCreate, c, fmt.Sprintf("3k%011d", i), rev
			ev.Record, ev.CID = recs[c].cbor, recs[c].cid
			live[did] = append(live[did], c+"/"+ev.RKey)
		}
		unit = append(unit, ev)
		if len(unit) == 16 || i == n-1 {
			units = append(units, unit)
			unit = nil
		}
	}
	wr := &indexWorld{h: h}
	half := len(units) / 2
	wr.rows = h.commitUnits(units[:half])
	if _, err := h.store.Compact(context.Background(), h.w, archive.CompactOptions{Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	wr.rows = append(wr.rows, h.commitUnits(units[half:])...)
	var err error
	if wr.tip, err = h.store.Tip(); err != nil {
		t.Fatal(err)
	}
	if err := h.store.CheckReplayIndex(); err != nil {
		t.Fatal(err)
	}
	return wr
}

func cut(s string) (string, string, bool) {
	for i := range s {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// driveReplay runs a subscriber's archive replay (readBatch, as serve
// calls it, batch after batch) from cursor up to floor with f, without a
// socket, and returns the frames it wrote, the seqs they carry, the plan
// and the rows it read. scan forces the scan plan: the oracle.
func driveReplay(t testing.TB, h *harness, f *filter, cursor, floor uint64, scan bool) (frames []byte, seqs []uint64, plan string, rows int) {
	t.Helper()
	frames, seqs, plan, rows, _ = driveReplayUpdate(t, h, f, cursor, floor, scan, nil)
	return frames, seqs, plan, rows
}

// driveReplayUpdate is driveReplay with an options_update: after the
// first batch the filter becomes g (nil: no update); at is where the
// replay was then.
func driveReplayUpdate(t testing.TB, h *harness, f *filter, cursor, floor uint64, scan bool, g *filter) (frames []byte, seqs []uint64, plan string, rows int, at uint64) {
	t.Helper()
	srv := &Server{cfg: h.srv.cfg, log: quiet, m: h.m, codecs: h.srv.codecs}
	srv.cfg.ScanReplays = scan
	if g != nil {
		srv.cfg.FlushBytes = 2 << 10 // a first batch of a few events
	}
	s := &subscriber{srv: srv, log: quiet, store: h.store, live: h.w.Live(), next: cursor, rend: Renderer{Cursor: true},
		out: make([]byte, 0, srv.cfg.FlushBytes+maxInlineFrame+maxControlPending+2*maxFrameHeader)}
	s.filt.Store(f)
	read := func() float64 {
		return metricValue(h.m.rowsRead.WithLabelValues(planScan)) + metricValue(h.m.rowsRead.WithLabelValues(planIndex))
	}
	read0 := read()
	last := cursor
	for batch := 0; s.next < floor; batch++ {
		if batch == 1 && g != nil {
			s.filt.Store(g)
			at = s.next
		}
		before := s.next
		large, err := s.readBatch(floor)
		if err != nil {
			t.Fatalf("replay from %d: %v", before, err)
		}
		if large != nil {
			s.out = appendFrame(s.out, s.opcode(), large)
		}
		if s.next <= before && large == nil && len(s.out) == 0 {
			t.Fatalf("replay made no progress at %d (floor %d)", s.next, floor)
		}
		if s.plan != nil {
			plan = s.plan.name()
		}
		frames = append(frames, s.out...)
		s.out = s.out[:0]
		if s.next < last {
			t.Fatalf("cursor went back from %d to %d", last, s.next)
		}
		last = s.next
	}
	if s.next != floor && !(cursor > floor && s.next == cursor) {
		t.Fatalf("replay ended at %d, floor %d", s.next, floor)
	}
	s.closeIter()
	rows = int(read() - read0)
	return frames, frameSeqs(t, frames), plan, rows, at
}

// frameSeqs reads the cursors of a run of unmasked text frames.
func frameSeqs(t testing.TB, b []byte) []uint64 {
	var seqs []uint64
	for len(b) > 0 {
		n, hdr := int(b[1]&0x7f), 2
		switch n {
		case 126:
			n, hdr = int(b[2])<<8|int(b[3]), 4
		case 127:
			n, hdr = 0, 10
			for _, c := range b[2:10] {
				n = n<<8 | int(c)
			}
		}
		var ev struct {
			Cursor uint64 `json:"cursor"`
		}
		if err := json.Unmarshal(b[hdr:hdr+n], &ev); err != nil {
			t.Fatalf("frame %q: %v", b[hdr:hdr+n], err)
		}
		if len(seqs) > 0 && ev.Cursor <= seqs[len(seqs)-1] {
			t.Fatalf("cursor %d after %d", ev.Cursor, seqs[len(seqs)-1])
		}
		seqs = append(seqs, ev.Cursor)
		b = b[hdr+n:]
	}
	return seqs
}

type planCase struct {
	name        string
	collections []string
	dids        []string
	sync        bool
	indexed     bool // the planner must pick the index for it (from cursor 0)
}

func planCases() []planCase {
	return []planCase{
		{name: "one collection, rare", collections: []string{"com.whtwnd.blog.entry"}, indexed: true},
		{name: "one collection, rare, with sync", collections: []string{"com.whtwnd.blog.entry"}, sync: true, indexed: true},
		{name: "two collections", collections: []string{"com.whtwnd.blog.entry", "com.example.thing"}},
		{name: "a prefix", collections: []string{"com.whtwnd.*"}, indexed: true},
		{name: "a wide prefix", collections: []string{"app.bsky.*"}},
		{name: "prefix and exact", collections: []string{"com.whtwnd.*", "com.whtwnd.blog.entry"}, indexed: true},
		{name: "no such collection", collections: []string{"org.nothing.here"}, indexed: true},
		{name: "no such prefix", collections: []string{"org.nothing.*"}, indexed: true},
		{name: "one did", dids: []string{"did:plc:ab"}, indexed: true},
		{name: "did that prefixes another", dids: []string{"did:plc:abc"}, indexed: true},
		{name: "one did with sync", dids: []string{"did:plc:ab"}, sync: true, indexed: true},
		{name: "three dids", dids: []string{didOf(0), didOf(5), "did:plc:abc"}, indexed: true},
		{name: "unknown did", dids: []string{"did:plc:nobody"}, indexed: true},
		{name: "many dids, few rows (one shared index iterator)", dids: manyDIDs(), indexed: true},
		{name: "did and collection", collections: []string{"app.bsky.feed.post"}, dids: []string{didOf(3)}, indexed: true},
		{name: "did and rare collection", collections: []string{"com.whtwnd.blog.entry"}, dids: []string{didOf(3), didOf(4)}, indexed: true},
		{name: "did and prefix", collections: []string{"app.bsky.feed.*"}, dids: []string{didOf(7)}, sync: true, indexed: true},
		{name: "every did", dids: allDIDs(60)},
		{name: "everything"},
		{name: "everything with sync", sync: true},
	}
}

// manyDIDs is more accounts than IndexIter gives iterators of their own,
// two of them in the archive.
func manyDIDs() []string {
	d := []string{didOf(3), "did:plc:ab"}
	for i := 0; i < 40; i++ {
		d = append(d, fmt.Sprintf("did:plc:absent%04d", i))
	}
	return d
}

func allDIDs(n int) []string {
	d := []string{"did:plc:ab", "did:plc:abc"}
	for i := 0; i < n; i++ {
		d = append(d, didOf(i))
	}
	return d
}

func (pc planCase) filter(t testing.TB) *filter {
	f, perr := newFilter(pc.collections, pc.dids, 0)
	if perr != nil {
		t.Fatal(perr)
	}
	f.withSync = pc.sync
	return f
}

// TestIndexedReplayMatchesScan: for a matrix of filters (collections,
// prefixes, DIDs, both, nothing matching, everything) and cursors (0, the
// middle, just below the floor, at the floor, past it) and two floors (the
// tip and the middle), the planned replay writes exactly the frames the
// scan writes — the same events, markers included, byte for byte — and the
// selective filters are planned on the index, reading fewer rows.
func TestIndexedReplayMatchesScan(t *testing.T) {
	n := 6000
	if testing.Short() {
		n = 3000
	}
	wr := newIndexWorld(t, 1, n, 60)
	tip := wr.tip
	for _, pc := range planCases() {
		f := pc.filter(t)
		for _, floor := range []uint64{tip + 1, tip / 2} {
			for _, cursor := range []uint64{0, 1, tip / 3, floor - 1, floor, floor + 5} {
				name := fmt.Sprintf("%s/floor%d/cursor%d", pc.name, floor, cursor)
				want, wantSeqs, planS, scanRows := driveReplay(t, wr.h, f, cursor, floor, true)
				got, gotSeqs, planI, idxRows := driveReplay(t, wr.h, f, cursor, floor, false)
				if planS != "" && planS != planScan {
					t.Fatalf("%s: the oracle ran plan %q", name, planS)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s: plan %s sent %d events %v, the scan %d %v", name, planI, len(gotSeqs), head(diff(gotSeqs, wantSeqs)), len(wantSeqs), head(diff(wantSeqs, gotSeqs)))
				}
				if pc.indexed && cursor == 0 && floor == tip+1 {
					if planI != planIndex {
						t.Fatalf("%s: plan %q, want index", name, planI)
					}
					if idxRows >= scanRows/4 {
						t.Fatalf("%s: the index read %d rows, the scan %d", name, idxRows, scanRows)
					}
					t.Logf("%s: %d events, rows read: index %d, scan %d", name, len(gotSeqs), idxRows, scanRows)
				}
				if pc.name == "everything" && planI != planScan && planI != "" {
					t.Fatalf("%s: plan %q for a filter that admits every row", name, planI)
				}
			}
		}
	}
}

// diff is what a holds that b does not.
func diff(a, b []uint64) []uint64 {
	in := make(map[uint64]bool, len(b))
	for _, x := range b {
		in[x] = true
	}
	var d []uint64
	for _, x := range a {
		if !in[x] {
			d = append(d, x)
		}
	}
	return d
}

// FuzzIndexedReplay: random filters (collections, prefixes, DIDs,
// includeSync) and cursors over a generated archive; the planned replay
// writes exactly what the scan writes.
func FuzzIndexedReplay(f *testing.F) {
	wr := newIndexWorld(f, 2, 2000, 40)
	names := append(append([]string{}, indexWorldCollections...), "app.bsky.*", "app.bsky.feed.*", "com.*", "com.whtwnd.*", "org.none.here")
	f.Add(uint16(1), uint64(0), uint64(1), uint16(0), false, uint16(0))
	f.Add(uint16(0), uint64(0), uint64(0), uint16(7), true, uint16(100))
	f.Add(uint16(1<<5), uint64(0), uint64(1<<3|1<<9), uint16(0), false, uint16(0))
	f.Fuzz(func(t *testing.T, collMask uint16, _ uint64, didMask uint64, cursor uint16, sync bool, floorBack uint16) {
		var colls, dids []string
		for i, c := range names {
			if collMask&(1<<i) != 0 {
				colls = append(colls, c)
			}
		}
		for i := 0; i < 40; i++ {
			if didMask&(1<<i) != 0 {
				dids = append(dids, didOf(i))
			}
		}
		if didMask&(1<<40) != 0 {
			dids = append(dids, "did:plc:ab")
		}
		pc := planCase{collections: colls, dids: dids, sync: sync}
		fl := pc.filter(t)
		floor := wr.tip + 1 - min(uint64(floorBack), wr.tip)
		want, _, _, _ := driveReplay(t, wr.h, fl, uint64(cursor), floor, true)
		got, gotSeqs, plan, _ := driveReplay(t, wr.h, fl, uint64(cursor), floor, false)
		if !bytes.Equal(got, want) {
			t.Fatalf("filter %+v cursor %d floor %d: plan %s sent %d events, not the scan's", pc, cursor, floor, plan, len(gotSeqs))
		}
	})
}

// TestIndexedReplayOverSocket: over real websockets, a selective filter
// replays from the index (the plan metric says so) and gets exactly the
// scan's events, markers included, then the live events after them with
// no gap or repeat; an options_update mid-replay plans again.
func TestIndexedReplayOverSocket(t *testing.T) {
	wr := newIndexWorld(t, 3, 3000, 50)
	h := wr.h
	for _, pc := range []planCase{
		{name: "rare collection", collections: []string{"com.whtwnd.blog.entry"}},
		{name: "one did", dids: []string{didOf(4)}, sync: true},
	} {
		t.Run(pc.name, func(t *testing.T) {
			f := pc.filter(t)
			_, want, _, _ := driveReplay(t, h, f, 0, wr.tip+1, true)
			before := metricValue(h.m.plans.WithLabelValues(planIndex))
			q := filterCase{collections: pc.collections, dids: pc.dids, sync: pc.sync}.query()
			q.Set("cursor", "0")
			c := h.dial("?"+q.Encode(), nil)
			defer c.Close()
			// Live rows after the archive's: one the filter admits (a
			// marker of a wanted account, or a rare-collection row), read
			// after every replayed one.
			got := readSeqs(t, c, len(want))
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("socket got %d events %v, the scan %d", len(got), head(diff(got, want)), len(want))
			}
			if after := metricValue(h.m.plans.WithLabelValues(planIndex)); after != before+1 {
				t.Fatalf("index plans %v → %v", before, after)
			}
			ev := archive.Event{Kind: archive.KindIdentity, DID: didOf(4), Handle: "late.test", Source: archive.SourceLive}
			if len(pc.collections) > 0 {
				r := makeRecord(t, pc.collections[0], map[string]any{"$type": pc.collections[0], "text": "late"})
				ev = archive.Event{Kind: archive.KindCreate, DID: didOf(9), Collection: pc.collections[0], RKey: "3zzzzzzzzzzzz", Rev: "3z" + strconv.Itoa(int(time.Now().Unix())),
					Record: r.cbor, CID: r.cid, Source: archive.SourceLive}
			}
			seq, _ := h.commit(ev)
			if late := readSeqs(t, c, 1); late[0] != seq {
				t.Fatalf("live event %d after the replay, want %d", late[0], seq)
			}
		})
	}
}

func readSeqs(t testing.TB, c interface {
	SetReadDeadline(time.Time) error
	ReadMessage() (int, []byte, error)
}, n int) []uint64 {
	t.Helper()
	got := []uint64{}
	for len(got) < n {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, b, err := c.ReadMessage()
		if err != nil {
			t.Fatalf("after %d events: %v", len(got), err)
		}
		var ev struct {
			Cursor uint64 `json:"cursor"`
		}
		if err := json.Unmarshal(b, &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Cursor)
	}
	return got
}

// TestIndexedReplayOptionsUpdate: an options_update mid-replay plans
// again (index to another index, index to scan, scan to index) and the
// events sent are the scan's for the same update at the same point.
func TestIndexedReplayOptionsUpdate(t *testing.T) {
	wr := newIndexWorld(t, 4, 3000, 50)
	rare := planCase{collections: []string{"com.whtwnd.blog.entry"}}.filter(t)
	did := planCase{dids: []string{didOf(3)}, sync: true}.filter(t)
	all := planCase{}.filter(t)
	for _, tc := range []struct {
		name string
		f, g *filter
		want string // the plan after the update
	}{{"collection to did", rare, did, planIndex}, {"did to everything", did, all, planScan}, {"everything to collection", all, rare, planIndex}} {
		got, gotSeqs, plan, _, at := driveReplayUpdate(t, wr.h, tc.f, 0, wr.tip+1, false, tc.g)
		if at == 0 || at > wr.tip {
			t.Fatalf("%s: the update landed at %d", tc.name, at)
		}
		// The oracle: the scan with the first filter up to where the
		// update landed, then with the second.
		want, _, _, _ := driveReplay(t, wr.h, tc.f, 0, at, true)
		rest, _, _, _ := driveReplay(t, wr.h, tc.g, at, wr.tip+1, true)
		want = append(want, rest...)
		if !bytes.Equal(got, want) {
			wantSeqs := frameSeqs(t, want)
			t.Fatalf("%s (update at %d): sent %d events %v, the scan %d %v", tc.name, at, len(gotSeqs), head(diff(gotSeqs, wantSeqs)), len(wantSeqs), head(diff(wantSeqs, gotSeqs)))
		}
		if plan != tc.want {
			t.Fatalf("%s: plan %s after the update, want %s", tc.name, plan, tc.want)
		}
	}
}

// TestReplayScansUntilIndexFilled: on a store archived before the replay
// index (its entries gone, meta/index_replay covering every row), a
// selective filter scans and sends the same events; once the backfill has
// run, the next plan reads the index, and still sends the same.
func TestReplayScansUntilIndexFilled(t *testing.T) {
	wr := newIndexWorld(t, 5, 2000, 40)
	f := planCase{collections: []string{"com.whtwnd.blog.entry"}}.filter(t)
	want, _, _, _ := driveReplay(t, wr.h, f, 0, wr.tip+1, true)
	b := wr.h.store.DB().NewBatch()
	_ = b.DeleteRange(archive.PrefixByCollection, []byte("xn"), nil) // xc/, xd/, xm/
	_ = b.Set(archive.KeyReplayIndex, archive.EncodeIndexMarker(archive.IndexMarker{Next: 1, End: wr.tip + 1}), nil)
	if err := b.Commit(nil); err != nil {
		t.Fatal(err)
	}
	got, _, plan, _ := driveReplay(t, wr.h, f, 0, wr.tip+1, false)
	if plan != planScan || !bytes.Equal(got, want) {
		t.Fatalf("unfilled index: plan %s, same events %v", plan, bytes.Equal(got, want))
	}
	if _, err := wr.h.store.FillReplayIndex(context.Background(), 0, nil); err != nil {
		t.Fatal(err)
	}
	got, _, plan, _ = driveReplay(t, wr.h, f, 0, wr.tip+1, false)
	if plan != planIndex || !bytes.Equal(got, want) {
		t.Fatalf("filled index: plan %s, same events %v", plan, bytes.Equal(got, want))
	}
}

// TestReplayOverMalformedIndexMarker (K3, X1): a malformed
// meta/index_replay halts compaction (the replay index backfill reports
// it), not serving: a filtered replay scans, as while the backfill runs,
// and sends what the scan sends.
func TestReplayOverMalformedIndexMarker(t *testing.T) {
	wr := newIndexWorld(t, 11, 2000, 40)
	h := wr.h
	pc := planCase{collections: []string{"com.whtwnd.blog.entry"}}
	_, want, _, _ := driveReplay(t, h, pc.filter(t), 0, wr.tip+1, true)
	if err := h.store.DB().Set(archive.KeyReplayIndex, []byte{0x01, 2}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.ReplayIndexMarker(); !errors.Is(err, archive.ErrCompactionState) {
		t.Fatalf("a malformed marker reads %v, want ErrCompactionState", err)
	}
	before := metricValue(h.m.plans.WithLabelValues(planScan))
	q := filterCase{collections: pc.collections}.query()
	q.Set("cursor", "0")
	c := h.dial("?"+q.Encode(), nil)
	defer c.Close()
	got := readSeqs(t, c, len(want))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("socket got %d events %v, the scan %d", len(got), head(diff(got, want)), len(want))
	}
	if after := metricValue(h.m.plans.WithLabelValues(planScan)); after != before+1 {
		t.Fatalf("scan plans %v → %v", before, after)
	}
}
