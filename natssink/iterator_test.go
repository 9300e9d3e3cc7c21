package natssink

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/natstest"
	"github.com/backstream/backstream/internal/storefault"
)

// stallPublishes holds the given publishes of the sink (numbered from 1 as
// they reach the proxy) until the test releases them: a cluster that has
// stopped answering. A held publish also holds every frame after it, and
// those before it that the proxy has not yet flushed.
type stallPublishes struct {
	at      map[int64]chan struct{}
	reached chan int64
	once    map[int64]*sync.Once
}

func newStall(at ...int64) *stallPublishes {
	s := &stallPublishes{at: map[int64]chan struct{}{}, reached: make(chan int64, len(at)), once: map[int64]*sync.Once{}}
	for _, n := range at {
		s.at[n], s.once[n] = make(chan struct{}), new(sync.Once)
	}
	return s
}

func (s *stallPublishes) decide() natstest.Decide {
	var pubs atomic.Int64
	return func(subject string) natstest.Action {
		if !strings.HasPrefix(subject, DefaultStream+".") {
			return natstest.Forward
		}
		n := pubs.Add(1)
		if ch, ok := s.at[n]; ok {
			s.reached <- n
			<-ch
		}
		return natstest.Forward
	}
}

func (s *stallPublishes) release(n int64) { s.once[n].Do(func() { close(s.at[n]) }) }

func (s *stallPublishes) releaseAll() {
	for n := range s.at {
		s.release(n)
	}
}

// waitHeld waits until the sink's n-th publish is held at the proxy.
func (s *stallPublishes) waitHeld(t *testing.T, n int64) {
	t.Helper()
	select {
	case got := <-s.reached:
		if got != n {
			t.Fatalf("publish %d held, want %d", got, n)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the sink never made publish %d", n)
	}
}

// TestSinkReleasesCompactedTables: the sink reads the history through a
// store iterator that pins every table it sees. Against a cluster that
// acknowledges slowly the sink waits with that iterator open; it must not
// hold it past iterMaxAge of its clock, or every table compacted away
// meanwhile stays on disk. The history is four flushed tables, read from
// the store (below the live log); the cluster stops answering at the
// sink's 100th publish, the store compacts the history under the open
// iterator, the sink's clock moves past iterMaxAge, and the cluster
// answers again until the 300th publish, where it stops once more: by then
// the sink must have released the compacted tables. At the end the stream
// holds every event once, in order, and no session failed: the reopen
// skipped none and repeated none (a repeat would be refused and resumed
// from, failing the session).
func TestSinkReleasesCompactedTables(t *testing.T) {
	c := natstest.Start(t, 1)
	stall := newStall(100, 300)
	proxy := natstest.StartProxy(t, c.Addr(0), stall.decide(), nil)
	t.Cleanup(stall.releaseAll) // before the proxy closes
	wd := newWorld(t)
	db := wd.store.DB()
	flushedHistory(t, wd, 4, 2000)
	var skew atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	rs := wd.startSink(t, Config{URLs: proxy.URL, Window: 64, AckTimeout: time.Hour, Now: now,
		Options: []nats.Option{nats.IgnoreDiscoveredServers()}})

	stall.waitHeld(t, 100)
	pinned := compactEvents(t, wd)
	skew.Add(int64(iterMaxAge + time.Second))
	stall.release(100)
	stall.waitHeld(t, 300)
	released := storefault.WaitReleased(db, 10*time.Second)
	if pinned <= 0 || released != 0 {
		t.Fatalf("tables compacted away under the sink's iterator: %d held at once, %d still held 200 publishes after its clock ran past %v; want some, then none",
			pinned, released, iterMaxAge)
	}
	stall.release(300)
	rs.waitCaughtUp(t, wd, time.Minute)
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
	if st := rs.s.Status(); st.Errors != 0 { // a repeat is refused, and resumed from, but never silently
		t.Errorf("%d session failures (last %q): the reopen must not disturb the session", st.Errors, st.LastError)
	}
}

// flushedHistory commits tables×perTable events, flushing each table's
// worth to its own sstable.
func flushedHistory(t *testing.T, wd *world, tables, perTable int) {
	t.Helper()
	for range tables {
		for range perTable / 100 {
			if err := wd.commit(ctxT(t), 100); err != nil {
				t.Fatal(err)
			}
		}
		if err := wd.store.DB().Flush(); err != nil {
			t.Fatal(err)
		}
	}
}

// compactEvents compacts the store's ev/ rows and returns how many of the
// tables it removed open iterators still hold.
func compactEvents(t *testing.T, wd *world) int64 {
	t.Helper()
	if err := wd.store.DB().Compact(archive.PrefixEvent, []byte("ev0"), false); err != nil { // '0' follows '/'
		t.Fatal(err)
	}
	return storefault.HeldTables(wd.store.DB())
}

// TestSinkCaughtUpHoldsNoIterator: a sink that has read the history from
// the store and caught up with the archive's tip holds no store iterator
// while it waits for new events, however long that is. With a window of
// one, every turn publishes one event, so the history's last turn ends
// exactly at the end of the iterator's span, where no read found its end.
func TestSinkCaughtUpHoldsNoIterator(t *testing.T) {
	c := natstest.Start(t, 1)
	wd := newWorld(t)
	flushedHistory(t, wd, 4, 500)
	rs := wd.startSink(t, Config{URLs: c.URLs(), Window: 1})
	rs.waitCaughtUp(t, wd, time.Minute)
	pinned := compactEvents(t, wd)
	if held := storefault.WaitReleased(wd.store.DB(), 10*time.Second); held != 0 {
		t.Fatalf("the caught-up sink holds %d tables compacted away after it caught up (%d right after the compaction); want none", held, pinned)
	}
	natstest.CheckStream(t, wd.store, natstest.ReadStream(t, c.URLs(), DefaultStream, natstest.ArchiveEvents(t, wd.store)), subjectOf(DefaultStream))
}
