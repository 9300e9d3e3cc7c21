package retry

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/cockroachdb/pebble/vfs"
)

// lostWriter accepts units and loses them: no receipt ever comes.
type lostWriter struct{ *archive.Writer }

func (lostWriter) Submit(context.Context, *archive.Unit) error { return nil }

type noJobs struct{}

func (noJobs) Run(context.Context, backfill.Request) (backfill.Result, error) {
	return backfill.Result{}, errors.New("no jobs here")
}

func newTestExec(t *testing.T, w Writer, s *archive.Store) *exec {
	t.Helper()
	r, err := New(Config{Store: s, Writer: w, Jobs: noJobs{}})
	if err != nil {
		t.Fatal(err)
	}
	return &exec{r: r, ctx: context.Background()}
}

// TestRunnerUnitsWaitUntilDurable (S6, S9): the runner's own units are
// waited for: the stale failure is durable when failStale returns; a
// writer that stops before the unit is durable, or a refused unit, is an
// error, never a silent success.
func TestRunnerUnitsWaitUntilDurable(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet, CacheSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	const did = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	if _, err := w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: did,
		Fields: archive.FieldStatus | archive.FieldActive, State: archive.RepoState{Status: archive.StatusComplete, Active: true}}}}); err != nil {
		t.Fatal(err)
	}

	if err := newTestExec(t, w, s).failStale(did, 4, errors.New("newer")); err != nil {
		t.Fatal(err)
	}
	if st, err := s.RepoState(did); err != nil || st.Status != archive.StatusFailed || st.ErrClass != ClassStale {
		t.Fatalf("after failStale: %+v, %v", st, err)
	}

	acks := archive.NewAcks()
	if err := w.Submit(context.Background(), &archive.Unit{Acks: acks, Puts: []archive.KV{{Key: archive.KeyCounts, Value: []byte{1}}}}); err != nil {
		t.Fatal(err)
	}
	if err := newTestExec(t, w, s).wait(acks); err == nil || !strings.Contains(err.Error(), "unit refused") {
		t.Fatalf("wait over a refused unit: %v", err)
	}

	w.Close()
	if err := newTestExec(t, lostWriter{w}, s).failStale(did, 4, errors.New("newer")); !errors.Is(err, archive.ErrClosed) {
		t.Fatalf("failStale with the writer stopped before its unit was durable: %v, want ErrClosed", err)
	}
}
