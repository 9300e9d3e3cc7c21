package main

// Process-level test of the descriptor attack: a real `backstream serve`
// under a lowered RLIMIT_NOFILE, following the simulated network under
// live traffic, is flooded with keep-alive connections that send one GET
// and idle. Skipped under -short (TestConnLimits is its in-process
// reduction).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/oracle"
	"github.com/gorilla/websocket"
)

// fdAttack is the scale of the attack.
const (
	attackFDLimit  = 2048 // RLIMIT_NOFILE of serve (soft = hard)
	attackPerIP    = 300  // connections from one address (cap 200)
	attackIPs      = 27   // then this many addresses...
	attackEachIP   = 100  // ...with this many connections each
	attackIdle     = 8 * time.Second
	attackWorkers  = 64
	answerDeadline = 2 * time.Second // a refusal or an answer, never a hang
)

// limitedBinary is a wrapper that runs bin with RLIMIT_NOFILE = n.
func limitedBinary(t *testing.T, bin string, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "backstream-nofile")
	script := fmt.Sprintf("#!/bin/sh\nulimit -n %d || exit 97\nexec %q \"$@\"\n", n, bin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// attackResult counts the answers to a wave of connections.
type attackResult struct {
	ok, tooMany, unavailable, other int
	closed                          int // closed by the server without an answer (a refusal whose answer a reset lost)
	slowest                         time.Duration
	held                            []net.Conn
}

// flood opens n connections from src addresses (src(i)), each sending one
// GET /healthz; those answered 200 stay open, idle.
func flood(t *testing.T, addr string, n int, src func(i int) string) *attackResult {
	t.Helper()
	res := &attackResult{}
	var mu sync.Mutex
	jobs := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < attackWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				start := time.Now()
				c, err := dialFrom(src(i), addr)
				code := 0
				if err == nil {
					code, err = getOn(c, "/healthz")
				}
				took := time.Since(start)
				mu.Lock()
				res.slowest = max(res.slowest, took)
				switch {
				case err != nil && closedError(err):
					res.closed++
				case err != nil:
					res.other++
				case code == 200:
					res.ok++
					res.held = append(res.held, c)
				case code == http.StatusTooManyRequests:
					res.tooMany++
				case code == http.StatusServiceUnavailable:
					res.unavailable++
				default:
					res.other++
				}
				mu.Unlock()
				if c != nil && code != 200 {
					c.Close()
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range res.held {
			c.Close()
		}
	})
	return res
}

