package natssink

import (
	"fmt"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// unrenderable are three creates that do not render: two records their
// PDS wrote outside the atproto data model (a non-integral float, which
// DAG-CBOR framing allows) and a well-formed one whose CID does not parse
// (bad archived data), each for its own rkey under did, n numbering the
// batch.
func unrenderable(t *testing.T, did string, n int) []archive.Event {
	t.Helper()
	float := []byte{0xa2, 0x61, 0x76, 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x65, 0x24, 0x74, 0x79, 0x70, 0x65, 0x61, 0x78} // {"v": 1.5, "$type": "x"}
	h, err := multihash.Sum(float, multihash.SHA2_256, -1)
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte{0xa1, 0x65, 0x24, 0x74, 0x79, 0x70, 0x65, 0x61, 0x78} // {"$type": "x"}
	create := func(i int, rec, c []byte) archive.Event {
		return archive.Event{Kind: archive.KindCreate, DID: did, Collection: "app.bsky.feed.post", RKey: fmt.Sprintf("3kbad%09d", n*3+i),
			Rev: fmt.Sprintf("3m%011d", n*3+i), CID: c, Record: rec, Source: archive.SourceLive}
	}
	good := cid.NewCidV1(cid.DagCBOR, h).Bytes()
	return []archive.Event{create(0, float, good), create(1, float, good),
		create(2, plain, []byte{0x01, 0x71, 0x12, 0x20, 0x00})} // a digest shorter than its length
}

// TestSinkRenderErrorReasons: the sink tells its render failures apart as
// the websocket server does (subscribe.RenderErrorReason): a record its
// PDS wrote outside the atproto data model is counted under
// backstream_nats_render_errors_total{reason="upstream_record"}, any other
// failure under reason="internal", both still under
// backstream_nats_errors_total{kind="render"}; each is skipped, the events
// after it published. Read from the store (below the live log's floor)
// and from the live log.
func TestSinkRenderErrorReasons(t *testing.T) {
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	bad := unrenderable(t, "did:plc:zzzzzzzzzzzzzzzzzzzzzzzz", 0)
	r, err := wd.w.Apply(ctxT(t), &archive.Unit{Events: append([]archive.Event(nil), bad...)})
	if err != nil || r.Kept != len(bad) {
		t.Fatalf("commit: %+v, %v", r, err)
	}
	if err := wd.commit(ctxT(t), 5000); err != nil {
		t.Fatal(err)
	}
	if _, floor := wd.w.Live().ReadEntries(r.LastSeq, nil, 1); floor <= r.LastSeq {
		t.Fatalf("the live log's floor %d is not above the unrenderable events (seqs %d to %d): the sink would not read them from the store", floor, r.FirstSeq, r.LastSeq)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.logStatusOnFailure(t)
	check := func(from string, upstream, internal float64) {
		t.Helper()
		rs.waitCaughtUp(t, wd, 30*time.Second)
		for reason, want := range map[string]float64{"upstream_record": upstream, "internal": internal} {
			got, ok := promtest.Lookup(t, rs.reg, "backstream_nats_render_errors_total", map[string]string{"reason": reason})
			if !ok || got != want {
				t.Errorf("after the unrenderable events %s: backstream_nats_render_errors_total{reason=%q} = %v (a series: %v), want %v", from, reason, got, ok, want)
			}
		}
		if got := promtest.Value(t, rs.reg, "backstream_nats_errors_total", map[string]string{"kind": errRender}); got != upstream+internal {
			t.Errorf("after the unrenderable events %s: backstream_nats_errors_total{kind=\"render\"} = %v, want %v", from, got, upstream+internal)
		}
	}
	check("read from the store", 2, 1)

	bad = unrenderable(t, "did:plc:zzzzzzzzzzzzzzzzzzzzzzzz", 1)
	if r, err = wd.w.Apply(ctxT(t), &archive.Unit{Events: append([]archive.Event(nil), bad...)}); err != nil || r.Kept != len(bad) {
		t.Fatalf("commit: %+v, %v", r, err)
	}
	if err := wd.commit(ctxT(t), 10); err != nil {
		t.Fatal(err)
	}
	check("read from the live log", 4, 2)
	want := natstest.ArchiveEvents(t, wd.store) - 6
	if msgs := natstest.ReadStream(t, c.URLs(), DefaultStream, want); len(msgs) != want {
		t.Fatalf("the stream holds %d messages, want the %d archived events that render", len(msgs), want)
	}
}
