package main

// The process tests of this package (checkpoint, the bootstrap benchmark)
// run `backstream serve` through the crash harness of oracle/crash, which
// also holds the crash matrix, the SIGKILL and random-kill chains and the
// process end-to-ends. These are their thin helpers: a serve process with
// its /status decoded into this package's statusReport.

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/oracle"
	"github.com/backstream/backstream/oracle/crash"
)

func TestMain(m *testing.M) { os.Exit(crash.Main(m)) }

// buildBinary builds this command once per test binary.
func buildBinary(t *testing.T) string { return crash.Binary(t) }

func freeAddr(t *testing.T) string { return crash.FreeAddr(t) }

// killed reports whether a process ended by SIGKILL.
func killed(err error) bool { return crash.Killed(err) }

// proc is one running `backstream serve`.
type proc struct {
	*crash.Proc
	cmd    *exec.Cmd
	listen string     // the public listener
	admin  string     // the admin listener
	done   chan error // receives the exit error once
}

// followArgs are the serve flags that follow n: its relay's PDS hosts as
// --loopback-hosts (a host that could not bind the relay's port at its own
// address listens on a port of its own).
func followArgs(n *oracle.Network) []string {
	return []string{"--loopback-hosts", strings.Join(n.LoopbackHosts(), ",")}
}

func startServe(t *testing.T, bin, relay, dir string, args ...string) *proc {
	t.Helper()
	return startServeEnv(t, bin, relay, dir, nil, args...)
}

// startServeEnv starts serve on dir/data with extra environment.
func startServeEnv(t *testing.T, bin, relay, dir string, env []string, args ...string) *proc {
	t.Helper()
	cp := crash.Start(t, crash.Run{Bin: bin, Relay: relay, DataDir: filepath.Join(dir, "data"), LogDir: dir, Env: env, Args: args})
	p := &proc{Proc: cp, cmd: cp.Cmd, listen: cp.Listen, admin: cp.Admin, done: make(chan error, 1)}
	go func() {
		<-cp.Done()
		p.done <- cp.Err()
	}()
	return p
}

// status fetches /status; ok=false while the process is not answering.
func (p *proc) status() (statusReport, bool) {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.listen + "/status")
	if err != nil {
		return statusReport{}, false
	}
	defer resp.Body.Close()
	var r statusReport
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&r) != nil {
		return statusReport{}, false
	}
	return r, true
}

func (p *proc) tail() string { return p.Tail() }

// readStore opens dir/data read-only (no process may hold it).
func readStore(t *testing.T, dir string) *archive.Store {
	t.Helper()
	s, err := crash.OpenStore(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func waitSteady(t *testing.T, p *proc, d time.Duration) statusReport {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if p.Exited() {
			t.Fatalf("serve exited: %v\n%s", p.Err(), p.tail())
		}
		if r, ok := p.status(); ok && r.Phase == "steady_state" {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("no steady state:\n%s", p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitConverged waits until serve is in steady state, the relay's traffic
// has ended, cursor/relay equals the relay's last seq, and a few retry
// passes have run since (they bring in the last #sync and reactivation
// marks).
func waitConverged(t *testing.T, p *proc, net *oracle.Network, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var caughtUp time.Time
	for {
		if p.Exited() {
			t.Fatalf("serve exited: %v\n%s", p.Err(), p.tail())
		}
		r, ok := p.status()
		st := net.Status()
		if ok && r.Phase == "steady_state" && st.Done && r.Cursors.Relay != nil && *r.Cursors.Relay == uint64(st.Seq) {
			if caughtUp.IsZero() {
				caughtUp = time.Now()
			}
			if time.Since(caughtUp) > 3*time.Second {
				return
			}
		} else {
			caughtUp = time.Time{}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no convergence: %+v relay %+v\n%s", r, st, p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
