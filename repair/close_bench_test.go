package repair

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/cputime"
)

// seedFailedAt writes n failed, active repos, each with its next attempt
// at nextUS, in units of 10,000.
func seedFailedAt(apply func(*archive.Unit), n int, nextUS int64) {
	for i := 0; i < n; {
		var ups []archive.RepoUpdate
		for ; i < n && len(ups) < 10_000; i++ {
			ups = append(ups, archive.RepoUpdate{DID: fmt.Sprintf("did:plc:fail%020d", i),
				Fields: archive.FieldStatus | archive.FieldActive | archive.FieldHost | archive.FieldAttempts | archive.FieldNextAttempt,
				State:  archive.RepoState{Status: archive.StatusFailed, Active: true, Host: "pds.example:443", Attempts: 1, ErrClass: "transient", NextAttemptUS: nextUS}})
		}
		apply(&archive.Unit{Repos: ups})
	}
}

// BenchmarkCloseCheck: one look of a gap's close check (every Period while
// the pass waits for its marks) over N failed repos due in an hour and one
// marked account due now, still outstanding. It reports the CPU per look.
func BenchmarkCloseCheck(b *testing.B) {
	now := time.Unix(1_800_000_000, 0)
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			s, w, apply := newStore(b)
			seedFailedAt(apply, n, now.Add(time.Hour).UnixMicro())
			apply(setRepo(didNew, archive.RepoState{Status: archive.StatusComplete, Active: true, Refetch: archive.RefetchAudit, NextAttemptUS: now.UnixMicro()}))
			r, err := New(Config{Store: s, Writer: w, Source: &listing{}, Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
			if err != nil {
				b.Fatal(err)
			}
			g := archive.Gap{ID: 1, Kind: archive.GapAudit, FirstSeenUS: now.UnixMicro()}
			b.ResetTimer()
			start := cputime.Process(b)
			for i := 0; i < b.N; i++ {
				closed, err := r.close(context.Background(), g, archive.Audit{})
				if err != nil || closed {
					b.Fatalf("close: %v %v", closed, err)
				}
			}
			b.ReportMetric(cputime.MicrosPerOp(b, start)/1000, "cpu-ms/look")
		})
	}
}
