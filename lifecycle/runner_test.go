package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/storefault"
)

// TestRelayCursorReadFault: the relay position the capture and the live
// consumer start from is read fail closed. An unreadable cursor/relay is
// an error naming the key, never taken as absent (which would start the
// consumer at the relay's live tip and skip what happened meanwhile); an
// absent one is nil, and a present one its seq. node.TestRunReadFaults
// fails the same key under a whole node, which stops at node.New's own
// earlier read of it: the runner's read is reached only when that one
// passed (a transient fault), so it has this test of its own.
func TestRelayCursorReadFault(t *testing.T) {
	mem := vfs.NewMem()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	r := &runner{cfg: Config{Store: s}}
	if c, err := r.relayCursor(); err != nil || c != nil {
		t.Fatalf("an absent cursor/relay: %v, %v; want nil, nil", c, err)
	}
	w, err := archive.NewWriter(s, archive.WriterOptions{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if rc, err := w.Apply(context.Background(), &archive.Unit{Cursor: archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: 7}}); err != nil || rc.Refused != nil {
		t.Fatal(err, rc.Refused)
	}
	w.Close()
	if c, err := r.relayCursor(); err != nil || c == nil || *c != 7 {
		t.Fatalf("cursor/relay at 7: %v, %v", c, err)
	}
	s.Close()

	file, err := storefault.IsolateKey(mem, "/data/"+archive.StoreDir, archive.KeyCursorRelay)
	if err != nil {
		t.Fatal(err)
	}
	inj := storefault.NewReadFault()
	inj.FailFiles(file)
	s, err = archive.Open("/data", archive.Options{FS: errorfs.Wrap(mem, inj), Logger: slog.New(slog.DiscardHandler), CacheSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r = &runner{cfg: Config{Store: s}}
	c, err := r.relayCursor()
	if c != nil || !errors.Is(err, archive.ErrRead) || errors.Is(err, archive.ErrNotFound) || inj.Fired() == 0 {
		t.Fatalf("an unreadable cursor/relay: %v, %v (%d reads failed); want ErrRead", c, err, inj.Fired())
	}
}
