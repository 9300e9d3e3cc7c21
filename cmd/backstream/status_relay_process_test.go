package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/oracle"
)

// statusMap fetches the admin listener's /status as JSON, decoded into a
// map (nil while the process is not answering).
func (p *proc) statusMap() map[string]any {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.admin + "/status?format=json")
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	var m map[string]any
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&m) != nil {
		return nil
	}
	return m
}

// TestStatusRelayUnreachable: a relay that goes away in steady state. Before,
// /status showed the lag growing and "gaps.lagging" saying the archive is
// behind, but not why: the consumer's dial failures were logged at INFO
// only, which the status page's last warnings and errors do not keep. Now
// /status's "firehose" says the relay connection is down, since when, and
// the dial's error.
func TestStatusRelayUnreachable(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	network, err := oracle.Start(ctx, oracle.Config{Accounts: 30, RecordsMean: 5, Hosts: 2, Rate: 100, Traffic: oracle.TrafficBasic, Seed: 18})
	if err != nil {
		t.Fatal(err)
	}
	p := startServe(t, bin, network.RelayURL(), t.TempDir(), append(followArgs(network), "--capture-wait", "2s")...)
	waitSteady(t, p, 2*time.Minute)
	link := func() map[string]any {
		f, _ := p.statusMap()["firehose"].(map[string]any)
		return f
	}
	waitFor := func(what string, cond func(f map[string]any) bool) map[string]any {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			if p.Exited() {
				t.Fatalf("serve exited waiting for %s: %v\n%s", what, p.Err(), p.tail())
			}
			if f := link(); cond(f) {
				return f
			}
			if time.Now().After(deadline) {
				t.Fatalf("/status never showed %s: firehose %v\nthe report: %v", what, link(), p.statusMap())
			}
		}
	}
	waitFor("the relay connected", func(f map[string]any) bool { return f["connected"] == true && f["since"] != nil })
	closedAt := time.Now()
	network.Close()
	f := waitFor("the relay connection down with the dial's error", func(f map[string]any) bool {
		msg, _ := f["last_error"].(string)
		return f["connected"] == false && strings.Contains(msg, "connection refused")
	})
	since, err := time.Parse(time.RFC3339Nano, f["since"].(string))
	if err != nil || since.Before(closedAt.Add(-time.Second)) {
		t.Fatalf("down since %v (%v), the relay closed at %v", f["since"], err, closedAt)
	}
	if _, err := time.Parse(time.RFC3339Nano, f["last_error_at"].(string)); err != nil {
		t.Fatalf("last_error_at %v: %v", f["last_error_at"], err)
	}
}

// TestStatusRetrySection: /status's "retry" is the running retry runner's
// state (due, queued, in flight, parked hosts, passes): before, nothing of
// the runner was on /status, and a PDS host parked in steady state showed
// only as a WARN line.
func TestStatusRetrySection(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	network, err := oracle.Start(ctx, oracle.Config{Accounts: 20, RecordsMean: 5, Hosts: 2, Rate: 20, Traffic: oracle.TrafficBasic, Seed: 19})
	if err != nil {
		t.Fatal(err)
	}
	defer network.Close()
	p := startServe(t, bin, network.RelayURL(), t.TempDir(), append(followArgs(network), "--capture-wait", "2s", "--retry-scan-period", "200ms")...)
	waitSteady(t, p, 2*time.Minute)
	var r map[string]any
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if p.Exited() {
			t.Fatalf("serve exited: %v\n%s", p.Err(), p.tail())
		}
		r, _ = p.statusMap()["retry"].(map[string]any)
		if passes, _ := r["passes"].(float64); r["running"] == true && passes >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/status never showed the retry runner running two passes: retry %v", r)
		}
	}
	for _, k := range []string{"due", "queued", "in_flight", "parked_hosts", "last_pass_at", "last_pass_seconds"} {
		if _, ok := r[k]; !ok {
			t.Errorf("/status retry lacks %q: %v", k, r)
		}
	}
}
