package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/ident"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/node"
	"github.com/backstream/backstream/oracle"
)

// BenchmarkBootstrapPLCLatency: a strict bootstrap of a small world (many
// accounts, few records) whose PLC answers every DID document after a
// delay: repos/s from start to steady state (fixed costs included: capture
// wait, merging), per PLC latency and --ident-concurrency. Resolution, not
// the download, is the limit once latency × repos/s exceeds the
// resolver's concurrency.
func BenchmarkBootstrapPLCLatency(b *testing.B) {
	const accounts = 1500
	for _, c := range []struct {
		lat  time.Duration
		conc int
	}{{0, 16}, {200 * time.Millisecond, 16}, {200 * time.Millisecond, 64}} {
		lat := c.lat
		b.Run(fmt.Sprintf("plc=%v/concurrency=%d", lat, c.conc), func(b *testing.B) {
			for b.Loop() {
				net, err := oracle.Start(context.Background(), oracle.Config{Accounts: accounts, RecordsMean: 2, Hosts: 4, Traffic: oracle.TrafficNone, Seed: 5})
				if err != nil {
					b.Fatal(err)
				}
				if lat > 0 {
					net.Faults().SlowPLC(lat, oracle.Always)
				}
				phases := make(chan archive.Phase, 8)
				cfg := node.Config{DataDir: b.TempDir(), Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(), Store: archive.Options{Logger: quiet},
					Bootstrap: bootstrap.Config{Enumerate: bootstrap.EnumerateRelay}, CaptureWait: time.Second,
					Logger: quiet, OnPhase: func(p archive.Phase) { phases <- p },
					Verify: &ident.Config{PLC: net.RelayURL(), Mode: ident.ModeStrict, Concurrency: c.conc}}
				n, err := node.New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				runErr := make(chan error, 1)
				t0 := time.Now()
				go func() { runErr <- n.Run(ctx) }()
				for steady := false; !steady; {
					select {
					case p := <-phases:
						steady = p == archive.PhaseSteadyState
					case err := <-runErr:
						b.Fatalf("stopped: %v", err)
					case <-time.After(5 * time.Minute):
						b.Fatal("no steady state")
					}
				}
				b.ReportMetric(float64(accounts)/time.Since(t0).Seconds(), "repos/s")
				cancel()
				<-runErr
				n.Close()
				net.Close()
			}
		})
	}
}

