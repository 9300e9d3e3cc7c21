package natstest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// StartProcs runs an n-node cluster as nats-server processes (built from
// the module into a temporary directory), so a benchmark's process holds
// only backstream's side. t.Cleanup kills them.
func StartProcs(t testing.TB, n int) (urls string) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "nats-server")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/nats-io/nats-server/v2").CombinedOutput(); err != nil {
		t.Fatalf("natstest: build nats-server: %v\n%s", err, out)
	}
	clientPorts, routePorts := freePorts(t, n), freePorts(t, n)
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
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	urls = strings.Join(us, ",")
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
				return urls
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("natstest: the cluster has no JetStream after 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
