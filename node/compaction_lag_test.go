package node

import (
	"context"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"

	"github.com/backstream/backstream/archive"
)

// TestCompactionLag: the lag behind the tip is the seqs from the watermark
// W to the tip, and the tip's time minus the time of the first row at or
// after W (a gap at W is stepped over); nothing at or after W is no lag.
// Reading the time of the row before W instead fails the second case.
func TestCompactionLag(t *testing.T) {
	dir := t.TempDir()
	s, err := archive.Open(dir, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	w, err := archive.NewWriter(s, archive.WriterOptions{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	for i, at := range []time.Duration{0, 2 * time.Second, 5 * time.Second, 9 * time.Second} {
		now = t0.Add(at)
		ev := archive.Event{Kind: archive.KindIdentity, DID: "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", Handle: "a.test", Source: archive.SourceLive}
		if r, err := w.Apply(context.Background(), &archive.Unit{Events: []archive.Event{ev}}); err != nil || r.Refused != nil {
			t.Fatalf("row %d: %v %v", i, err, r.Refused)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// A gap at seq 3, as a pass leaves one.
	if err := s.DB().Delete(archive.EventKey(3), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		w       uint64
		seqs    uint64
		seconds float64
	}{
		{0, 4, 9}, {2, 3, 7}, {3, 2, 0}, {4, 1, 0}, {5, 0, 0},
	} {
		seqs, secs, err := CompactionLag(s, c.w)
		if err != nil || seqs != c.seqs || secs != c.seconds {
			t.Errorf("watermark %d: lag %d seqs, %v s (%v); want %d, %v", c.w, seqs, secs, err, c.seqs, c.seconds)
		}
	}
}