// TestBootstrapResolvesOncePerAccount: a strict bootstrap against a PLC
// directory that answers after 20 ms resolves each account's document
// once: the look-ahead (bootstrap.Config.Resolve) and the job's own lookup
// share one resolution through the resolver's cache and its one flight per
// DID, so the look-ahead costs the directory nothing. Every active repo is
// complete.
func TestBootstrapResolvesOncePerAccount(t *testing.T) {
	net, err := oracle.Start(context.Background(), oracle.Config{Accounts: 60, RecordsMean: 2, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	defer net.Close()
	net.Faults().SlowPLC(20*time.Millisecond, oracle.Always)
	active := 0
	for _, a := range net.World().Accounts() {
		if a.Active {
			active++
		}
	}
	reg := prometheus.NewRegistry()
	n := runToSteady(t, node.Config{Registry: reg, Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(),
		Bootstrap: bootstrap.Config{Workers: 4, Enumerate: bootstrap.EnumerateRelay},
		Verify:    &ident.Config{PLC: net.RelayURL(), Mode: ident.ModeStrict}})
	counts, err := n.Store().Counts()
	if err != nil {
		t.Fatal(err)
	}
	if got := counts.ByStatus[archive.StatusComplete]; got != int64(active) {
		t.Fatalf("%d repos complete (%+v), want %d", got, counts, active)
	}
	res := promtest.Value(t, reg, "backstream_ident_resolutions_total", map[string]string{"result": "ok"})
	if res != float64(active) {
		t.Fatalf("%v DID resolutions for %d accounts, want one each", res, active)
	}
	if v := promtest.Value(t, reg, "backstream_verify_total", map[string]string{"path": "backfill", "outcome": "ok"}); v != float64(active) {
		t.Fatalf("%v repos verified, want %d", v, active)
	}
}

// TestBootstrapFromPLCExport: a strict bootstrap with PLCExport reads the
// directory's export and requests no did:plc document (counted at the
// directory), verifies and completes every active repo, counts the
// identities loaded, and leaves cursor/plcexport durable; with the export
// failing it falls back to one resolution per account.
func TestBootstrapFromPLCExport(t *testing.T) {
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprintf("failing=%v", failing), func(t *testing.T) {
			net, err := oracle.Start(context.Background(), oracle.Config{Accounts: 120, RecordsMean: 2, Hosts: 2, Traffic: oracle.TrafficNone, Seed: 9})
			if err != nil {
				t.Fatal(err)
			}
			defer net.Close()
			if failing {
				net.Faults().FailExport(oracle.Always)
			}
			active := 0
			for _, a := range net.World().Accounts() {
				if a.Active {
					active++
				}
			}
			reg := prometheus.NewRegistry()
			n := runToSteady(t, node.Config{Registry: reg, Relay: net.RelayURL(), LoopbackHosts: net.LoopbackHosts(), PLCExport: true,
				Bootstrap: bootstrap.Config{Workers: 8, Enumerate: bootstrap.EnumerateRelay},
				Verify:    &ident.Config{PLC: net.RelayURL(), Mode: ident.ModeStrict, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond}})
			counts, err := n.Store().Counts()
			if err != nil {
				t.Fatal(err)
			}
			if got := counts.ByStatus[archive.StatusComplete]; got != int64(active) {
				t.Fatalf("%d repos complete (%+v), want %d", got, counts, active)
			}
			if v := promtest.Value(t, reg, "backstream_verify_total", map[string]string{"path": "backfill", "outcome": "ok"}); v != float64(active) {
				t.Fatalf("%v repos verified, want %d", v, active)
			}
			loaded := promtest.Value(t, reg, "backstream_ident_export_total", map[string]string{"result": "loaded"})
			_, cursorErr := n.Store().Time([]byte("cursor/plcexport"))
			requests := net.DIDDocRequests()
			if failing {
				if loaded != 0 || requests != int64(active) || cursorErr == nil {
					t.Fatalf("export failing: %v loaded, %d DID document requests for %d active accounts (want one each), cursor %v", loaded, requests, active, cursorErr)
				}
				return
			}
			if loaded < float64(active) || requests != 0 || cursorErr != nil {
				t.Fatalf("%v identities loaded, %d DID document requests for %d active accounts (want none), cursor: %v", loaded, requests, active, cursorErr)
			}
		})
	}
}

// runToSteady runs a node of cfg (its data dir, store logger, capture wait,
// logger and phase hook filled in) until steady state, within 2 minutes;
// the node runs until the test ends.
func runToSteady(t *testing.T, cfg node.Config) *node.Node {
	t.Helper()
	phases := make(chan archive.Phase, 8)
	cfg.DataDir, cfg.Store, cfg.CaptureWait, cfg.Logger = t.TempDir(), archive.Options{Logger: quiet}, 500*time.Millisecond, quiet
	cfg.OnPhase = func(p archive.Phase) { phases <- p }
	n, err := node.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runErr := make(chan error, 1)
	go func() { runErr <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-runErr
		n.Close()
	})
	deadline := time.After(2 * time.Minute)
	for {
		select {
		case p := <-phases:
			if p == archive.PhaseSteadyState {
				return n
			}
		case err := <-runErr:
			runErr <- err
			t.Fatalf("stopped before steady state: %v", err)
		case <-deadline:
			t.Fatal("no steady state within 2 minutes")
		}
	}
}
