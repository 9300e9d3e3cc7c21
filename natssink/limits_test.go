package natssink

// Streams whose limits or retention remove published messages: the sink
// must neither take the removals for a purge nor refill such a stream
// from --nats-from once it is empty.

import (
	"strconv"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/natstest"
)

// TestSinkLimitAddedWhileRunning: the operator gives the sink's stream a
// limit that removes old messages (max_msgs, discard old) while the sink
// publishes into it. The stream's first sequence then moves past messages
// the sink stored, as a purge would move it; the sink must go on
// publishing, not stop and ask for a purge.
func TestSinkLimitAddedWhileRunning(t *testing.T) {
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	js := jsConnect(t, c.URLs())
	stream, err := js.Stream(ctx, DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxMsgs = 5
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if err := wd.commit(ctx, 10); err != nil {
			t.Fatal(err)
		}
		rs.waitCaughtUp(t, wd, 30*time.Second)
	}
	if st := rs.s.Status(); st.Errors > 0 {
		t.Errorf("%d sink errors after a limit was added, last %q", st.Errors, st.LastError)
	}
	ids := streamIDs(t, c.URLs())
	tip := wd.w.Live().Tip()
	if len(ids) != 5 || ids[4] != strconv.FormatUint(tip, 10) {
		t.Errorf("the stream holds ids %v, want the last 5 up to %d", ids, tip)
	}
}
