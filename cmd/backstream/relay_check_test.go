package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
)

// TestServeRefusesAnotherRelay: C6 at the process entry point. A store that
// follows one relay refuses another unless --reset-relay-cursor is given,
// which records the new relay and drops the old relay's cursor.
func TestServeRefusesAnotherRelay(t *testing.T) {
	dir := t.TempDir()
	s, err := archive.Open(dir, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetRelay("relay-a.example:443", false); err != nil {
		t.Fatal(err)
	}
	w, _ := archive.NewWriter(s, archive.WriterOptions{})
	if _, err := w.Apply(context.Background(), &archive.Unit{Cursor: archive.SeqCursor{Key: archive.KeyCursorRelay, Seq: 777}}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s.Close()

	serve := func(ctx context.Context, extra ...string) (int, string) {
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin-listen", "", "--log-format", "text"}, extra...)
		code := run(ctx, args, nil, &out, &errb)
		return code, errb.String()
	}
	code, stderr := serve(context.Background(), "--relay", "https://relay-b.example")
	// The store recorded relay-a as an older build wrote it (with :443);
	// the refusal names it in the canonical form.
	if code != 1 || !strings.Contains(stderr, "relay-a.example") || !strings.Contains(stderr, "--reset-relay-cursor") {
		t.Fatalf("another relay: exit %d, %q", code, stderr)
	}
	s, _ = archive.Open(dir, archive.Options{ReadOnly: true})
	if c, err := s.RelayCursor(); err != nil || c != 777 {
		t.Fatalf("refused start touched the cursor: %d %v", c, err)
	}
	s.Close()

	// With the reset: the new relay is recorded and the old cursor dropped.
	// (A cancelled context stops serve right after its startup checks.)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if code, stderr := serve(ctx, "--relay", "https://relay-b.example", "--reset-relay-cursor"); code != 0 {
		t.Fatalf("reset: exit %d, %q", code, stderr)
	}
	s, _ = archive.Open(dir, archive.Options{ReadOnly: true})
	defer s.Close()
	if r, _ := s.Relay(); r != "relay-b.example" {
		t.Fatalf("relay %q after reset", r)
	}
	if _, err := s.RelayCursor(); err == nil {
		t.Fatal("the old relay's cursor survived the reset")
	}
}

// TestServeRefusesLostRelayCursor: a steady-state store whose cursor/relay
// is gone used to start following the live tip, silently skipping every
// event since its last position. serve exits 1 naming the lost key and the
// recovery path; with --reset-relay-cursor it starts.
func TestServeRefusesLostRelayCursor(t *testing.T) {
	dir := t.TempDir()
	s, err := archive.Open(dir, archive.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetRelay("relay-a.example", false); err != nil {
		t.Fatal(err)
	}
	if err := s.CommitSteadyState(time.Now()); err != nil {
		t.Fatal(err)
	}
	s.Close()

	serve := func(ctx context.Context, extra ...string) (int, string) {
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin-listen", "", "--log-format", "text", "--relay", "https://relay-a.example"}, extra...)
		code := run(ctx, args, nil, &out, &errb)
		return code, errb.String()
	}
	// Bounded: a serve that starts instead would follow the (unreachable)
	// relay until the deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code, stderr := serve(ctx)
	if code != 1 || !strings.Contains(stderr, "steady_state has no cursor/relay") || !strings.Contains(stderr, "--reset-relay-cursor") {
		t.Fatalf("lost cursor: exit %d, %q", code, stderr)
	}
	// A cancelled context stops serve right after its startup checks.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	code, stderr = serve(ctx, "--reset-relay-cursor")
	if code != 0 || !strings.Contains(stderr, "level=ERROR msg=\"archive gap") {
		t.Fatalf("reset: exit %d, %q", code, stderr)
	}
}
