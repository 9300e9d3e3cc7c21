package natssink

// A stream that allows direct gets lets its followers and its mirrors
// (mirror_direct) answer reads of its messages, from what they hold: a
// follower answers once 90 % synchronised, a mirror whenever it lags.

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkResumeReadsTheStreamLeader: the stream allows direct gets, and a
// mirror of it answers them too (here one that holds only the identity
// events, standing in for a replica or a mirror behind the leader). The
// sink resumes after the stream's last message at every session: read
// from anything but the stream's leader, that message may be an older
// one, and the events after it, already in the stream, are published
// again; past the duplicate window (short here, and passed before each
// restart) they land twice. Over restarts the stream must still hold
// every event once, in order.
func TestSinkResumeReadsTheStreamLeader(t *testing.T) {
	c := natstest.Start(t, 1)
	js := jsConnect(t, c.URLs())
	ctx := ctxT(t)
	const window = 100 * time.Millisecond
	stream := createStream(t, js, jetstream.StreamConfig{AllowDirect: true, Duplicates: window})
	mirror, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "bsmirror", MirrorDirect: true,
		Mirror: &jetstream.StreamSource{Name: DefaultStream, FilterSubject: DefaultStream + ".identity"}})
	if err != nil {
		t.Fatal(err)
	}
	wd := newWorld(t)
	if err := wd.commit(ctx, 50); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs()})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	promtest.Eventually(t, 30*time.Second, "the mirror holds the identity events", func() bool {
		info, err := mirror.Info(ctx)
		return err == nil && info.State.Msgs == 10
	})
	// Each restart reads the last message once or more; the mirror and
	// the stream answer in turn, as the servers pick.
	for range 8 {
		rs.stop()
		promtest.Eventually(t, 30*time.Second, "the stream's last message is older than its duplicate window", func() bool {
			info, err := stream.Info(ctx)
			return err == nil && info.TimeStamp.Sub(info.State.LastTime) > window
		})
		if err := wd.commit(ctx, 3); err != nil { // not an identity event last
			t.Fatal(err)
		}
		rs = wd.startSink(t, Config{URLs: c.URLs()})
		rs.logStatusOnFailure(t)
		rs.waitCaughtUp(t, wd, 30*time.Second)
	}
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}
