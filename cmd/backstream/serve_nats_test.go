package main

import (
	"errors"
	"strings"
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
	for _, urls := range []string{"tls://a:4222, nats://b", "ws://a,wss://b:443", "nats://user:pw@a:4222,"} {
		if o, err := serveFlags(t, []string{"--nats-url", urls}, nil); err != nil || o.nats == nil {
			t.Errorf("--nats-url %q: %v", urls, err)
		}
	}
	for _, tc := range []struct {
		args []string
		want string // in the error, beside the flag's name
	}{
		{[]string{"--nats-url", "nats://a", "--nats-from", "-1"}, "--nats-from"},
		{[]string{"--nats-url", "nats://a", "--nats-window", "0"}, "--nats-window"},
		{[]string{"--nats-url", "nats://a", "--nats-replicas", "-3"}, "--nats-replicas -3"},
		{[]string{"--nats-url", "nats://a", "--nats-replicas", "6"}, "--nats-replicas 6"},
		{[]string{"--nats-url", "nats://%zz:4222"}, `--nats-url "nats://%zz:4222"`},
		{[]string{"--nats-url", "garbage"}, `--nats-url "garbage"`},
		{[]string{"--nats-url", "a:4222"}, `--nats-url "a:4222"`},
		{[]string{"--nats-url", "http://a:4222"}, `scheme "http"`},
		{[]string{"--nats-url", "nats://a,ws://b"}, "mixed"},
		{[]string{"--nats-url", " , "}, `--nats-url`},
	} {
		_, err := serveFlags(t, tc.args, nil)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want a usage error saying %q", tc.args, err, tc.want)
		}
	}
}
