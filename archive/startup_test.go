package archive

// The one-time reads of a whole family that a start of a store from an
// older build makes before it serves (the due index's build, the failure
// aggregates' rebuild, the marks of the accounts resynced before the
// compaction index) block the start for minutes at the network's size: each
// must say so before it starts, not only once it is done.

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/internal/storefault"
)

// readsAtLine is a slog.Handler that notes, for every line, how many
// sstable reads the store's callers (not Pebble's background jobs) had
// made when it was logged.
type readsAtLine struct {
	reads *storefault.ReadFault // armed never to fail: a counter
	mu    sync.Mutex
	lines []lineAt
}

type lineAt struct {
	msg   string
	reads int64
}

func newReadsAtLine() *readsAtLine {
	rf := storefault.NewReadFault()
	rf.FailFromNth(math.MaxInt)
	return &readsAtLine{reads: rf}
}

func (h *readsAtLine) Enabled(context.Context, slog.Level) bool { return true }
func (h *readsAtLine) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *readsAtLine) WithGroup(string) slog.Handler            { return h }
func (h *readsAtLine) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.lines = append(h.lines, lineAt{msg: r.Message, reads: h.reads.Reads()})
	h.mu.Unlock()
	return nil
}

// first is the first line containing word (ok false: none).
func (h *readsAtLine) first(word string) (lineAt, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.lines {
		if strings.Contains(l.msg, word) {
			return l, true
		}
	}
	return lineAt{}, false
}

// startupRepos is how many repo/ rows the stores below hold: enough that
// one read of them is hundreds of block reads, against the handful a start
// makes otherwise.
const startupRepos = 60_000

