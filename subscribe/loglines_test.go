package subscribe

import (
	"fmt"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/logtest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestDisconnectLogBounded: a client that connects 1,000 times and sends
// a bad options_update each time is closed each time and counted in
// backstream_subscribe_disconnects_total{reason="bad_options"}; the log
// gets one line per reason a minute, not one per connection.
func TestDisconnectLogBounded(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	var lines logtest.Counter
	h.srv.log = lines.Logger()
	const n = 1000
	for range n {
		c := h.dial("", nil)
		if err := c.WriteMessage(websocket.TextMessage, []byte(`{"type":"options_update","payload":{"wantedDids":["not a did"]}}`)); err != nil {
			t.Fatal(err)
		}
		_, _, _ = readEvent(t, c, 5*time.Second) // the close frame
		c.Close()
	}
	promtest.Eventually(t, 10*time.Second, "every bad_options disconnect counted", func() bool {
		return promtest.Value(t, h.reg, "backstream_subscribe_disconnects_total", map[string]string{"reason": ReasonBadOptions}) == n
	})
	if got := lines.Lines(); got != 1 {
		t.Fatalf("%d connections closed for bad options wrote %d log lines at INFO or above, want 1", n, got)
	}
}

// TestRenderErrorLogBounded: records the archive keeps but cannot render
// (a non-integral float: DAG-CBOR framing takes it, the atproto data model
// does not, so Jetstream v1 never sends it either) are skipped and counted
// in backstream_subscribe_render_errors_total{reason="upstream_record"},
// for the subscriber following the tip and for every replay from the
// archive; the log gets one line a minute for them, not one per event,
// however many a PDS writes and however many clients replay over them.
func TestRenderErrorLogBounded(t *testing.T) {
	h := newHarness(t, harnessOpts{liveBytes: 16 << 10}) // a small live log: the replays read the archive
	var lines logtest.Counter
	h.srv.log = lines.Logger()
	float := []byte{0xa2, 0x61, 0x76, 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x65, 0x24, 0x74, 0x79, 0x70, 0x65, 0x61, 0x78} // {"v": 1.5, "$type": "x"}
	good := genEvent(t, 1, 1)
	const n = 500
	evs := make([]archive.Event, 0, n+1)
	for i := range n {
		ev := good
		ev.RKey = fmt.Sprintf("3k%011d", i)
		ev.Record = float
		evs = append(evs, ev)
	}
	live := h.dial("", nil)
	defer live.Close()
	_, last := h.commit(append(evs, good)...)
	if got := readUntil(t, live, last); len(got) != 1 || got[0] != last {
		t.Fatalf("the live subscriber got cursors %v, want only the renderable event %d", got, last)
	}
	const replays = 3
	for range replays {
		c := h.dial("?cursor=0", nil)
		if got := readUntil(t, c, last); len(got) != 1 {
			t.Fatalf("a replay got cursors %v, want only the renderable event %d", got, last)
		}
		c.Close()
	}
	// Each event counted once where the live log shared its rendering, and
	// again by each replay that read it from the archive.
	if got := promtest.Value(t, h.reg, "backstream_subscribe_render_errors_total", map[string]string{"reason": "upstream_record"}); got < n+replays {
		t.Fatalf("backstream_subscribe_render_errors_total{reason=\"upstream_record\"} = %v, want at least %d", got, n+replays)
	}
	if got := lines.Lines(); got != 1 {
		t.Fatalf("%d unrenderable events, followed live and replayed %d times, wrote %d log lines at INFO or above, want 1", n, replays, got)
	}
}

// TestRenderErrorReasons: an archived event that cannot be rendered is
// counted by whose it is. A record its PDS wrote outside the atproto data
// model (a non-integral float: every record is archived only once it is
// well-formed DAG-CBOR, so what then fails to render is the PDS's data) is
// reason upstream_record; anything else (here a CID that does not parse,
// which no producer archives) is internal: bad archived data or our bug,
// what BackstreamRenderErrors pages for. Each has its own log line, so a
// PDS writing floats all day does not hide one of ours behind its line.
func TestRenderErrorReasons(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	var lines logtest.Counter
	h.srv.log = lines.Logger()
	good := genEvent(t, 1, 1)
	float := good
	float.RKey = "3kfloat"
	float.Record = []byte{0xa2, 0x61, 0x76, 0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0x65, 0x24, 0x74, 0x79, 0x70, 0x65, 0x61, 0x78} // {"v": 1.5, "$type": "x"}
	badCID := good
	badCID.RKey = "3kbadcid"
	badCID.CID = []byte{0x01, 0x71, 0x12, 0x20, 0x00} // a digest shorter than its length
	_, last := h.commit(float, float, badCID, good)
	c := h.dial("?cursor=0", nil)
	defer c.Close()
	if got := readUntil(t, c, last); len(got) != 1 || got[0] != last {
		t.Fatalf("the subscriber got cursors %v, want only the renderable event %d", got, last)
	}
	for reason, want := range map[string]float64{"upstream_record": 2, "internal": 1} {
		got, ok := promtest.Lookup(t, h.reg, "backstream_subscribe_render_errors_total", map[string]string{"reason": reason})
		if !ok || got != want {
			t.Errorf("backstream_subscribe_render_errors_total{reason=%q} = %v (a series: %v), want %v", reason, got, ok, want)
		}
	}
	if lines.Lines() != 2 || lines.Of("subscribe: cannot render archived event; skipped") != 1 {
		t.Errorf("two records of a PDS's, then an internal render error: log lines %v, want one for each kind", lines.Messages())
	}
}
