package retry

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/cockroachdb/pebble/vfs"
)

// BenchmarkPass: one pass of the runner over a store of N failed repos on
// one host, either all due in an hour or all due now behind a parked relay
// (nothing can be queued): a full pass (the first of a run, a timer's, a
// park's end, a drained host) and a Wake's pass after it (several a second
// on the real network: every #sync and #account effect sends one). It
// reports the CPU per pass and the due/ keys the pass read.
func BenchmarkPass(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	const relay = "relay.example:443"
	quiet := slog.New(slog.DiscardHandler)
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, tc := range []struct {
			name string
			at   time.Time
			park bool
		}{{"due-in-1h", now.Add(time.Hour), false}, {"due-now-relay-parked", now, true}} {
			s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			seedBench(b, w, n, tc.at.UnixMicro())
			if tc.park {
				u := &archive.Unit{Hosts: []archive.HostUpdate{{Host: relay, Func: func(cur archive.HostState) archive.HostState {
					cur.ParkedUntilUS = now.Add(5 * time.Minute).UnixMicro()
					return cur
				}}}}
				if rc, err := w.Apply(context.Background(), u); err != nil || rc.Refused != nil {
					b.Fatalf("park: %v %v", err, rc.Refused)
				}
			}
			r, err := New(Config{Store: s, Writer: w, Jobs: noJobs{}, Relay: relay, Logger: quiet, Now: func() time.Time { return now }})
			if err != nil {
				b.Fatal(err)
			}
			for _, full := range []bool{true, false} {
				kind := map[bool]string{true: "full", false: "wake"}[full]
				b.Run(fmt.Sprintf("%s/%s/N=%d", tc.name, kind, n), func(b *testing.B) {
					e, err := r.start(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					defer e.stop()
					if _, err := e.pass(true); err != nil {
						b.Fatal(err)
					}
					var read int
					b.ResetTimer()
					start := cputime.Process(b)
					for i := 0; i < b.N; i++ {
						ps, err := e.pass(full)
						if err != nil || ps.Queued != 0 {
							b.Fatalf("pass %+v: %v", ps, err)
						}
						read = ps.Scanned
					}
					b.ReportMetric(cputime.MicrosPerOp(b, start)/1000, "cpu-ms/pass")
					b.ReportMetric(float64(read), "keys/pass")
				})
			}
			_ = w.Close()
			_ = s.Close()
		}
	}
}

// seedBench writes n failed, active repos on one host, each with its next
// attempt at nextUS, in units of 10,000.
func seedBench(b *testing.B, w *archive.Writer, n int, nextUS int64) {
	b.Helper()
	for i := 0; i < n; {
		var ups []archive.RepoUpdate
		for ; i < n && len(ups) < 10_000; i++ {
			ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:due%021d", i),
				Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldAttempts | archive.FieldNextAttempt,
				State:  archive.RepoState{Status: archive.StatusFailed, Active: true, Host: "pds.example:443", Attempts: 1, ErrClass: "transient", NextAttemptUS: nextUS}})
		}
		if rc, err := w.Apply(context.Background(), &archive.Unit{Repos: ups}); err != nil || rc.Refused != nil {
			b.Fatalf("seed: %v %v", err, rc.Refused)
		}
	}
}
