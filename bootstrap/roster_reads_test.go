package bootstrap

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/upstream"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"
)

// rosterReadsStore is memStore whose sstable reads rf counts, with a block
// cache too small to keep a block: every block a read needs is read from
// its file, so rf's count follows the rows read.
func rosterReadsStore(t *testing.T) (*archive.Store, *archive.Writer, *storefault.ReadFault) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	rf := storefault.NewReadFault()
	s, err := archive.Open("/data", archive.Options{FS: errorfs.Wrap(vfs.NewMem(), rf), Logger: quiet, CacheSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return s, w, rf
}

// rosterOf is a roster of n hosts, every status of listHosts's in turn.
func rosterOf(n int) Roster {
	entries := make([]upstream.HostEntry, n)
	for i := range entries {
		entries[i] = upstream.HostEntry{Host: fmt.Sprintf("pds%06d.test", i), Status: RosterStatuses()[i%5], Accounts: int64(i + 1)}
	}
	return Roster{Entries: entries}
}

// TestRosterScrapeReadsNoHostRows: a scrape of backstream_roster_hosts
// (every 15 s from each Prometheus replica, every 10 s for the status
// page's history) reads no host/ row while no roster entry changed since
// the last read: a roster may name 1,000,000 hosts, and every host a
// failed repo was last fetched from has a row, so a read of them all at
// every scrape would cost in proportion. A failed repo's host and a park
// change no roster entry; a roster recorded does, and the next scrape
// shows it.
func TestRosterScrapeReadsNoHostRows(t *testing.T) {
	const hosts = 20_000
	ctx := context.Background()
	s, w, rf := rosterReadsStore(t)
	if _, err := RecordRoster(ctx, w, s, rosterOf(hosts)); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewRosterCollector(s))
	scrape := func(status string) (float64, int64) {
		t.Helper()
		rf.FailFromNth(math.MaxInt) // counts, never fails
		v := promtest.Value(t, reg, "backstream_roster_hosts", map[string]string{"status": status})
		return v, rf.Reads()
	}
	if v, _ := scrape("active"); v != hosts/5 {
		t.Fatalf("backstream_roster_hosts{status=active} = %v, want %d", v, hosts/5)
	}
	// The bound: a block or two whatever the hosts; a read of the 20,000
	// rows reads some 20 blocks of 32 KiB.
	const bound = 2
	if v, n := scrape("active"); v != hosts/5 || n > bound {
		t.Fatalf("a scrape of backstream_roster_hosts with %d roster hosts recorded, none changed since the last scrape: %d sstable reads (active %v); want at most %d, whatever the hosts",
			hosts, n, v, bound)
	}
	failed := archive.HostUpdate{Host: "pds000007.test", Func: func(h archive.HostState) archive.HostState { h.Failures++; return h }}
	parked := archive.HostUpdate{Host: "pds000008.test", Func: func(h archive.HostState) archive.HostState { h.ParkedUntilUS = 1; return h }}
	if rc, err := w.Apply(ctx, &archive.Unit{Hosts: []archive.HostUpdate{failed, parked}}); err != nil || rc.Refused != nil {
		t.Fatal(err, rc.Refused)
	}
	if v, n := scrape("active"); v != hosts/5 || n > bound {
		t.Fatalf("a scrape after a failure and a park, no roster entry changed: %d sstable reads (active %v); want at most %d", n, v, bound)
	}
	rr := rosterOf(hosts)
	rr.Entries = rr.Entries[:hosts/2]
	rr.Entries[0].Status = "idle"
	if _, err := RecordRoster(ctx, w, s, rr); err != nil {
		t.Fatal(err)
	}
	if v, _ := scrape(RosterLeft); v != hosts/2 {
		t.Fatalf("after a whole roster naming %d of the %d hosts: backstream_roster_hosts{status=left} = %v, want %d", hosts/2, hosts, v, hosts/2)
	}
	if v, _ := scrape("active"); v != hosts/10-1 {
		t.Fatalf("after a roster in which the first active host went idle: backstream_roster_hosts{status=active} = %v, want %d", v, hosts/10-1)
	}
}

// BenchmarkRosterScrape is one scrape of backstream_roster_hosts with a
// roster of 30,000 hosts (the network's PDS count) and of 1,000,000 (the
// most a roster read records), written through the writer and flushed,
// none changed between scrapes. Reported per scrape, in process CPU.
func BenchmarkRosterScrape(b *testing.B) {
	for _, hosts := range []int{30_000, 1_000_000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			s, w := memStore(b)
			if _, err := RecordRoster(context.Background(), w, s, rosterOf(hosts)); err != nil {
				b.Fatal(err)
			}
			if err := s.DB().Flush(); err != nil {
				b.Fatal(err)
			}
			reg := prometheus.NewRegistry()
			reg.MustRegister(NewRosterCollector(s))
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			cpu0 := cputime.Process(b)
			for i := 0; i < b.N; i++ {
				if _, err := reg.Gather(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0)/1000, "cpu-ms/scrape")
		})
	}
}

// TestRosterViewFollowsAccountCounts: a kept view sees a roster recorded
// again with only its account counts changed: a roster without counts
// lists the relay in the default mode (the hosts under EnumerateHosts),
// the same roster with counts lists its hosts, and the view says so at
// its next read.
func TestRosterViewFollowsAccountCounts(t *testing.T) {
	ctx := context.Background()
	s, w := memStore(t)
	view := NewRosterView(s)
	rr := rosterOf(10)
	for i := range rr.Entries {
		rr.Entries[i].Accounts = 0
	}
	if _, err := RecordRoster(ctx, w, s, rr); err != nil {
		t.Fatal(err)
	}
	sum, err := view.Read()
	if err != nil || sum.ListsHosts("") || !sum.ListsHosts(EnumerateHosts) || sum.ListsHosts(EnumerateRelay) || sum.ByStatus["active"] != 2 {
		t.Fatalf("a roster without account counts: %+v, %v; want the relay listed by default, the hosts under --enumerate hosts, 2 active", sum, err)
	}
	if _, err := RecordRoster(ctx, w, s, rosterOf(10)); err != nil {
		t.Fatal(err)
	}
	if sum, err = view.Read(); err != nil || !sum.ListsHosts("") {
		t.Fatalf("the same roster recorded with account counts: %+v, %v; want its hosts listed by default", sum, err)
	}
}
