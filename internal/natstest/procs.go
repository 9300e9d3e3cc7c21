package natstest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/backstream/backstream/internal/procstat"
)

// Procs is a cluster of nats-server processes.
type Procs struct {
	URLs string // client URLs, comma-separated
	pids []int
}

// CPU is the CPU time (user and system) the servers have used so far.
func (p *Procs) CPU(t testing.TB) time.Duration {
	t.Helper()
	var total time.Duration
	for _, pid := range p.pids {
		d, err := procstat.CPU(pid)
		if err != nil {
			t.Fatalf("natstest: server cpu: %v", err)
		}
		total += d
	}
	return total
}

// RSS is the servers' resident memory, summed.
func (p *Procs) RSS(t testing.TB) (bytes int64) {
	t.Helper()
	for _, pid := range p.pids {
		kb, err := procstat.StatusKB(pid, "VmRSS")
		if err != nil {
			t.Fatalf("natstest: server memory: %v", err)
		}
		bytes += kb << 10
	}
	return bytes
}

// StartProcs runs an n-node cluster as nats-server processes (built from
// the module into a temporary directory), so a benchmark's process holds
// only backstream's side and the servers' CPU is measured apart (Procs.CPU).
// t.Cleanup kills them.
func StartProcs(t testing.TB, n int) *Procs {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("natstest: build nats-server: %v\n%s", err, out)
	}
	clientPorts, routePorts := freePorts(t, n), freePorts(t, n)
	p := &Procs{}
	var routes, us []string
	for i := range n {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", routePorts[i]))
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", clientPorts[i]))
	}
	for i := range n {
		args := []string{"-a", "127.0.0.1", "-p", fmt.Sprint(clientPorts[i]), "-js", "-sd", filepath.Join(dir, fmt.Sprintf("n%d", i)), "-n", fmt.Sprintf("n%d", i)}
		if n > 1 {
			args = append(args, "--cluster_name", "bs", "--cluster", routes[i], "--routes", strings.Join(routes, ","))
		}
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = nil, nil
		// The servers die with the test process, even one killed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		p.pids = append(p.pids, cmd.Process.Pid)
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	urls := strings.Join(us, ",")
	p.URLs = urls
	deadline := time.Now().Add(30 * time.Second)
	for {
		nc, err := nats.Connect(urls)
		if err == nil {
			_, err = nc.JetStream()
			if err == nil {
				js, _ := nc.JetStream()
				_, err = js.AccountInfo()
			}
			nc.Close()
			if err == nil {
				return p
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: the cluster has no JetStream after 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
