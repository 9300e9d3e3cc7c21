package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/backstream/backstream/internal/citest"
	"github.com/backstream/backstream/internal/procenv"
	"github.com/backstream/backstream/oracle"
)

// TestStatusCheckpointProcess: a real serve's admin /status has a
// checkpoint section that follows the checkpoints a real `backstream
// checkpoint --admin-listen` asks for: one that began and failed (its
// destination lies under a regular file: the stat fails, 500) shows as the
// last failure with its error, none written; the next, written, as the
// last success with its destination, the failure kept, nothing running and
// no call out. Its public /status has no checkpoint section and names no
// backup.
func TestStatusCheckpointProcess(t *testing.T) {
	citest.Long(t, "process-level test")
	bin := buildBinary(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	network, err := oracle.Start(ctx, oracle.Config{Accounts: 20, RecordsMean: 5, Hosts: 2, Rate: 50, Traffic: oracle.TrafficBasic, Seed: 41})
	if err != nil {
		t.Fatal(err)
	}
	defer network.Close()
	backup, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(backup, "file"), []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startServe(t, bin, network.RelayURL(), t.TempDir(),
		append(followArgs(network), "--capture-wait", "2s", "--backup-dir", backup, "--checkpoint-interval", "0s")...)
	waitSteady(t, p, 2*time.Minute)

	checkpoint := func(to string) (string, error) {
		cmd := exec.Command(bin, "checkpoint", "--admin-listen", p.admin, "--to", to)
		cmd.Env = procenv.Clean()
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	section := func(what string, cond func(ck map[string]any) bool) map[string]any {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ck, _ := p.statusMap()["checkpoint"].(map[string]any)
			if cond(ck) {
				return ck
			}
			if time.Now().After(deadline) {
				t.Fatalf("the admin /status never showed %s: checkpoint %v\nthe report: %v", what, ck, p.statusMap())
			}
		}
	}

	if out, err := checkpoint("file/b1"); err == nil || !strings.Contains(out, "not a directory") {
		t.Fatalf("a checkpoint under a regular file: %v\n%s; want it failed (not a directory)", err, out)
	}
	ck := section("the failed checkpoint", func(ck map[string]any) bool { return ck["last_failure_at"] != nil })
	if msg, _ := ck["last_error"].(string); !strings.Contains(msg, filepath.Join(backup, "file", "b1")) || !strings.Contains(msg, "not a directory") ||
		ck["backup_dir"] != backup || ck["last_success_at"] != nil || ck["running"] != nil || ck["stuck"] != nil {
		t.Fatalf("after a failed checkpoint: checkpoint %v; want the failure with its error under %s, none written, none running or stuck", ck, backup)
	}

	if out, err := checkpoint("good"); err != nil {
		t.Fatalf("checkpoint: %v\n%s", err, out)
	}
	ck = section("the checkpoint written", func(ck map[string]any) bool { return ck["last_success_at"] != nil })
	if ck["last_success_to"] != filepath.Join(backup, "good") || ck["last_failure_at"] == nil || ck["running"] != nil || ck["stuck"] != nil {
		t.Fatalf("after a checkpoint written: checkpoint %v; want it written to %s, the failure kept, none running or stuck", ck, filepath.Join(backup, "good"))
	}

	// The public listener's /status has none of it, and names no backup.
	resp, err := http.Get("http://" + p.listen + "/status?format=json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), `"checkpoint"`) || strings.Contains(string(body), backup) ||
		!strings.Contains(string(body), `"public": true`) {
		t.Fatalf("the public listener's /status: %d\n%s\nwant 200, marked public, without the checkpoint section or the backup dir %s", resp.StatusCode, body, backup)
	}
}
