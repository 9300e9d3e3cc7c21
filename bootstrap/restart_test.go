package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/upstream"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// TestPendingPassFailsClosed: the restart pass reads repo/ through the
// store's fail-closed scan, so a malformed repo state stops it with
// ErrMalformed naming the key — never skipped, never a default.
func TestPendingPassFailsClosed(t *testing.T) {
	s, w := memStore(t)
	if err := s.DB().Set(archive.RepoKey("did:plc:broken"), []byte{0x01, 0x09}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b := &Bootstrap{cfg: Config{Store: s, Writer: w, Logger: slog.New(slog.DiscardHandler)}}
	_, err := b.pendingPass(context.Background())
	if !errors.Is(err, archive.ErrMalformed) || !strings.Contains(err.Error(), "repo/did:plc:broken") {
		t.Fatalf("pending pass over a malformed repo state: %v; want ErrMalformed naming the key", err)
	}
}

// TestRecordReleasesWhatItDoesNotDispatch: recording a page reserves each
// active entry in the in-flight set; one the store already holds as done
// is not dispatched, and its reservation is released (kept, every repo of
// a store listed again would stay "in flight" for the run: never listed
// again by another host, held in memory).
func TestRecordReleasesWhatItDoesNotDispatch(t *testing.T) {
	s, w := memStore(t)
	const done, fresh = "did:plc:dddddddddddddddddddddddd", "did:plc:ffffffffffffffffffffffff"
	if _, err := w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: done, Fields: archive.FieldActive | archive.FieldStatus,
		State: archive.RepoState{Active: true, Status: archive.StatusComplete}}}}); err != nil {
		t.Fatal(err)
	}
	b := &Bootstrap{cfg: Config{Store: s, Writer: w}, inflight: map[string]attribution{}}
	msg, err := b.record(context.Background(), "", []upstream.RepoEntry{{DID: done, Active: true}, {DID: fresh, Active: true}}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.dispatch) != 1 || msg.dispatch[0] != fresh {
		t.Fatalf("dispatched %v, want only %s", msg.dispatch, fresh)
	}
	if _, held := b.inflight[done]; held || len(b.inflight) != 1 {
		t.Fatalf("in flight after the page: %v, want only %s", b.inflight, fresh)
	}
}

// memStore is a store in memory and its writer, closed with the test.
func memStore(t testing.TB) (*archive.Store, *archive.Writer) {
	t.Helper()
	return memStoreWith(t, nil)
}

// memStoreWith is memStore whose store shows its steps on startup (nil:
// none).
func memStoreWith(t testing.TB, startup *archive.Startup) (*archive.Store, *archive.Writer) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet, Startup: startup})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return s, w
}

// TestPendingPassAnnouncesItsRead: a restart in bootstrap reads every
// repo/ row before enumeration resumes (about 8 CPU-s at 40 million
// repos, the process silent otherwise); a line says so, with the repos
// counted, before the pass changes anything.
func TestPendingPassAnnouncesItsRead(t *testing.T) {
	s, w := memStore(t)
	const n = 100
	var ups []archive.RepoUpdate
	for i := range n {
		ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:restart%017d", i), Fields: archive.FieldActive | archive.FieldStatus,
			State: archive.RepoState{Active: true, Status: archive.StatusNotStarted}})
	}
	if _, err := w.Apply(context.Background(), &archive.Unit{Repos: ups}); err != nil {
		t.Fatal(err)
	}
	h := &announceHandler{check: func() (archive.RepoState, error) { return s.RepoState(ups[0].DID) }}
	b := &Bootstrap{cfg: Config{Store: s, Writer: w, Logger: slog.New(h)}}
	changed, err := b.pendingPass(context.Background())
	if err != nil || changed != n {
		t.Fatalf("pending pass: %d changed, %v; want %d", changed, err, n)
	}
	if h.repos != n || h.seen.Status != archive.StatusNotStarted {
		t.Fatalf("the restart pass's line: repos %d, the first repo then %v (announced: %v); want %d repos, announced while still not_started",
			h.repos, h.seen.Status, h.announced, n)
	}
}

