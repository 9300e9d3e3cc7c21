package archive

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"

	"github.com/backstream/backstream/internal/cputime"
)

// rawRows writes a benchmark's fixture straight into a store, without a
// writer (no index, no counts), in unsynced batches of about 16 MiB; done
// commits the last one synced.
type rawRows struct {
	tb testing.TB
	s  *Store
	b  *pebble.Batch
}

func newRawRows(tb testing.TB, s *Store) *rawRows { return &rawRows{tb: tb, s: s, b: s.db.NewBatch()} }

func (r *rawRows) set(k, v []byte) {
	_ = r.b.Set(k, v, nil)
	if r.b.Len() > 16<<20 {
		if err := r.b.Commit(pebble.NoSync); err != nil {
			r.tb.Fatal(err)
		}
		r.b = r.s.db.NewBatch()
	}
}

// event sets ev's row under seq i+1 (its time i+1 µs).
func (r *rawRows) event(i int, ev Event) {
	ev.Seq, ev.TimeUS = uint64(i+1), int64(i+1)
	v, err := AppendEvent(nil, &ev)
	if err != nil {
		r.tb.Fatal(err)
	}
	r.set(EventKey(ev.Seq), v)
}

func (r *rawRows) done() {
	if err := r.b.Commit(pebble.Sync); err != nil {
		r.tb.Fatal(err)
	}
}

// writeRawRepos writes n repo/ rows straight into s (every other one
// failed and due, with its due/ entry), and, with events, one ev/ row of
// each account; then compacts them into the bottom level, as a store that
// has run for a while holds them. It returns the counts they make.
func writeRawRepos(b *testing.B, s *Store, n int, events bool) Counts {
	b.Helper()
	var c Counts
	rows := newRawRows(b, s)
	for i := 0; i < n; i++ {
		st := RepoState{Status: StatusComplete, Active: true, Host: fmt.Sprintf("pds%d.test", i%1000)}
		if i%2 == 0 {
			st.Status, st.NextAttemptUS, st.ErrClass, st.Attempts = StatusFailed, int64(i), "transient", 1
			rows.set(DueKey(st.NextAttemptUS, didN(i)), []byte(st.Host))
		}
		c.ByStatus[st.Status]++
		v, err := EncodeRepoState(st)
		if err != nil {
			b.Fatal(err)
		}
		rows.set(RepoKey(didN(i)), v)
		if events {
			rows.event(i, realisticEvent(i))
		}
	}
	rows.done()
	if err := s.db.Compact([]byte("a"), []byte("z"), true); err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkOpenBuildsDueIndex is the first open of a store from a build
// before the due index: one read of every repo/ row (b.N, every other one
// retryable) before Open returns. Reported per repo, in CPU.
func BenchmarkOpenBuildsDueIndex(b *testing.B) {
	fs := vfs.NewMem()
	s := openMem(b, fs)
	writeRawRepos(b, s, b.N, false)
	if err := s.db.Delete(KeyDueIndex, pebble.Sync); err != nil {
		b.Fatal(err)
	}
	s.Close()
	b.ResetTimer()
	cpu0 := cputime.Process(b)
	s = openMem(b, fs)
	b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/repo")
	b.StopTimer()
	s.Close()
}

// BenchmarkWriterRebuildsFailureAggregates is the first writer start on a
// store whose meta/counts predates the failure aggregates: one read of
// every repo/ row (b.N, every other one failed over 1,000 hosts) before
// NewWriter returns. Reported per repo, in CPU.
func BenchmarkWriterRebuildsFailureAggregates(b *testing.B) {
	fs := vfs.NewMem()
	s := openMem(b, fs)
	c := writeRawRepos(b, s, b.N, false)
	if err := s.db.Set(KeyCounts, countsV1(c), pebble.Sync); err != nil {
		b.Fatal(err)
	}
	s.Close()
	s = openMem(b, fs)
	defer s.Close()
	b.ResetTimer()
	cpu0 := cputime.Process(b)
	w, err := NewWriter(s, WriterOptions{Logger: quietLogger})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(cputime.MicrosPerOp(b, cpu0), "cpu-µs/repo")
	b.StopTimer()
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRestart is a start of a store with every index built: Open, a
// writer's start and Close, b.N times, over stores of 10,000 and 1,000,000
// accounts (a repo/ row, a due/ entry for every other one, an ev/ row
// each). Reported per restart, in CPU: what a restart costs does not grow
// with the store.
func BenchmarkRestart(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("accounts=%d", n), func(b *testing.B) {
			fs := vfs.NewMem()
			s := openMem(b, fs)
			c := writeRawRepos(b, s, n, true)
			v, err := EncodeCounts(countsWithClasses(c))
			if err != nil {
				b.Fatal(err)
			}
			if err := s.db.Set(KeyCounts, v, pebble.Sync); err != nil {
				b.Fatal(err)
			}
			s.Close()
			b.ResetTimer()
			cpu0 := cputime.Process(b)
			for i := 0; i < b.N; i++ {
				s := openMem(b, fs)
				w, err := NewWriter(s, WriterOptions{Logger: quietLogger})
				if err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0)/1000, "cpu-ms/restart")
		})
	}
}

// countsWithClasses is c with its failed repos in the one class
// writeRawRepos gives them.
func countsWithClasses(c Counts) Counts {
	c.FailedByClass = map[string]int64{}
	if n := c.ByStatus[StatusFailed]; n > 0 {
		c.FailedByClass["transient"] = n
	}
	return c
}

// BenchmarkRosterEntries is one read of a roster of 30,000 host/ rows (the
// network's PDS count), which /status and the roster gauge make once after
// each roster recorded (bootstrap.RosterView), not at each report or
// scrape. Reported per read, in CPU.
func BenchmarkRosterEntries(b *testing.B) {
	const hosts = 30_000
	s := openMem(b, vfs.NewMem())
	defer s.Close()
	rows := newRawRows(b, s)
	for i := 0; i < hosts; i++ {
		v, err := EncodeHostState(HostState{Status: "active", Accounts: uint64(i), Seq: uint64(i), Failures: uint64(i % 3)})
		if err != nil {
			b.Fatal(err)
		}
		rows.set(HostKey(fmt.Sprintf("pds%06d.host.test", i)), v)
	}
	rows.done()
	if err := s.db.Compact([]byte("a"), []byte("z"), true); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	cpu0 := cputime.Process(b)
	for i := 0; i < b.N; i++ {
		got, err := s.RosterEntries()
		if err != nil || len(got) != hosts {
			b.Fatalf("%d hosts, %v", len(got), err)
		}
	}
	b.ReportMetric(cputime.MicrosPerOp(b, cpu0)/1000, "cpu-ms/read")
}
