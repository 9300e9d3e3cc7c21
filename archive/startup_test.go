package archive

// The one-time reads of a whole family that a start of a store from an
// older build makes before it serves (the due index's build, the failure
// aggregates' rebuild, the marks of the accounts resynced before the
// compaction index) block the start for minutes at the network's size: each
// must say so before it starts, not only once it is done.

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
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

// olderStore is a store of startupRepos repos as an older build left it,
// whose next start makes one of the one-time reads of a whole family.
type olderStore struct {
	name string
	step string // as Startup names it
	word string // in the line that announces it
	// older rewrites the store as an older build left it.
	older func(t *testing.T, s *Store)
	// writer: the step is NewWriter, after Open; otherwise Open.
	writer bool
}

// olderStores are the stores of every one-time read of Open and NewWriter.
func olderStores() []olderStore {
	return []olderStore{
		{name: "due index", step: StepDueIndex, word: "due index", older: func(t *testing.T, s *Store) {
			if err := s.db.Delete(KeyDueIndex, pebble.Sync); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "failure aggregates", step: StepFailureAggregates, word: "failure aggregates", writer: true, older: func(t *testing.T, s *Store) {
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
		{name: "older replacements", step: StepOlderReplacements, word: "reading every archived row", older: olderRows},
	}
}

// writeOlder writes tc's store on a new in-memory filesystem, every row in
// sstables, and returns the filesystem.
func writeOlder(t *testing.T, tc olderStore) vfs.FS {
	t.Helper()
	fs := vfs.NewMem()
	s := openMem(t, fs)
	seedManyRepos(t, s)
	tc.older(t, s)
	closeFlushed(t, s)
	return fs
}

// TestStartAnnouncesWholeFamilyReads: every one-time read of a whole family
// at a start (the due index's build in Open, the failure aggregates'
// rebuild in NewWriter, the marks of the accounts resynced before the
// compaction index in Open) logs its line before it reads, so an operator
// watching a silent start knows why it waits. Observed through the store's
// sstable reads when the line is logged: at most a quarter of the step's.
func TestStartAnnouncesWholeFamilyReads(t *testing.T) {
	for _, tc := range olderStores() {
		t.Run(tc.name, func(t *testing.T) {
			fs := writeOlder(t, tc)

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
			startupRepos, total, startupProgressRows, len(progress))
	}
	// The clock is read once every startupProgressRows rows and moves a
	// third of the interval each time: a line every third reading at most.
	if most := startupRepos/startupProgressRows/3 + 1; len(progress) > most {
		t.Fatalf("the read of %d rows logged %d progress lines, want at most %d (one every %v of the clock)",
			startupRepos, len(progress), most, openProgressEvery)
	}
	for i := 1; i < len(progress); i++ {
		if progress[i] <= progress[i-1] || progress[i] >= total {
			t.Fatalf("progress lines at sstable reads %v of %d: want them during the read, each after more of it", progress, total)
		}
	}
}

// TestStartShowsEachStep: every one-time read of Open and NewWriter shows
// itself in Options.Startup while it reads (what serve's /status and
// backstream_startup_step report): its step, since when, the line that
// announced it, the rows read so far, moving, and the rows to read; none
// once the store (or the writer) is open. Observed at every reading of the
// step's clock, which the step reads when it shows its rows.
func TestStartShowsEachStep(t *testing.T) {
	for _, tc := range olderStores() {
		t.Run(tc.name, func(t *testing.T) {
			fs := writeOlder(t, tc)
			rep := &Startup{}
			var mu sync.Mutex // the disk guard reads the clock on Pebble's goroutines
			var seen []StartupStep
			clock := func() time.Time {
				if st, ok := rep.Current(); ok {
					mu.Lock()
					seen = append(seen, st)
					mu.Unlock()
				}
				return time.Now()
			}
			opts := testOptions(fs)
			opts.Startup, opts.Now = rep, clock
			s, err := Open("/data", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if tc.writer {
				w, err := NewWriter(s, WriterOptions{Logger: quietLogger, Now: clock})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
			}
			if st, ok := rep.Current(); ok {
				t.Fatalf("once started, the report still shows %+v", st)
			}
			mu.Lock()
			defer mu.Unlock()
			least, most := int64(-1), int64(-1)
			for _, st := range seen {
				if st.Step != tc.step || st.Since.IsZero() || !strings.Contains(st.Message, tc.word) || st.RowsTotal != startupRepos {
					t.Fatalf("during the %s the report showed %+v: want step %s, a start, the line about the %s, %d rows to read",
						tc.name, st, tc.step, tc.word, startupRepos)
				}
				if least < 0 {
					least = st.RowsRead
				}
				most = st.RowsRead
			}
			t.Logf("%d readings of the clock during the step: rows read %d to %d of %d", len(seen), least, most, startupRepos)
			if len(seen) < 2 || most <= least {
				t.Fatalf("the %s showed %d readings, rows read %d to %d: want it shown, its rows read moving", tc.name, len(seen), least, most)
			}
		})
	}
}

// TestOpenLogsWALReplay: Open logs, once, how long Pebble's own open took
// and the write-ahead logs it replayed (files, bytes, keys): after a crash
// with a full memtable that replay, and the flush of what it read, is the
// one wait of a start that none of its steps reports. A store closed with
// its rows still in the log replays them all on the next open; one opened
// again right after replays next to nothing.
func TestOpenLogsWALReplay(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	const keys, valueBytes = 2000, 1000
	b := s.db.NewBatch()
	for i := 0; i < keys; i++ {
		_ = b.Set([]byte(fmt.Sprintf("zz/%06d", i)), make([]byte, valueBytes), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // Pebble's Close leaves the memtable to its log
		t.Fatal(err)
	}
	opened := func() map[string]any {
		t.Helper()
		var buf bytes.Buffer
		opts := testOptions(fs)
		opts.Logger = slog.New(slog.NewJSONHandler(&buf, nil))
		s, err := Open("/data", opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		var found []map[string]any
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err == nil && rec["msg"] == "store opened" {
				found = append(found, rec)
			}
		}
		if len(found) != 1 {
			t.Fatalf("Open logged %d lines \"store opened\" (with its duration and the write-ahead logs it replayed), want 1; the log:\n%s", len(found), buf.String())
		}
		return found[0]
	}
	num := func(rec map[string]any, k string) float64 {
		t.Helper()
		v, ok := rec[k].(float64)
		if !ok {
			t.Fatalf("the line %v has no number %s", rec, k)
		}
		return v
	}
	first := opened()
	if _, ok := first["took"]; !ok {
		t.Fatalf("the line %v does not say how long the open took", first)
	}
	if f, by, k := num(first, "wal_files_replayed"), num(first, "wal_bytes_replayed"), num(first, "wal_keys_replayed"); f < 1 || by < keys*valueBytes || k < keys {
		t.Fatalf("after %d keys of %d bytes left in the log, the open says it replayed %v files, %v bytes, %v keys: want at least 1, %d, %d",
			keys, valueBytes, f, by, k, keys*valueBytes, keys)
	}
	if k := num(opened(), "wal_keys_replayed"); k >= keys {
		t.Fatalf("an open right after an open replayed %v keys: want fewer than the %d the first one replayed", k, keys)
	}
}
