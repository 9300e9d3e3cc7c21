package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/upstream"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"
)

// TestServeStatusReadsNoHostRows: a build of serve's /status report (every
// 5 s while its page is open, every second under a burst) reads no host/
// row while no roster entry changed since the last build: its sstable
// reads with a roster of 20,000 hosts are those with a roster of 100. A
// roster may name 1,000,000 hosts, and every host a failed repo was last
// fetched from has a row.
func TestServeStatusReadsNoHostRows(t *testing.T) {
	reads := func(hosts int) int64 {
		t.Helper()
		rf := storefault.NewReadFault()
		quiet := slog.New(slog.DiscardHandler)
		store, err := archive.Open("/data", archive.Options{FS: errorfs.Wrap(vfs.NewMem(), rf), Logger: quiet, CacheSize: 1})
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		if err := seedUnit(w); err != nil {
			t.Fatal(err)
		}
		entries := make([]upstream.HostEntry, hosts)
		for i := range entries {
			entries[i] = upstream.HostEntry{Host: fmt.Sprintf("pds%06d.test", i), Status: "active", Accounts: int64(i + 1)}
		}
		if _, err := bootstrap.RecordRoster(context.Background(), w, store, bootstrap.Roster{Entries: entries}); err != nil {
			t.Fatal(err)
		}
		if err := store.DB().Flush(); err != nil {
			t.Fatal(err)
		}
		s := &server{reg: newRegistry(), log: quiet, store: store, w: w}
		first := s.statusJSON().(*statusReport)
		if first.Error != "" || first.Hosts == nil || first.Hosts.ByStatus["active"] != int64(hosts) || first.Hosts.Mode != bootstrap.EnumerateHosts {
			t.Fatalf("report with %d roster hosts: error %q, hosts %+v", hosts, first.Error, first.Hosts)
		}
		rf.FailFromNth(math.MaxInt) // counts, never fails
		s.statusJSON()
		return rf.Reads()
	}
	few, many := reads(100), reads(20_000)
	t.Logf("sstable reads of a status build: %d with 100 roster hosts, %d with 20,000", few, many)
	if many > few+2 {
		t.Fatalf("a status build with 20,000 roster hosts recorded, none changed since the last build: %d sstable reads; with 100: %d; want the same, whatever the hosts",
			many, few)
	}
}

// BenchmarkServeStatusRoster is one build of serve's /status report over a
// store with a roster of 30,000 hosts (the network's PDS count) and of
// 1,000,000 (the most a roster read records), none changed between builds.
// Reported per build, in process CPU.
func BenchmarkServeStatusRoster(b *testing.B) {
	for _, hosts := range []int{30_000, 1_000_000} {
		b.Run(fmt.Sprintf("hosts=%d", hosts), func(b *testing.B) {
			quiet := slog.New(slog.DiscardHandler)
			store, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer store.Close()
			w, err := archive.NewWriter(store, archive.WriterOptions{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			entries := make([]upstream.HostEntry, hosts)
			for i := range entries {
				entries[i] = upstream.HostEntry{Host: fmt.Sprintf("pds%07d.test", i), Status: "active", Accounts: int64(i + 1)}
			}
			if _, err := bootstrap.RecordRoster(context.Background(), w, store, bootstrap.Roster{Entries: entries}); err != nil {
				b.Fatal(err)
			}
			if err := store.DB().Flush(); err != nil {
				b.Fatal(err)
			}
			s := &server{reg: newRegistry(), log: quiet, store: store, w: w}
			s.statusJSON()
			b.ResetTimer()
			cpu0 := cputime.Process(b)
			for i := 0; i < b.N; i++ {
				s.statusJSON()
			}
			b.ReportMetric(cputime.MicrosPerOp(b, cpu0)/1000, "cpu-ms/build")
		})
	}
}
