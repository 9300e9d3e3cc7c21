package natssink

// What the servers show after a purge of a stream holding one message and
// after the removal of that message: nothing tells them apart.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/internal/natstest"
)

// TestPurgeOfOneMessageLooksLikeItsRemoval: on a real server (one node,
// and an R3 stream on three), a stream holding one message is purged, and
// another one's message is removed (nats stream rmm, erased or not). The
// streams' states are the same in every field the stream info gives
// (messages, bytes, first and last sequence, first time, deleted,
// subjects; the last time is its message's),
// and the servers keep the removed message's id in both: as the stream's
// last message id (a publish expecting it is accepted) and in the
// duplicate window. So neither the stream's state nor a header read back
// can tell a purge from that removal; the sink can only remember what it
// saw (docs/nats.md).
func TestPurgeOfOneMessageLooksLikeItsRemoval(t *testing.T) {
	for _, nodes := range []int{1, 3} {
		t.Run(fmt.Sprintf("R%d", nodes), func(t *testing.T) {
			c := natstest.Start(t, nodes)
			js := jsConnect(t, c.URLs())
			ctx := ctxT(t)
			state := map[string]jetstream.StreamState{}
			for _, how := range []string{"purge", "rmm", "rmm --erase"} {
				name := strings.NewReplacer(" ", "", "-", "").Replace(how)
				stream := createStream(t, js, jetstream.StreamConfig{Name: name, Replicas: nodes})
				msg := nats.NewMsg(name + ".identity")
				msg.Header.Set(nats.MsgIdHdr, "1")
				if _, err := js.PublishMsg(ctx, msg); err != nil {
					t.Fatal(err)
				}
				var err error
				switch how {
				case "purge":
					err = stream.Purge(ctx)
				case "rmm":
					err = stream.DeleteMsg(ctx, 1)
				default:
					err = stream.SecureDeleteMsg(ctx, 1)
				}
				if err != nil {
					t.Fatalf("%s: %v", how, err)
				}
				info, err := stream.Info(ctx)
				if err != nil {
					t.Fatal(err)
				}
				st := info.State
				if st.LastTime.IsZero() {
					t.Errorf("%s: no last time: %+v", how, st)
				}
				st.LastTime = time.Time{} // its own publish's, not compared
				state[how] = st
				// The same id again: a duplicate, the window remembers it.
				ack, err := js.PublishMsg(ctx, msg)
				if err != nil || !ack.Duplicate {
					t.Errorf("%s: the removed message's id published again: %+v %v, want a duplicate", how, ack, err)
				}
				// The server's last message id is still the removed one's.
				next := nats.NewMsg(name + ".identity")
				next.Header.Set(nats.MsgIdHdr, "2")
				if _, err := js.PublishMsg(ctx, next, jetstream.WithExpectLastMsgID("1"), jetstream.WithExpectLastSequence(1)); err != nil {
					t.Errorf("%s: a publish expecting the removed message's id and sequence: %v", how, err)
				}
			}
			for _, how := range []string{"rmm", "rmm --erase"} {
				if got, want := fmt.Sprintf("%+v", state[how]), fmt.Sprintf("%+v", state["purge"]); got != want {
					t.Errorf("after %s the state is\n%s\nafter a purge\n%s", how, got, want)
				}
			}
			t.Logf("state after each: %+v", state["purge"])
		})
	}
}
