package node_test

// A start on a store of the network's size (tens of millions of repo/
// rows, billions of ev/ rows, thousands of hosts) must serve and follow the
// firehose again promptly after a kill at any instant: nothing between the
// store's open and the live firehose's first dial may read a family whole.

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/node"
)

// steadyStore writes a steady-state store under dir on fs following
// relayHost: accounts repo/ rows through the writer (every 50th failed,
// due in an hour, so in the due index), 3,000 host/ rows and events ev/
// rows in batches, everything compacted into the bottom level as a store
// that has run for a while holds it.
func steadyStore(tb testing.TB, fs vfs.FS, dir, relayHost string, accounts, events int) {
	tb.Helper()
	s, err := archive.Open(dir, archive.Options{FS: fs, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	if err := s.SetRelay(relayHost, false); err != nil {
		tb.Fatal(err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	soon := time.Now().Add(time.Hour).UnixMicro()
	did := func(i int) string { return fmt.Sprintf("did:plc:scale%019d", i) }
	for lo := 0; lo < accounts; lo += 4096 {
		u := &archive.Unit{}
		for i := lo; i < min(lo+4096, accounts); i++ {
			st := archive.RepoState{Status: archive.StatusComplete, Active: true, Host: fmt.Sprintf("pds%04d.test", i%3000),
				BackfillRev: "3m000000000000", Records: 40, Bytes: 20_000}
			if i%50 == 0 {
				st.Status, st.ErrClass, st.NextAttemptUS, st.Attempts = archive.StatusFailed, "transient", soon+int64(i), 1
			}
			u.Repos = append(u.Repos, archive.RepoUpdate{DID: did(i), State: st,
				Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldError | archive.FieldNextAttempt |
					archive.FieldBackfillRev | archive.FieldRecords | archive.FieldBytes | archive.FieldAttempts})
		}
		if lo == 0 {
			u.Cursor = archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: 1}
		}
		if r, err := w.Apply(context.Background(), u); err != nil || r.Refused != nil {
			tb.Fatal(err, r.Refused)
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	b := s.DB().NewBatch()
	commit := func(last bool) {
		if last || b.Len() > 16<<20 {
			if err := b.Commit(pebble.NoSync); err != nil {
				tb.Fatal(err)
			}
			b = s.DB().NewBatch()
		}
	}
	for h := 0; h < 3000; h++ {
		v, err := archive.EncodeHostState(archive.HostState{Status: "active", Accounts: uint64(accounts / 3000), Seq: uint64(h)})
		if err != nil {
			tb.Fatal(err)
		}
		_ = b.Set(archive.HostKey(fmt.Sprintf("pds%04d.test", h)), v, nil)
	}
	rec := []byte(strings.Repeat("the quick brown fox jumps over the lazy dog ", 4))
	for i := 1; i <= events; i++ {
		ev := archive.Event{Seq: uint64(i), TimeUS: int64(i), Kind: archive.KindCreate, DID: did(i % max(accounts, 1)),
			Collection: "app.bsky.feed.post", RKey: fmt.Sprintf("3l%011d", i), Rev: fmt.Sprintf("3m%011d", i),
			CID: append([]byte{0x01, 0x71, 0x12, 0x20}, make([]byte, 32)...), Record: rec, Source: archive.SourceBackfill, UpstreamSeq: int64(i)}
		v, err := archive.AppendEvent(nil, &ev)
		if err != nil {
			tb.Fatal(err)
		}
		_ = b.Set(archive.EventKey(ev.Seq), v, nil)
		commit(false)
	}
	// The rows written here are as indexed as the writer leaves its own.
	m := archive.EncodeIndexMarker(archive.IndexMarker{Next: uint64(events) + 1, End: uint64(events) + 1})
	_ = b.Set(archive.KeyIndex, m, nil)
	_ = b.Set(archive.KeyReplayIndex, m, nil)
	commit(true)
	if err := s.CommitSteadyState(time.Now()); err != nil {
		tb.Fatal(err)
	}
	if err := s.DB().Compact([]byte{0}, []byte{0xff}, true); err != nil {
		tb.Fatal(err)
	}
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
}

// dialRelay is a relay that answers every request 503 and tells, once
// armed, the first dial of its firehose.
type dialRelay struct {
	*httptest.Server
	mu     sync.Mutex
	dialed chan struct{} // closed at the first dial since arm; nil: unarmed
}

func newDialRelay(tb testing.TB) *dialRelay {
	r := &dialRelay{}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if strings.Contains(req.URL.Path, "subscribeRepos") {
			r.mu.Lock()
			if r.dialed != nil {
				close(r.dialed)
				r.dialed = nil
			}
			r.mu.Unlock()
		}
		http.Error(w, "not a relay", http.StatusServiceUnavailable)
	}))
	tb.Cleanup(r.Close)
	return r
}

// arm returns a channel closed at the firehose's next dial.
func (r *dialRelay) arm() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dialed = make(chan struct{})
	return r.dialed
}

// host is the relay as the store records it.
func (r *dialRelay) host(tb testing.TB) string {
	u, err := url.Parse(r.URL)
	if err != nil {
		tb.Fatal(err)
	}
	return u.Host
}

// startReads is one start of a node on cfg: the sstable reads of the
// process's own goroutines (reads, a counter armed never to fail, wraps
// cfg's store) until node.New returns (the server serves /subscribe from
// the store then) and until the live firehose first dials; then it stops
// the node.
func startReads(tb testing.TB, cfg node.Config, reads *storefault.ReadFault, dialed <-chan struct{}) (atNew, atDial int64) {
	tb.Helper()
	reads.FailFromNth(math.MaxInt) // counts from here
	n, err := node.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	atNew = reads.Reads()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	select {
	case <-dialed:
	case err := <-done:
		tb.Fatalf("the node stopped before its firehose dialed: %v", err)
	case <-time.After(time.Minute):
		tb.Fatal("the live firehose did not dial within a minute")
	}
	atDial = reads.Reads()
	cancel()
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	if err := n.Close(); err != nil {
		tb.Fatal(err)
	}
	return atNew, atDial
}

// TestSteadyStartReadsNoFamilyWhole: a start in steady state reads no
// family whole before it serves and follows the firehose again. On a
// store of 200,000 accounts and 200,000 events, all in bottom-level
// sstables, node.New and Run up to the live firehose's first dial make at
// most startReadBound sstable reads (every read of the process's own
// goroutines, through the filesystem, with a cold block cache), while one
// read of repo/ alone takes many times that.
func TestSteadyStartReadsNoFamilyWhole(t *testing.T) {
	const startReadBound = 32
	relay := newDialRelay(t)
	mem := vfs.NewMem()
	steadyStore(t, mem, "/data", relay.host(t), 200_000, 200_000)

	reads := storefault.NewReadFault()
	fs := errorfs.Wrap(mem, reads)
	s, err := archive.Open("/data", archive.Options{FS: fs, Logger: quiet, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	reads.FailFromNth(math.MaxInt)
	repos := 0
	if err := s.ScanRepos(func(string, archive.RepoState) error { repos++; return nil }); err != nil {
		t.Fatal(err)
	}
	whole := reads.Reads()
	s.Close()
	if repos != 200_000 || whole < 4*startReadBound {
		t.Fatalf("one read of repo/ read %d repos in %d sstable reads: want 200000 in at least %d, for the bound below to mean something", repos, whole, 4*startReadBound)
	}

	cfg := memConfig(t, nil, archive.Options{FS: fs})
	cfg.Relay = relay.URL
	atNew, atDial := startReads(t, cfg, reads, relay.arm())
	if atDial > startReadBound {
		t.Fatalf("a steady-state start made %d sstable reads before it served and %d before its firehose dialed, want at most %d: it reads a family whole (one read of repo/ is %d)",
			atNew, atDial, startReadBound, whole)
	}
	t.Logf("a steady-state start: %d sstable reads to serve, %d to the firehose's dial; one read of repo/: %d", atNew, atDial, whole)
}

// BenchmarkSteadyStart is a start of a steady-state store of 1,000,000
// accounts and 5,000,000 events on the OS's filesystem (built once, about
// 45 s): node.New, Run up to the live firehose's first dial, and the
// stop, b.N times. Reported per start: CPU and the sstable reads to the
// dial (the block cache is cold at each start; the OS's page cache is not).
func BenchmarkSteadyStart(b *testing.B) {
	relay := newDialRelay(b)
	dir := b.TempDir()
	steadyStore(b, vfs.Default, dir, relay.host(b), 1_000_000, 5_000_000)
	reads := storefault.NewReadFault()
	cfg := node.Config{DataDir: dir, Store: archive.Options{FS: errorfs.Wrap(vfs.Default, reads)}, Relay: relay.URL, Logger: quiet}
	var total int64
	b.ResetTimer()
	cpu0 := cputime.Process(b)
	for i := 0; i < b.N; i++ {
		_, atDial := startReads(b, cfg, reads, relay.arm())
		total += atDial
	}
	b.ReportMetric(cputime.MicrosPerOp(b, cpu0)/1000, "cpu-ms/start")
	b.ReportMetric(float64(total)/float64(b.N), "sstable-reads/start")
}
