package retry_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/backfill"
	"github.com/backstream/backstream/internal/cputime"
	"github.com/backstream/backstream/retry"
	"github.com/cockroachdb/pebble/vfs"
)

// noJobs is a retry.Jobs for passes that must queue nothing.
type noJobs struct{}

func (noJobs) Run(context.Context, backfill.Request) (backfill.Result, error) {
	return backfill.Result{}, fmt.Errorf("no job expected")
}

// seedDueAt writes n failed, active repos on host, each with its next
// attempt at nextUS, in units of 10,000.
func seedDueAt(tb testing.TB, w *archive.Writer, n int, host string, nextUS int64) {
	tb.Helper()
	for i := 0; i < n; {
		var ups []archive.RepoUpdate
		for ; i < n && len(ups) < 10_000; i++ {
			ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:due%021d", i),
				Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldAttempts | archive.FieldNextAttempt,
				State:  archive.RepoState{Status: archive.StatusFailed, Active: true, Host: host, Attempts: 1, ErrClass: "transient", NextAttemptUS: nextUS}})
		}
		if rc, err := w.Apply(context.Background(), &archive.Unit{Repos: ups}); err != nil || rc.Refused != nil {
			tb.Fatalf("seed: %v %v", err, rc.Refused)
		}
	}
}

// BenchmarkWakePass: one pass of the runner (what every Wake costs) over a
// store of N failed repos on one host, either all due in an hour or all
// due now behind a parked relay. It reports the CPU per pass and the due
// keys the pass read.
func BenchmarkWakePass(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	const relay = "relay.example:443"
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		for _, tc := range []struct {
			name   string
			nextUS int64
			park   bool
		}{{"due-in-1h", now.Add(time.Hour).UnixMicro(), false}, {"due-now-relay-parked", now.UnixMicro(), true}} {
			b.Run(fmt.Sprintf("%s/N=%d", tc.name, n), func(b *testing.B) {
				s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				w, err := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = w.Close(); _ = s.Close() }()
				seedDueAt(b, w, n, "pds.example:443", tc.nextUS)
				if tc.park {
					u := &archive.Unit{Hosts: []archive.HostUpdate{{Host: relay, Func: func(cur archive.HostState) archive.HostState {
						cur.ParkedUntilUS = now.Add(5 * time.Minute).UnixMicro()
						return cur
					}}}}
					if rc, err := w.Apply(context.Background(), u); err != nil || rc.Refused != nil {
						b.Fatalf("park: %v %v", err, rc.Refused)
					}
				}
				r, err := retry.New(retry.Config{Store: s, Writer: w, Jobs: noJobs{}, Relay: relay, Logger: quiet,
					Now: func() time.Time { return now }})
				if err != nil {
					b.Fatal(err)
				}
				var scanned int
				b.ResetTimer()
				start := cputime.Process(b)
				for i := 0; i < b.N; i++ {
					ps, err := r.RunOnce(context.Background())
					if err != nil || ps.Queued != 0 {
						b.Fatalf("pass %+v: %v", ps, err)
					}
					scanned = ps.Scanned
				}
				b.ReportMetric(cputime.MicrosPerOp(b, start)/1000, "cpu-ms/pass")
				b.ReportMetric(float64(scanned), "keys/pass")
			})
		}
	}
}
