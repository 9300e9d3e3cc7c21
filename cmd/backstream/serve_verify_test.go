package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/firehose"
	"github.com/backstream/backstream/ident"
)

// TestServeVerifyFlags: --verify defaults to strict with the public PLC
// directory, a loopback relay is its own PLC and did:web and handle host
// (the simulated network), off
// configures nothing, and bad values are usage errors.
func TestServeVerifyFlags(t *testing.T) {
	o, err := serveFlags(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c := o.identConfig()
	if c == nil || c.Mode != ident.ModeStrict || c.PLC != ident.DefaultPLC || c.Web != "" || c.Timeout != ident.DefaultTimeout ||
		c.Concurrency != ident.DefaultConcurrency || c.CacheSize != ident.DefaultCacheSize || c.TTL != ident.DefaultTTL || c.Rate != ident.DefaultRate {
		t.Fatalf("default verification %+v", c)
	}
	o, err = serveFlags(t, []string{"--relay", "http://127.0.0.1:7777", "--ident-retries", "0"},
		[]string{"BACKSTREAM_VERIFY=warn", "BACKSTREAM_IDENT_TIMEOUT=3s", "BACKSTREAM_VERIFY_WORKERS=5"})
	if err != nil {
		t.Fatal(err)
	}
	if c := o.identConfig(); c.Mode != ident.ModeWarn || c.PLC != "http://127.0.0.1:7777" || c.Web != c.PLC || c.Timeout != 3*time.Second || c.Retries >= 0 || c.Verifiers != 5 || c.Rate != 0 {
		t.Fatalf("loopback relay, warn: %+v", c)
	}
	// An explicit PLC: did:web and handles are asked of their own hosts.
	o, err = serveFlags(t, []string{"--relay", "http://127.0.0.1:7777", "--plc", "http://127.0.0.1:8888"}, nil)
	if c := o.identConfig(); err != nil || c.PLC != "http://127.0.0.1:8888" || c.Web != "" {
		t.Fatalf("explicit PLC: %+v %v", c, err)
	}
	// --ident-rate auto paces only the public directory; a number paces any.
	o, err = serveFlags(t, []string{"--plc", "https://plc.example.com"}, nil)
	if err != nil || o.identConfig().Rate != 0 {
		t.Fatalf("a mirror, auto rate: %+v %v", o.identConfig(), err)
	}
	o, err = serveFlags(t, []string{"--plc", "https://plc.example.com", "--ident-rate", "50"}, nil)
	if err != nil || o.identConfig().Rate != 50 {
		t.Fatalf("a mirror at 50/s: %+v %v", o.identConfig(), err)
	}
	o, err = serveFlags(t, []string{"--verify", "off", "--plc", "https://plc.example.com"}, nil)
	if err != nil || o.identConfig() != nil {
		t.Fatalf("off: %+v %v", o.identConfig(), err)
	}
	for _, args := range [][]string{
		{"--verify", "sometimes"},
		{"--plc", "plc.directory"},
		{"--plc", "https://plc.directory/path"},
		{"--ident-timeout", "0s"},
		{"--ident-concurrency", "0"},
		{"--ident-cache-size", "0"},
		{"--ident-retries", "-1"},
		{"--ident-ttl", "-1s"},
		{"--verify-workers", "-1"},
		{"--ident-rate", "-5"},
		{"--ident-rate", "NaN"},
		{"--ident-rate", "fast"},
	} {
		if _, err := serveFlags(t, args, nil); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// TestServeUninvertedRefetchInterval: --uninverted-refetch-interval (a
// day by default) reaches the node's UninvertedInterval, from the command
// line or the environment; zero or a negative interval is a usage error
// that names the flag.
func TestServeUninvertedRefetchInterval(t *testing.T) {
	for _, tc := range []struct {
		args, env []string
		want      time.Duration
	}{
		{nil, nil, firehose.DefaultUninvertedInterval},
		{[]string{"--uninverted-refetch-interval", "6h"}, nil, 6 * time.Hour},
		{nil, []string{"BACKSTREAM_UNINVERTED_REFETCH_INTERVAL=168h"}, 168 * time.Hour},
	} {
		o, err := serveFlags(t, tc.args, tc.env)
		if err != nil {
			t.Fatalf("%q %q: %v", tc.args, tc.env, err)
		}
		if got := o.nodeConfig(&server{}, nil).UninvertedInterval; got != tc.want {
			t.Errorf("%q %q: node UninvertedInterval %v, want %v", tc.args, tc.env, got, tc.want)
		}
	}
	for _, v := range []string{"0s", "-1h"} {
		_, err := serveFlags(t, []string{"--uninverted-refetch-interval", v}, nil)
		if !errors.Is(err, errUsage) || !strings.Contains(err.Error(), "--uninverted-refetch-interval") || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("--uninverted-refetch-interval %s: %v, want a usage error naming the flag", v, err)
		}
	}
}
