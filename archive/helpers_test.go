package archive

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/vfs"
)

// quietLogger drops Pebble's and the writer's chatter in tests.
var quietLogger = slog.New(slog.NewTextHandler(io.Discard, nil))

// testOptions: a quiet logger and a small cache. OnFatal stays unset, as in
// production: Pebble's Fatalf panics with the FatalError, which a commit
// recovers.
func testOptions(fs vfs.FS) Options {
	return Options{FS: fs, Logger: quietLogger, CacheSize: 8 << 20}
}

func openMem(t testing.TB, fs vfs.FS) *Store {
	t.Helper()
	s, err := Open("/data", testOptions(fs))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return s
}

func newWriter(t testing.TB, s *Store, opts WriterOptions) *Writer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quietLogger
	}
	w, err := NewWriter(s, opts)
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	return w
}

func apply(t testing.TB, w *Writer, u *Unit) Receipt {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := w.Apply(ctx, u)
	if err != nil {
		t.Fatalf("apply: %v", err)
	}
	return r
}

const testDID = "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"

func didN(i int) string { return fmt.Sprintf("did:plc:%024d", i) }

// commitEv builds a commit row.
func commitEv(did, rev string, kind Kind, src Source, rkey string) Event {
	ev := Event{Kind: kind, DID: did, Collection: "app.bsky.feed.post", RKey: rkey, Rev: rev, Source: src}
	if kind != KindDelete {
		ev.CID = []byte{0x01, 0x71, 0x12, 0x20, 1, 2, 3, 4}
		ev.Record = []byte{0xa1, 0x64, 't', 'e', 'x', 't', 0x62, 'h', 'i'}
	}
	return ev
}

// realisticEvent is a ~200-byte-record create row like the network's mix.
func realisticEvent(i int) Event {
	rec := make([]byte, 0, 220)
	rec = append(rec, 0xa4, 0x64, 't', 'e', 'x', 't', 0x78, 0x96)
	for j := 0; j < 150; j++ {
		rec = append(rec, "the quick brown fox jumps over the lazy dog "[(i+j)%44])
	}
	rec = append(rec, 0x65, '$', 't', 'y', 'p', 'e', 0x72)
	rec = append(rec, "app.bsky.feed.post"...)
	rec = append(rec, 0x65, 'l', 'a', 'n', 'g', 's', 0x81, 0x62, 'e', 'n')
	rec = append(rec, 0x69, 'c', 'r', 'e', 'a', 't', 'e', 'd', 'A', 't', 0x78, 0x18)
	rec = append(rec, fmt.Sprintf("2024-01-02T03:04:%02d.000Z", i%60)...)
	cid := make([]byte, 36)
	copy(cid, []byte{0x01, 0x71, 0x12, 0x20})
	for j := 4; j < 36; j++ {
		cid[j] = byte(i*31 + j*7)
	}
	return Event{
		Kind: KindCreate, DID: didN(i % 2000), Collection: "app.bsky.feed.post",
		RKey: fmt.Sprintf("3l%011d", i), Rev: fmt.Sprintf("3m%011d", i),
		CID: cid, Record: rec, Source: SourceBackfill,
	}
}
