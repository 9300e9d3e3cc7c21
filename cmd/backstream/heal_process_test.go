package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// readyz is /readyz's status code and body (0 while not answering).
func (p *proc) readyz() (int, string) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.listen + "/readyz")
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestDevnetRestartHealsGap: `serve --devnet` restarted on the same data dir
// meets a relay whose sequence starts over below the stored cursor. Before,
// the consumer redialed FutureCursor forever: the tip stopped while /status
// said steady_state and /readyz answered 200. Now the gap is recorded,
// /readyz answers 503 naming it and /status lists it, the stream follows the
// new sequence, and once the repair pass and its replacements are done the
// gap closes and /readyz is 200 again.
func TestDevnetRestartHealsGap(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	args := []string{"--devnet", "--devnet-listen", freeAddr(t), "--devnet-accounts", "20", "--devnet-rate", "200",
		"--capture-wait", "1s", "--max-stale", "30s", "--repair-period", "200ms",
		"--retry-scan-period", "200ms", "--retry-interval", "200ms", "--retry-max-delay", "1s"}
	p := startServe(t, bin, "http://127.0.0.1:1", dir, args...)
	waitSteady(t, p, time.Minute)
	waitStatus(t, p, time.Minute, "the cursor past 600", func(r statusReport) bool {
		return r.Cursors.Relay != nil && *r.Cursors.Relay > 600
	})
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.tail())
	}
	r0, _ := readStoreCursor(t, dir)

	p = startServe(t, bin, "http://127.0.0.1:1", dir, args...)
	var lagging string
	r := waitStatus(t, p, time.Minute, "a future_cursor gap, then healed and ready", func(r statusReport) bool {
		if code, body := p.readyz(); code == http.StatusServiceUnavailable && strings.Contains(body, "gap") && lagging == "" {
			lagging = body
		}
		if r.Gaps == nil || r.Gaps.Closed == 0 || r.Gaps.Open > 0 {
			return false
		}
		code, _ := p.readyz()
		return code == http.StatusOK
	})
	if lagging == "" {
		t.Errorf("/readyz never answered 503 for the open gap")
	}
	t.Logf("healed: %d gaps closed; /readyz said %q", r.Gaps.Closed, strings.TrimSpace(lagging))
	if err := p.Stop(30 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, p.tail())
	}
	s := readStore(t, dir)
	defer s.Close()
	gs, err := s.Gaps()
	if err != nil || len(gs) != 1 || gs[0].Kind.String() != "future_cursor" || gs[0].FromSeq != r0 || gs[0].ToSeq == 0 || gs[0].ToSeq >= r0 || gs[0].Open() {
		t.Fatalf("gaps %+v, %v: want one closed future_cursor gap from %d into the new sequence below it", gs, err, r0)
	}
}

// waitStatus polls /status until cond holds.
func waitStatus(t *testing.T, p *proc, d time.Duration, what string, cond func(statusReport) bool) statusReport {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if p.Exited() {
			t.Fatalf("serve exited waiting for %s: %v\n%s", what, p.Err(), p.tail())
		}
		if r, ok := p.status(); ok && cond(r) {
			return r
		}
		if time.Now().After(deadline) {
			r, _ := p.status()
			t.Fatalf("timed out waiting for %s: status %+v gaps %+v\n%s", what, r, r.Gaps, p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// readStoreCursor is cursor/relay of the store under dir (no process may
// hold it).
func readStoreCursor(t *testing.T, dir string) (uint64, bool) {
	t.Helper()
	s := readStore(t, dir)
	defer s.Close()
	c, err := s.RelayCursor()
	return c, err == nil
}
