package firehose

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/world"
)

// TestCaptureLegacyCommitMarks: during capture, on a network whose PDSs
// send only legacy commits (no prevData: none can be inverted), every
// complete account is marked for its uninverted replacement through the
// archive writer, due a day after its snapshot. It counts the mark units
// the archive writer receives per legacy commit and what they cost it.
func TestCaptureLegacyCommitMarks(t *testing.T) {
	n := startNetwork(t, oracle.Config{Seed: 38, Accounts: 24, RecordsMean: 3})
	s := openStore(t)
	reg := prometheus.NewRegistry()
	archiveW := newWriterOpts(t, s, archive.WriterOptions{BulkLinger: archive.BulkLinger, Metrics: archive.NewMetrics(reg)})
	captureW := newWriter(t, s, true)
	now := time.UnixMicro(1_700_000_000_000_000)
	completedUS := now.Add(-time.Hour).UnixMicro()
	dids := activeDIDs(n.World())
	var seed []archive.RepoUpdate
	for _, did := range dids {
		seed = append(seed, archive.RepoUpdate{DID: did, Fields: archive.FieldStatus | archive.FieldActive | archive.FieldCompleted,
			State: archive.RepoState{Status: archive.StatusComplete, Active: true, CompletedUS: completedUS}})
	}
	if r, err := archiveW.Apply(context.Background(), &archive.Unit{Repos: seed}); err != nil || r.Refused != nil {
		t.Fatalf("seed: %v %v", err, r.Refused)
	}
	zero := int64(0)
	c, m := newConsumer(t, Config{Relay: n.RelayURL(), Writer: captureW, MarkWriter: archiveW, Mode: ModeCapture, Cursor: &zero,
		Identity: ident.New(ident.Config{PLC: n.RelayURL()}), Now: func() time.Time { return now }})
	var marks atomic.Int64
	submit := c.mark
	c.mark = func(ctx context.Context, u *archive.Unit) error {
		marks.Add(1)
		return submit(ctx, u)
	}
	batches0 := promtest.Value(t, reg, "backstream_archive_batches_total", nil)
	startRun(t, c)
	const commits = 600
	n.Faults().LegacyCommits(oracle.Always)
	start := time.Now()
	for i := range commits {
		did := dids[i%len(dids)]
		if _, err := n.Emit(func(w *world.World) (world.Event, error) {
			return w.CreateRecord(did, "app.bsky.feed.like", "", map[string]any{"$type": "app.bsky.feed.like", "createdAt": "2024-01-01T00:00:00Z"})
		}); err != nil {
			t.Fatal(err)
		}
	}
	waitCaughtUp(t, n, c, nil)
	elapsed := time.Since(start)
	if got := n.Faults().Fired(oracle.FaultLegacyCommit); got != commits {
		t.Fatalf("legacy_commit fired %d times, want %d", got, commits)
	}
	if got := counter(m.anomalies, AnomalyUninverted); got != commits {
		t.Fatalf("anomalies{uninverted} = %v, want %d", got, commits)
	}
	due := completedUS + DefaultUninvertedInterval.Microseconds()
	waitFor(t, 5*time.Second, "every account marked", func() bool {
		for _, did := range dids {
			st, err := s.RepoState(did)
			if err != nil || st.Refetch != archive.RefetchUninverted || st.NextAttemptUS != due {
				return false
			}
		}
		return true
	})
	batches := promtest.Value(t, reg, "backstream_archive_batches_total", nil) - batches0
	t.Logf("%d legacy commits of %d accounts: %d mark units (%.2f a commit), %.0f archive batches, %v to capture them",
		commits, len(dids), marks.Load(), float64(marks.Load())/commits, batches, elapsed)
}

// BenchmarkCaptureMarkUnit: what one legacy commit's mark unit costs the
// archive writer during capture once its account is marked (the effect
// changes nothing: no row, no synced commit), with serve's BulkLinger.
func BenchmarkCaptureMarkUnit(b *testing.B) {
	s := openStore(b)
	w := newWriterOpts(b, s, archive.WriterOptions{BulkLinger: archive.BulkLinger, Metrics: archive.NewMetrics(prometheus.NewRegistry())})
	now := time.UnixMicro(1_700_000_000_000_000)
	did := "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"
	if r, err := w.Apply(context.Background(), &archive.Unit{Repos: []archive.RepoUpdate{{DID: did,
		Fields: archive.FieldStatus | archive.FieldActive | archive.FieldCompleted | archive.FieldRefetch | archive.FieldNextAttempt,
		State: archive.RepoState{Status: archive.StatusComplete, Active: true, CompletedUS: now.UnixMicro(),
			Refetch: archive.RefetchUninverted, NextAttemptUS: now.Add(DefaultUninvertedInterval).UnixMicro()}}}}); err != nil || r.Refused != nil {
		b.Fatalf("seed: %v %v", err, r.Refused)
	}
	c := &Consumer{cfg: Config{Now: func() time.Time { return now }, UninvertedInterval: DefaultUninvertedInterval}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := w.Submit(ctx, &archive.Unit{Repos: []archive.RepoUpdate{c.uninvertedEffect(did)}}); err != nil {
			b.Fatal(err)
		}
	}
	acks := archive.NewAcks()
	if r, err := w.Apply(ctx, &archive.Unit{Acks: acks}); err != nil || r.Refused != nil {
		b.Fatalf("drain: %v", err)
	}
}
