package subscribe

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"

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
