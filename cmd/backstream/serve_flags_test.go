package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/bootstrap"
	"github.com/backstream/backstream/oracle"
)

func serveFlags(t *testing.T, args, env []string) (serveOptions, error) {
	t.Helper()
	fs, err := parseFlags(serveCommand(), commands(), args, env, &bytes.Buffer{})
	if err != nil {
		return serveOptions{}, err
	}
	return serveOptionsFrom(fs)
}

func TestServeFlagDefaults(t *testing.T) {
	o, err := serveFlags(t, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != ":6008" || o.workers != 100 || o.window != 50_000 || o.maxRepos != 0 || o.repos != nil ||
		o.memory != 0 || o.getRepoTimeout != 5*time.Minute || o.scratchBudget != 0 || o.minBody != 0 || o.hostWorkers != 8 || o.enumerate != "" {
		t.Fatalf("defaults %+v", o)
	}
}

func TestServeFlagsFromEnvAndCommandLine(t *testing.T) {
	env := []string{"BACKSTREAM_BACKFILL_WORKERS=7", "BACKSTREAM_ENUMERATION_WINDOW=900", "BACKSTREAM_BACKFILL_MEMORY=512MiB",
		"BACKSTREAM_GETREPO_TIMEOUT=30s", "BACKSTREAM_MAX_REPOS=12", "BACKSTREAM_SCRATCH_BUDGET=20GiB", "BACKSTREAM_BACKFILL_HOST_WORKERS=5"}
	o, err := serveFlags(t, []string{"--backfill-workers", "9", "--getrepo-min-body", "8KiB"}, env)
	if err != nil {
		t.Fatal(err)
	}
	if o.workers != 9 || o.window != 900 || o.memory != 512<<20 || o.getRepoTimeout != 30*time.Second || o.maxRepos != 12 ||
		o.scratchBudget != 20<<30 || o.hostWorkers != 5 || o.minBody != 8<<10 {
		t.Fatalf("options %+v", o)
	}
	o, err = serveFlags(t, []string{"--repos", "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa, did:web:example.com,did:plc:aaaaaaaaaaaaaaaaaaaaaaaa"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(o.repos) != 2 || o.repos[0] != "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa" || o.repos[1] != "did:web:example.com" {
		t.Fatalf("repos %q", o.repos)
	}
}

func TestServeFlagsRefused(t *testing.T) {
	for _, args := range [][]string{
		{"--backfill-workers", "0"},
		{"--enumeration-window", "-1"},
		{"--max-repos", "-3"},
		{"--getrepo-timeout", "0s"},
		{"--repos", "not-a-did"},
		{"--repos", " , "},
		{"--repos", "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "--max-repos", "5"},
		{"--backfill-memory", "lots"},
		{"--backfill-memory", "-1GiB"},
		{"--min-free", "plenty"},
		{"--min-free", "-1GiB"},
		{"--max-write-stall", "0s"},
		{"--scratch-budget", "much"},
		{"--getrepo-min-body", "-1KiB"},
		{"--backfill-host-workers", "0"},
	} {
		if _, err := serveFlags(t, args, nil); !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
	}
}

// TestServeMinFree: --min-free is node.Config.MinFree: auto is 0 (the
// default floor), off and 0 are negative (no floor), a size is itself; and
// the floor and the write-stall bound reach the node.
func TestServeMinFree(t *testing.T) {
	for in, want := range map[string]int64{"auto": 0, "off": -1, "OFF": -1, "0": -1, "2GiB": 2 << 30} {
		o, err := serveFlags(t, nil, []string{"BACKSTREAM_MIN_FREE=" + in, "BACKSTREAM_MAX_WRITE_STALL=90s"})
		if err != nil || o.minFree != want || o.maxWriteStall != 90*time.Second {
			t.Errorf("--min-free %q: %d, %v (stall %v); want %d", in, o.minFree, err, o.maxWriteStall, want)
		}
		if c := o.nodeConfig(&server{}, nil); c.MinFree != want || c.MaxWriteStall != 90*time.Second {
			t.Errorf("--min-free %q: node.Config.MinFree %d, MaxWriteStall %v", in, c.MinFree, c.MaxWriteStall)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"auto": 0, "": 0, "1048576": 1 << 20, "2GiB": 2 << 30, "1.5 GiB": 3 << 29, "512mib": 512 << 20, "3GB": 3e9, "10KB": 10e3, "64B": 64,
	} {
		got, err := parseBytes(in)
		if err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

// TestServeDebugRepos runs serve in-process in --repos mode against the
// simulated network: /status answers while it runs, exactly the named repos
// are archived, the lifecycle reaches steady state without discovery (both
// backfill timestamps durable), and serve exits cleanly when told to stop.
func TestServeDebugRepos(t *testing.T) {
	n, err := oracle.Start(context.Background(), oracle.Config{Accounts: 30, RecordsMean: 5, Hosts: 2, Seed: 3, Traffic: oracle.TrafficNone})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	var dids []string
	for _, a := range n.World().Accounts() {
		if a.Active && len(dids) < 3 {
			dids = append(dids, a.DID)
		}
	}
	dir := t.TempDir()
	listen := freeAddr(t)
	done := make(chan int, 1)
	var stderr bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// No traffic: capture never sees an event, so don't wait 30 s for one.
		done <- run(ctx, append([]string{"serve", "--relay", n.RelayURL(), "--data-dir", dir, "--listen", listen, "--admin-listen", "127.0.0.1:0",
			"--repos", strings.Join(dids, ","), "--capture-wait", "100ms", "--log-format", "text"}, followArgs(n)...), nil, &bytes.Buffer{}, &stderr)
	}()
	// /status answers from the first moments, and reports steady state.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var r statusReport
		if resp, err := http.Get("http://" + listen + "/status"); err == nil {
			ok := resp.StatusCode == 200 && json.NewDecoder(resp.Body).Decode(&r) == nil
			resp.Body.Close()
			if ok && r.Phase == "steady_state" {
				break
			}
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited %d before steady state:\n%s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no steady state:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d:\n%s", code, stderr.String())
	}
	s, err := archive.Open(dir, archive.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := buildStatus(s, bootstrap.NewRosterView(s), "")
	if err != nil {
		t.Fatal(err)
	}
	if r.Phase != "steady_state" || r.BackfillStartedAt == nil || r.BackfillCompletedAt == nil || r.Repos["complete"] != int64(len(dids)) ||
		r.Repos["total"] != int64(len(dids)) || r.Cursors.ListRepos != nil || r.Archive.TipSeq == 0 {
		t.Fatalf("status after --repos: %+v", r)
	}
}

// TestServeCompactionFlags: the compaction schedule's defaults, its
// BACKSTREAM_* variables, 0 as "off" (negative in node.Config, whose zero
// is the default), and negative values refused.
func TestServeCompactionFlags(t *testing.T) {
	o, err := serveFlags(t, nil, nil)
	if err != nil || o.compactionInterval != time.Hour || o.compactionTombstones != 1_000_000 {
		t.Fatalf("defaults %v / %d (%v), want 1h / 1000000", o.compactionInterval, o.compactionTombstones, err)
	}
	o, err = serveFlags(t, []string{"--compaction-tombstones", "5000"}, []string{"BACKSTREAM_COMPACTION_INTERVAL=10m"})
	if err != nil || o.compactionInterval != 10*time.Minute || o.compactionTombstones != 5000 {
		t.Fatalf("set %v / %d (%v), want 10m / 5000", o.compactionInterval, o.compactionTombstones, err)
	}
	o, err = serveFlags(t, nil, []string{"BACKSTREAM_COMPACTION_INTERVAL=0", "BACKSTREAM_COMPACTION_TOMBSTONES=0"})
	if err != nil || o.compactionInterval >= 0 || o.compactionTombstones >= 0 {
		t.Fatalf("off %v / %d (%v), want both negative (off) in the node's config", o.compactionInterval, o.compactionTombstones, err)
	}
	if nc := o.nodeConfig(&server{}, nil); nc.CompactionInterval >= 0 || nc.CompactionTombstones >= 0 {
		t.Fatalf("node config %v / %d, want off", nc.CompactionInterval, nc.CompactionTombstones)
	}
	if o.compactionMaxBatch != 1<<30 {
		t.Fatalf("--compaction-max-account-batch default %d, want 1GiB", o.compactionMaxBatch)
	}
	o, err = serveFlags(t, nil, []string{"BACKSTREAM_COMPACTION_MAX_ACCOUNT_BATCH=3GiB"})
	if nc := o.nodeConfig(&server{}, nil); err != nil || nc.CompactionMaxAccountBatch != 3<<30 {
		t.Fatalf("node config max account batch %d (%v), want 3GiB", nc.CompactionMaxAccountBatch, err)
	}
	for _, args := range [][]string{{"--compaction-interval", "-1m"}, {"--compaction-tombstones", "-5"},
		{"--compaction-max-account-batch", "4GiB"}, {"--compaction-max-account-batch", "-1"}} {
		if _, err := serveFlags(t, args, nil); !errors.Is(err, errUsage) {
			t.Errorf("%v: %v, want a usage error", args, err)
		}
	}
}

// TestServeFlagsRefusedNamed: each refused value is a usage error naming
// its flag and quoting what the operator typed.
func TestServeFlagsRefusedNamed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string // substrings of the error
	}{
		{[]string{"--relay", "http://127.0.0.1:7894/xrpc"}, []string{"--relay", `"http://127.0.0.1:7894/xrpc"`, "without a path"}},
		{[]string{"--relay", "https://relay.example/?x=1"}, []string{"--relay", `"https://relay.example/?x=1"`}},
		{[]string{"--retry-scan-period", "0"}, []string{`--retry-scan-period "0s"`, "positive"}},
		{[]string{"--retry-scan-period", "-1s"}, []string{`--retry-scan-period "-1s"`}},
		{[]string{"--capture-wait", "0"}, []string{`--capture-wait "0s"`, "positive"}},
		{[]string{"--capture-wait", "-5s"}, []string{`--capture-wait "-5s"`}},
		{[]string{"--listen", ""}, []string{`--listen ""`}},
		{[]string{"--listen", " "}, []string{`--listen " "`}},
		{[]string{"--listen", "garbage"}, []string{`--listen "garbage"`}},
		{[]string{"--listen", "127.0.0.1:99999"}, []string{`--listen "127.0.0.1:99999"`}},
		{[]string{"--admin-listen", "garbage"}, []string{`--admin-listen "garbage"`}},
		{[]string{"--admin-listen", ":nosuchservice"}, []string{`--admin-listen ":nosuchservice"`}},
		{[]string{"--data-dir", ""}, []string{`--data-dir ""`}},
		{[]string{"--devnet-accounts", "0"}, []string{`--devnet-accounts "0"`}},
		{[]string{"--devnet-rate", "-1"}, []string{`--devnet-rate "-1"`}},
		{[]string{"--loopback-hosts", "garbage"}, []string{`--loopback-hosts "garbage"`, "host:port on loopback"}},
		{[]string{"--loopback-hosts", "127.0.0.2:7001, 10.0.0.1:7002"}, []string{`--loopback-hosts "127.0.0.2:7001, 10.0.0.1:7002"`, `"10.0.0.1:7002"`}},
		{[]string{"--loopback-hosts", "127.0.0.2:0"}, []string{"--loopback-hosts", "bad port"}},
		{[]string{"--backfill-memory", "1PB"}, []string{"--backfill-memory", `"1PB"`}},
		{[]string{"--scratch-budget", "-1GiB"}, []string{"--scratch-budget", `"-1GiB"`}},
		{[]string{"--min-free", "-1GiB"}, []string{"--min-free", `"-1GiB"`, "want auto, off, or a size"}},
		{[]string{"--subscriber-buffer-budget", "64KiB"}, []string{`--subscriber-buffer-budget "64KiB"`, "128 KiB"}},
		{[]string{"--subscriber-buffer-budget", "131071"}, []string{`--subscriber-buffer-budget "131071"`}},
		{[]string{"--subscriber-buffer-budget", "auto"}, []string{`--subscriber-buffer-budget "auto"`}},
		{[]string{"--subscriber-buffer-budget", "lots"}, []string{`--subscriber-buffer-budget "lots"`}},
	} {
		_, err := serveFlags(t, tc.args, nil)
		if !errors.Is(err, errUsage) {
			t.Errorf("%q: %v, want a usage error", tc.args, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q: %q does not say %q", tc.args, err, w)
			}
		}
	}
	for _, a := range []string{":6008", "127.0.0.1:0", "[::1]:6008", "localhost:http"} {
		if _, err := serveFlags(t, []string{"--listen", a, "--admin-listen", a}, nil); err != nil {
			t.Errorf("--listen and --admin-listen %q: %v", a, err)
		}
	}
	if o, err := serveFlags(t, []string{"--admin-listen", ""}, nil); err != nil || o.http.adminListen != "" {
		t.Errorf("--admin-listen empty (disabled): %q, %v", o.http.adminListen, err)
	}
	if o, err := serveFlags(t, []string{"--loopback-hosts", "127.0.0.2:7001, localhost:7002,"}, nil); err != nil || len(o.loopbackHosts) != 2 {
		t.Errorf("--loopback-hosts: %q, %v", o.loopbackHosts, err)
	}
	if o, err := serveFlags(t, []string{"--subscriber-buffer-budget", "128KiB"}, nil); err != nil || o.subscribers.BufferBudget != 128<<10 {
		t.Errorf("--subscriber-buffer-budget of one subscriber: %d, %v", o.subscribers.BufferBudget, err)
	}
	// --devnet-rate 0 is a network without live traffic, not the oracle's
	// default rate.
	for rate, traffic := range map[string]string{"0": oracle.TrafficNone, "5": ""} {
		fs, err := parseFlags(serveCommand(), commands(), []string{"--devnet", "--devnet-rate", rate}, nil, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		if c := serveDevnetConfig(fs, slog.New(slog.DiscardHandler)); c.Traffic != traffic || c.Accounts != 3000 {
			t.Errorf("--devnet-rate %s: traffic %q, accounts %d; want %q, 3000", rate, c.Traffic, c.Accounts, traffic)
		}
	}
	// A trailing slash is the relay's root, not a path.
	if o, err := serveFlags(t, []string{"--relay", "https://relay.example/"}, nil); err != nil || o.relay != "https://relay.example/" {
		t.Errorf("--relay with a trailing slash: %q, %v", o.relay, err)
	}
}

// TestServeUsageErrorBeforeOpening: a refused flag exits 2 naming it, and
// nothing is created in the data dir.
func TestServeUsageErrorBeforeOpening(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	// Bounded: a serve that accepted the flag would run until cancelled.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var stderrb bytes.Buffer
	code := run(ctx, []string{"serve", "--data-dir", dir, "--listen", "127.0.0.1:0", "--admin-listen", "",
		"--relay", "http://127.0.0.1:7894/xrpc"}, nil, &bytes.Buffer{}, &stderrb)
	stderr := stderrb.String()
	if code != 2 || !strings.Contains(stderr, "--relay") {
		t.Fatalf("code %d, stderr %q; want 2 naming --relay", code, stderr)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the data dir was touched: %v", err)
	}
}

// TestServeDevnetOneAccount: --devnet-accounts is documented "at least 1",
// and serve has no flag for the simulated network's hosts, so a network
// smaller than the oracle's default host count must still start: serve
// --devnet --devnet-accounts 1 reaches steady state and stops cleanly.
func TestServeDevnetOneAccount(t *testing.T) {
	listen := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--devnet", "--devnet-listen", freeAddr(t), "--devnet-accounts", "1",
			"--listen", listen, "--admin-listen", "", "--log-format", "text", "--data-dir", t.TempDir()}, nil, &bytes.Buffer{}, &stderr)
	}()
	for {
		select {
		case code := <-done:
			t.Fatalf("serve --devnet --devnet-accounts 1 exited %d before steady state:\n%s", code, stderr.String())
		case <-ctx.Done():
			t.Fatalf("no steady state:\n%s", stderr.String())
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := http.Get("http://" + listen + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after the interrupt:\n%s", code, stderr.String())
	}
}