// inUnits applies startupRepos rows through a writer, in units of 1,000:
// add puts row i into its unit.
func inUnits(t *testing.T, s *Store, add func(i int, u *Unit)) {
	t.Helper()
	w := newWriter(t, s, WriterOptions{})
	for lo := 0; lo < startupRepos; lo += 1000 {
		u := &Unit{}
		for i := lo; i < lo+1000; i++ {
			add(i, u)
		}
		apply(t, w, u)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// seedManyRepos writes startupRepos repo states, every other one failed
// and due (retryable).
func seedManyRepos(t *testing.T, s *Store) {
	t.Helper()
	inUnits(t, s, func(i int, u *Unit) {
		st := RepoState{Status: StatusComplete, Active: true, Host: fmt.Sprintf("pds%d.test", i%7)}
		if i%2 == 0 {
			st.Status, st.NextAttemptUS, st.ErrClass = StatusFailed, int64(i), "transient"
		}
		u.Repos = append(u.Repos, RepoUpdate{DID: didN(i), Fields: FieldStatus | FieldActive | FieldHost | FieldNextAttempt | FieldError, State: st})
	})
}

// closeFlushed flushes s to sstables and closes it, so that the next open
// reads the rows from tables, through the filesystem.
func closeFlushed(t *testing.T, s *Store) {
	t.Helper()
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// countsV1 is meta/counts as a build before the failure aggregates wrote it.
func countsV1(c Counts) []byte {
	v := []byte{codecV1}
	for st := RepoStatus(1); st < numRepoStatus; st++ {
		v = binary.AppendUvarint(v, uint64(c.ByStatus[st]))
	}
	return binary.AppendUvarint(v, uint64(c.Inactive))
}

// olderRows writes startupRepos ev/ rows and drops meta/index, as a build
// before the compaction index left its store: the next open reads every
// row once for the accounts an older replacement reset.
func olderRows(t *testing.T, s *Store) {
	t.Helper()
	inUnits(t, s, func(i int, u *Unit) { u.Events = append(u.Events, realisticEvent(i)) })
	if err := s.db.Delete(KeyIndex, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

// TestStartAnnouncesWholeFamilyReads: every one-time read of a whole family
// at a start (the due index's build in Open, the failure aggregates'
// rebuild in NewWriter, the marks of the accounts resynced before the
// compaction index in Open) logs its line before it reads, so an operator
// watching a silent start knows why it waits. Observed through the store's
// sstable reads when the line is logged: at most a quarter of the step's.
func TestStartAnnouncesWholeFamilyReads(t *testing.T) {
	for _, tc := range []struct {
		name string
		word string // in the line that must come first
		// older rewrites the store as an older build left it.
		older func(t *testing.T, s *Store)
		// writer: the step is NewWriter, after Open; otherwise Open.
		writer bool
	}{
		{name: "due index", word: "due index", older: func(t *testing.T, s *Store) {
			if err := s.db.Delete(KeyDueIndex, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "failure aggregates", word: "failure aggregates", writer: true, older: func(t *testing.T, s *Store) {
			c, err := s.Counts()
			if err != nil {
				t.Fatal(err)
			}
			b := s.db.NewBatch()
			_ = b.Set(KeyCounts, countsV1(c), nil)
			_ = b.DeleteRange(PrefixHostRank, prefixEnd(PrefixHostRank), nil)
			if err := b.Commit(pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "older replacements", word: "reading every archived row", older: olderRows},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := openMem(t, fs)
			seedManyRepos(t, s)
			tc.older(t, s)
			closeFlushed(t, s)

			h := newReadsAtLine()
			opts := testOptions(errorfs.Wrap(fs, h.reads))
			opts.Logger = slog.New(h)
			s, err := Open("/data", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			base := int64(0)
			if tc.writer {
				base = h.reads.Reads()
				w, err := NewWriter(s, WriterOptions{Logger: opts.Logger})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			total := h.reads.Reads() - base
			l, ok := h.first(tc.word)
			if !ok {
				t.Fatalf("no line mentions %q (the step ran: %d sstable reads)", tc.word, total)
			}
			at := l.reads - base
			t.Logf("%q after %d of %d sstable reads", l.msg, at, total)
			if at > total/4 {
				t.Fatalf("the first line about the %s (%q) came after %d of the step's %d sstable reads: it must come before the read", tc.name, l.msg, at, total)
			}
		})
	}
}

// TestOpenReportsItsReadOfEveryRow: the read of every ev/ row that the
// first open of a store from a build before the compaction index makes
// (hours from disk at the network's size) logs where it is every
// openProgressEvery of the store's clock, not only when it starts and
// ends. The clock advances a third of that interval each time it is read.
func TestOpenReportsItsReadOfEveryRow(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	olderRows(t, s)
	closeFlushed(t, s)

	h := newReadsAtLine()
	opts := testOptions(errorfs.Wrap(fs, h.reads))
	opts.Logger = slog.New(h)
	at := time.UnixMicro(1_000_000)
	opts.Now = func() time.Time {
		at = at.Add(openProgressEvery / 3)
		return at
	}
	s, err := Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	var progress []int64 // sstable reads at each progress line
	for _, l := range h.lines {
		if strings.Contains(l.msg, "still reading every archived row") {
			progress = append(progress, l.reads)
		}
	}
	total := h.reads.Reads()
	if len(progress) < 2 {
		t.Fatalf("the read of %d rows (%d sstable reads, the clock read at every %d rows) logged %d progress lines, want at least 2",
			startupRepos, total, resyncedProgressRows, len(progress))
	}
	// The clock is read once every resyncedProgressRows rows and moves a
	// third of the interval each time: a line every third reading at most.
	if most := startupRepos/resyncedProgressRows/3 + 1; len(progress) > most {
		t.Fatalf("the read of %d rows logged %d progress lines, want at most %d (one every %v of the clock)",
			startupRepos, len(progress), most, openProgressEvery)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] || progress[i] >= total {
			t.Fatalf("progress lines at sstable reads %v of %d: want them during the read, each after more of it", progress, total)
		}
	}
}