// TestPendingPassShowsItself: while the restart pass reads repo/, the
// store's startup report (serve's /status "startup") shows it: step
// restart_pass, since when, the line that announced it, the rows read so
// far, moving, and the repos counted; none once the pass has ended.
// Observed at every reading of the pass's clock, which it reads when it
// shows its rows.
func TestPendingPassShowsItself(t *testing.T) {
	rep := &archive.Startup{}
	s, w := memStoreWith(t, rep)
	const n = 10_000
	for lo := 0; lo < n; lo += 1000 {
		var ups []archive.RepoUpdate
		for i := lo; i < lo+1000; i++ {
			ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:restart%017d", i), Fields: archive.FieldActive | archive.FieldStatus,
				State: archive.RepoState{Active: true, Status: archive.StatusNotStarted}})
		}
		if _, err := w.Apply(context.Background(), &archive.Unit{Repos: ups}); err != nil {
			t.Fatal(err)
		}
	}
	var seen []archive.StartupStep
	clock := func() time.Time {
		if st, ok := rep.Current(); ok {
			seen = append(seen, st)
		}
		return time.Now()
	}
	b := &Bootstrap{cfg: Config{Store: s, Writer: w, Logger: slog.New(slog.DiscardHandler), Now: clock}}
	if changed, err := b.pendingPass(context.Background()); err != nil || changed != n {
		t.Fatalf("pending pass: %d changed, %v; want %d", changed, err, n)
	}
	if st, ok := rep.Current(); ok {
		t.Fatalf("after the pass the report still shows %+v", st)
	}
	least, most := int64(-1), int64(-1)
	for _, st := range seen {
		if st.Step != archive.StepRestartPass || st.Since.IsZero() || !strings.Contains(st.Message, "restart pass") || st.RowsTotal != n {
			t.Fatalf("during the restart pass the report showed %+v: want step %s, a start, its line, %d rows to read", st, archive.StepRestartPass, n)
		}
		if least < 0 {
			least = st.RowsRead
		}
		most = st.RowsRead
	}
	if len(seen) < 2 || most <= least {
		t.Fatalf("the restart pass showed %d readings, rows read %d to %d: want it shown, its rows read moving", len(seen), least, most)
	}
}

// announceHandler keeps, from the restart pass's first line, its repos
// and what check read of the store at that moment.
type announceHandler struct {
	check     func() (archive.RepoState, error)
	announced bool
	repos     int64
	seen      archive.RepoState
}

func (h *announceHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *announceHandler) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *announceHandler) WithGroup(string) slog.Handler            { return h }
func (h *announceHandler) Handle(_ context.Context, r slog.Record) error {
	if h.announced || !strings.HasPrefix(r.Message, "bootstrap: restart pass: reading") {
		return nil
	}
	h.announced = true
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "repos" {
			h.repos = a.Value.Int64()
		}
		return true
	})
	st, err := h.check()
	if err != nil {
		return err
	}
	h.seen = st
	return nil
}

// pausingWriter holds its pause-th Submit until release is closed, having
// closed paused.
type pausingWriter struct {
	*archive.Writer
	pause           int
	n               int
	paused, release chan struct{}
}

func (p *pausingWriter) Submit(ctx context.Context, u *archive.Unit) error {
	if p.n++; p.n == p.pause {
		close(p.paused)
		<-p.release
	}
	return p.Writer.Submit(ctx, u)
}

// TestRestartPassPinsNoTables: the restart pass submits its units while it
// walks repo/, and a unit waits whenever the writer is behind (the pass
// rewrites every repo it reads: tens of millions after an early restart).
// An iterator open across those waits pins every sstable and memtable it
// was opened on: each table a compaction makes obsolete meanwhile stays on
// disk (a zombie) until the walk ends. Paused in its second unit, after a
// flush and a compaction of the whole store, the pass must hold no zombie
// table. (Pebble keeps one flushed memtable for reuse, counted as a
// zombie with or without a reader: memtables are not judged here.)
func TestRestartPassPinsNoTables(t *testing.T) {
	s, w := memStore(t)
	const n = 5 * restartBatch
	for lo := 0; lo < n; lo += 1000 {
		var ups []archive.RepoUpdate
		for i := lo; i < min(lo+1000, n); i++ {
			ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:restart%017d", i), Fields: archive.FieldActive | archive.FieldStatus,
				State: archive.RepoState{Active: true, Status: archive.StatusNotStarted}})
		}
		if _, err := w.Apply(context.Background(), &archive.Unit{Repos: ups}); err != nil {
			t.Fatal(err)
		}
	}
	db := s.DB()
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	pw := &pausingWriter{Writer: w, pause: 2, paused: make(chan struct{}), release: make(chan struct{})}
	b := &Bootstrap{cfg: Config{Store: s, Writer: pw, Logger: slog.New(slog.DiscardHandler)}}
	type result struct {
		changed int
		err     error
	}
	done := make(chan result, 1)
	go func() {
		changed, err := b.pendingPass(context.Background())
		done <- result{changed, err}
	}()
	<-pw.paused
	// The writer applies units in order: once this one is durable, so is
	// the pass's first, which rewrote repos the flush below puts in a
	// table overlapping the seeded one (the compaction then rewrites
	// both, instead of moving the seeded table down whole).
	if _, err := w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: "did:plc:restart~", Fields: archive.FieldActive | archive.FieldStatus,
		State: archive.RepoState{Active: true, Status: archive.StatusComplete}}}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact([]byte{0}, []byte{0xff}, false); err != nil {
		t.Fatal(err)
	}
	m := db.Metrics()
	zombies, size := m.Table.ZombieCount, m.Table.ZombieSize
	close(pw.release)
	if r := <-done; r.err != nil || r.changed != n {
		t.Fatalf("restart pass: %d changed, %v; want %d", r.changed, r.err, n)
	}
	t.Logf("paused mid-walk, after a flush and a compaction: %d zombie tables (%d bytes)", zombies, size)
	if zombies != 0 {
		t.Fatalf("the restart pass, paused in a unit mid-walk, pins %d tables (%d bytes) a compaction made obsolete: want none (no iterator open across a unit)",
			zombies, size)
	}
}
