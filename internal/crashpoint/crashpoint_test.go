package crashpoint

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		ok   bool
		n    int64
	}{{"", true, 0}, {RepoComplete, true, 1}, {RepoComplete + ":3", true, 3}, {"repo-complet", false, 0}, {RepoComplete + ":0", false, 0}, {RepoComplete + ":x", false, 0}} {
		s, err := Parse(tc.spec)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v", tc.spec, err)
			continue
		}
		if tc.spec != "" && tc.ok && s.n != tc.n {
			t.Errorf("%q: n %d", tc.spec, s.n)
		}
	}
	if _, err := Parse("nope"); err == nil || !strings.Contains(err.Error(), RepoComplete) {
		t.Errorf("unknown point error does not list the known ones: %v", err)
	}
}

func TestHitCountsAndNil(t *testing.T) {
	var nilSet *Set
	nilSet.Hit(RepoComplete) // never fires, never panics
	s, _ := Parse(MergeBatch + ":3")
	fired := 0
	s.kill = func() { fired++ }
	for i := 0; i < 5; i++ {
		s.Hit(MergeBatch)
		s.Hit(RepoComplete)
	}
	if fired != 1 {
		t.Fatalf("fired %d times, want once at the 3rd pass", fired)
	}
}

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
