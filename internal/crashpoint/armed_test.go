//go:build crashpoint

package crashpoint

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// TestKillsProcess runs this test binary as a child that hits the point: it
// must die by SIGKILL.
func TestKillsProcess(t *testing.T) {
	if os.Getenv("CRASHPOINT_CHILD") == "1" {
		s, err := FromEnv()
		if err != nil {
			os.Exit(3)
		}
		s.Hit(LiveBatch)
		os.Exit(0) // not reached
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKillsProcess$")
	cmd.Env = append(os.Environ(), "CRASHPOINT_CHILD=1", EnvVar+"="+LiveBatch)
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok {
		t.Fatalf("child did not die: %v", err)
	}
	if ws := ee.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child exit %v, want SIGKILL", ee)
	}
}
