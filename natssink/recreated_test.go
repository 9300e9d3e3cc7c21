package natssink

// The stream deleted under a running sink and re-created by the operator
// with another config.

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/promtest"
)

// TestSinkStreamRecreated: the operator deletes the stream while the sink
// publishes and creates it again with subjects that do not take the
// sink's. The sink shows why its publishes fail
// and how the stream differs; once the subjects are put right it fills the
// new stream from --nats-from, every event once, in order.
func TestSinkStreamRecreated(t *testing.T) {
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	ctx := ctxT(t)
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	rs := wd.startSink(t, Config{URLs: c.URLs(), DuplicateWindow: 500 * time.Millisecond})
	rs.logStatusOnFailure(t)
	rs.waitCaughtUp(t, wd, 30*time.Second)
	js := jsConnect(t, c.URLs())
	if err := js.DeleteStream(ctx, DefaultStream); err != nil {
		t.Fatal(err)
	}
	cfg := jetstream.StreamConfig{Name: DefaultStream, Subjects: []string{"elsewhere.>"}, Storage: jetstream.FileStorage,
		Duplicates: 500 * time.Millisecond}
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if err := wd.commit(ctx, 20); err != nil {
		t.Fatal(err)
	}
	promtest.Eventually(t, 30*time.Second, "the sink shows the new stream's subjects", func() bool {
		st := rs.s.Status()
		return st.State != StatePublishing && containsAny(st.ConfigDiffs, "do not include backstream.>") && st.LastError != ""
	})
	if st := rs.s.Status(); !strings.Contains(st.LastError, "no stream takes the subject") {
		t.Errorf("while the subjects are wrong, the last error %q does not say no stream takes the subject", st.LastError)
	}
	cfg.Subjects = []string{DefaultStream + ".>"}
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	rs.waitCaughtUp(t, wd, 30*time.Second)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
	if d := strings.Join(rs.s.Status().ConfigDiffs, "; "); strings.Contains(d, "subjects") {
		t.Errorf("differences %q after the subjects were put right", d)
	}
}
