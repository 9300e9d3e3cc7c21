package bootstrap

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/backstream/backstream/archive"
	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// TestPendingPassFailsClosed: the restart pass reads repo/ through the
// store's fail-closed scan, so a malformed repo state stops it with
// ErrMalformed naming the key — never skipped, never a default.
func TestPendingPassFailsClosed(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := archive.Open("/data", archive.Options{FS: vfs.NewMem(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, _ := archive.NewWriter(s, archive.WriterOptions{Logger: quiet})
	defer w.Close()
	if err := s.DB().Set(archive.RepoKey("did:plc:broken"), []byte{0x01, 0x09}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	b := &Bootstrap{cfg: Config{Store: s, Writer: w}}
	_, err = b.pendingPass(context.Background())
	if !errors.Is(err, archive.ErrMalformed) || !strings.Contains(err.Error(), "repo/did:plc:broken") {
		t.Fatalf("pending pass over a malformed repo state: %v; want ErrMalformed naming the key", err)
	}
}
