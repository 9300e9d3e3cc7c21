package main

import (
	"errors"
	"testing"

	"github.com/backstream/backstream/natssink"
)

// TestServeNATSFlags: no --nats-url, no sink; the --nats-* flags (and
// their BACKSTREAM_* variables) fill the sink's config; bad values are
// usage errors.
func TestServeNATSFlags(t *testing.T) {
	o, err := serveFlags(t, nil, nil)
	if err != nil || o.nats != nil {
		t.Fatalf("without --nats-url: %+v, %v", o.nats, err)
	}
	o, err = serveFlags(t, []string{"--nats-url", "nats://a:4222,nats://b:4222", "--nats-replicas", "3", "--nats-from", "42"},
		[]string{"BACKSTREAM_NATS_STREAM=bs", "BACKSTREAM_NATS_WINDOW=64"})
	if err != nil {
		t.Fatal(err)
	}
	want := natssink.Config{URLs: "nats://a:4222,nats://b:4222", Stream: "bs", Replicas: 3, From: 42, Window: 64}
	if o.nats == nil || o.nats.URLs != want.URLs || o.nats.Stream != want.Stream || o.nats.Replicas != want.Replicas ||
		o.nats.From != want.From || o.nats.Window != want.Window {
		t.Fatalf("got %+v, want %+v", o.nats, want)
	}
	for _, args := range [][]string{
		{"--nats-url", "nats://a", "--nats-from", "-1"},
		{"--nats-url", "nats://a", "--nats-window", "0"},
	} {
		if _, err := serveFlags(t, args, nil); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}