// closedError: the server closed the connection.
func closedError(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// timedGet is one GET with a deadline: its status, or 0 and the error.
func timedGet(url string, d time.Duration) (int, time.Duration, error) {
	c := http.Client{Timeout: d, Transport: &http.Transport{DisableKeepAlives: true}}
	start := time.Now()
	resp, err := c.Get(url)
	if err != nil {
		return 0, time.Since(start), err
	}
	resp.Body.Close()
	return resp.StatusCode, time.Since(start), nil
}

func tipAt(t *testing.T, admin string) uint64 {
	t.Helper()
	c := http.Client{Timeout: answerDeadline}
	resp, err := c.Get("http://" + admin + "/status")
	if err != nil {
		t.Fatalf("admin /status: %v", err)
	}
	defer resp.Body.Close()
	var r statusReport
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Archive.TipSeq
}

// TestFDExhaustionProcess: serve with RLIMIT_NOFILE 2048 derives its
// connection cap from the limit minus the reserve for the store and the
// downloads; 300 connections from one address and 2,700 from 27 others,
// each sending one GET and idling, get 200 within the caps and a prompt
// 429 or 503 beyond; meanwhile /healthz answers on the admin listener, the
// public /healthz and a /subscribe handshake succeed or get a prompt 503,
// and the archive tip keeps moving under live traffic; after
// --http-idle-timeout the server has closed every idle connection, the
// public listener serves again, and the log shows no descriptor error.
func TestFDExhaustionProcess(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur < 3*(attackPerIP+attackIPs*attackEachIP) {
		t.Fatalf("this test holds %d client sockets: its own RLIMIT_NOFILE is %d (%v)", attackPerIP+attackIPs*attackEachIP, rl.Cur, err)
	}
	bin := limitedBinary(t, buildBinary(t), attackFDLimit)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	network, err := oracle.Start(ctx, oracle.Config{Accounts: 60, RecordsMean: 10, Hosts: 2, Rate: 200, Traffic: oracle.TrafficBasic, Seed: 14})
	if err != nil {
		t.Fatal(err)
	}
	defer network.Close()
	p := startServe(t, bin, network.RelayURL(), t.TempDir(), append(followArgs(network), "--backfill-workers", "4", "--retry-workers", "2", "--capture-wait", "2s",
		"--max-conns-per-ip", "200", "--http-idle-timeout", attackIdle.String())...)
	waitSteady(t, p, 2*time.Minute)
	wantCap := attackFDLimit - int(fdReserve(4, 2))
	if !strings.Contains(p.tail(), fmt.Sprintf(`"max_conns":%d`, wantCap)) {
		t.Fatalf("serve did not log the derived cap %d:\n%s", wantCap, p.tail())
	}

	tip0 := tipAt(t, p.admin)
	start := time.Now()
	one := flood(t, p.listen, attackPerIP, func(int) string { return "127.0.0.250" })
	many := flood(t, p.listen, attackIPs*attackEachIP, func(i int) string { return fmt.Sprintf("127.0.0.%d", 1+i/attackEachIP) })
	t.Logf("attack: one address %d connections: %d ok, %d 429, %d 503, %d closed unanswered, %d other, slowest %v",
		attackPerIP, one.ok, one.tooMany, one.unavailable, one.closed, one.other, one.slowest)
	t.Logf("attack: %d addresses × %d: %d ok, %d 429, %d 503, %d closed unanswered, %d other, slowest %v (in %v)",
		attackIPs, attackEachIP, many.ok, many.tooMany, many.unavailable, many.closed, many.other, many.slowest, time.Since(start))
	if one.ok < 200 || one.tooMany == 0 || one.other != 0 || many.other != 0 || many.unavailable == 0 {
		t.Fatalf("unexpected answers:\n%s", p.tail())
	}
	if one.ok+many.ok > wantCap+attackPerIP { // slots freed by the idle timeout may be reused
		t.Fatalf("%d connections held open, cap %d", one.ok+many.ok, wantCap)
	}
	if s := max(one.slowest, many.slowest); s > answerDeadline {
		t.Fatalf("a connection waited %v for its answer", s)
	}

	// While the idle connections are held: the admin /healthz answers; the
	// public /healthz and a handshake succeed or are refused promptly.
	code, took, err := timedGet("http://"+p.admin+"/healthz", answerDeadline)
	if err != nil || code != 200 {
		t.Fatalf("admin /healthz under attack: %d %v after %v", code, err, took)
	}
	t.Logf("under attack: admin /healthz 200 in %v", took)
	// A refusal is answered as the connection is accepted, before its
	// request is read: net/http's client, whose request may not be on its
	// way yet, takes such an early answer for a broken connection
	// ("readLoopPeekFailLocked"), so the request is written first by hand.
	// The refusal's answer may also be lost to the reset of a connection
	// closed with the request unread (closedError), as in the flood.
	hcStart := time.Now()
	code, err = 0, nil
	if c, derr := dialFrom("127.0.0.1", p.listen); derr != nil {
		err = derr
	} else {
		code, err = getOn(c, "/healthz")
		c.Close()
	}
	took = time.Since(hcStart)
	if took > answerDeadline || (err != nil && !closedError(err)) || (err == nil && code != 200 && code != http.StatusServiceUnavailable) {
		t.Fatalf("public /healthz under attack: %d %v after %v", code, err, took)
	}
	t.Logf("under attack: public /healthz %d (%v) in %v", code, err, took)
	d := websocket.Dialer{HandshakeTimeout: answerDeadline}
	hsStart := time.Now()
	ws, resp, err := d.Dial("ws://"+p.listen+"/subscribe", nil)
	switch {
	case err == nil:
		ws.Close()
		t.Logf("under attack: /subscribe handshake succeeded in %v", time.Since(hsStart))
	case resp != nil && resp.StatusCode == http.StatusServiceUnavailable:
		t.Logf("under attack: /subscribe handshake refused with 503 in %v", time.Since(hsStart))
	default:
		t.Fatalf("/subscribe handshake under attack: %v (%v) after %v", err, resp, time.Since(hsStart))
	}
	// The store keeps writing.
	for deadline := time.Now().Add(30 * time.Second); tipAt(t, p.admin) <= tip0+100; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the archive tip stays at %d under attack:\n%s", tipAt(t, p.admin), p.tail())
		}
	}

	// The idle timeout closes every held connection.
	for _, res := range []*attackResult{one, many} {
		for i, c := range res.held {
			if err := closedByServer(c, attackIdle+5*time.Second); err != nil {
				t.Fatalf("idle connection %d: %v", i, err)
			}
		}
	}
	t.Logf("every idle connection closed by the server %v after the attack began", time.Since(start))
	if code, took, err := timedGet("http://"+p.listen+"/healthz", answerDeadline); err != nil || code != 200 {
		t.Fatalf("public /healthz after the idle timeout: %d %v after %v", code, err, took)
	}
	ws, _, err = d.Dial("ws://"+p.listen+"/subscribe", nil)
	if err != nil {
		t.Fatalf("/subscribe after the idle timeout: %v", err)
	}
	ws.Close()
	if p.Exited() {
		t.Fatalf("serve exited: %v\n%s", p.Err(), p.tail())
	}
	log, _ := os.ReadFile(p.Log)
	if strings.Contains(string(log), "too many open files") {
		t.Fatalf("serve ran out of descriptors:\n%s", p.tail())
	}
	for _, line := range []string{"the global connection cap is reached", "a client address reached its connection cap"} {
		if n := strings.Count(string(log), line); n != 1 {
			t.Fatalf("%d log lines %q, want one", n, line)
		}
	}
}
