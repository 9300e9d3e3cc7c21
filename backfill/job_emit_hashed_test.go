package backfill

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/backstream/backstream/archive"
)

// captureWriter keeps the events of every unit it passes to the writer.
type captureWriter struct {
	*archive.Writer
	mu     sync.Mutex
	events []archive.Event
}

func (c *captureWriter) Submit(ctx context.Context, u *archive.Unit) error {
	c.mu.Lock()
	c.events = append(c.events, u.Events...)
	c.mu.Unlock()
	return c.Writer.Submit(ctx, u)
}

// Rows of a snapshot verified in memory tell the codec their CID is their
// record's checked hash (Event.CIDOfRecord: no second hash in the writer);
// rows of one verified from its file (whose records are read again from
// the scratch file) do not. Either way the archived CIDs are the records'.
func TestEmittedRowsCarryTheCheckedHash(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "repo.car")
	did, _ := writeBenchCAR(t, path, 2000, 0, 200)
	for _, tc := range []struct {
		name   string
		budget int64
		hashed bool
	}{{"in memory", 1 << 30, true}, {"from its file", 256 << 10, false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := archive.Open(filepath.Join(t.TempDir(), "data"), archive.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			w, err := archive.NewWriter(s, archive.WriterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			cw := &captureWriter{Writer: w}
			r, err := NewRunner(Options{Source: &fileSource{path: path}, Writer: cw, Memory: NewMemory(tc.budget, nil)})
			if err != nil {
				t.Fatal(err)
			}
			res, err := r.Run(context.Background(), Request{DID: did})
			if err != nil || res.Status != archive.StatusComplete || res.Records != 2000 {
				t.Fatalf("job: %+v, %v", res, err)
			}
			for _, ev := range cw.events {
				if ev.CIDOfRecord != tc.hashed {
					t.Fatalf("row %s/%s: CIDOfRecord %v, want %v", ev.Collection, ev.RKey, ev.CIDOfRecord, tc.hashed)
				}
			}
			want := map[string]string{}
			for _, ev := range cw.events {
				want[ev.Collection+"/"+ev.RKey] = string(ev.CID)
			}
			it, err := s.Events(0)
			if err != nil {
				t.Fatal(err)
			}
			defer it.Close()
			n := 0
			for it.Next() {
				ev := it.Event()
				if string(ev.CID) != want[ev.Collection+"/"+ev.RKey] {
					t.Fatalf("archived %s/%s with CID %x, want the CAR's %x", ev.Collection, ev.RKey, ev.CID, want[ev.Collection+"/"+ev.RKey])
				}
				n++
			}
			if err := it.Err(); err != nil || n != 2000 {
				t.Fatalf("%d archived rows, %v", n, err)
			}
		})
	}
}
