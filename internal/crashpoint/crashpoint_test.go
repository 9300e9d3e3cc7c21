package crashpoint

import (
	"os/exec"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec string
		ok   bool
		n    int64
	}{{"", true, 0}, {RepoComplete, true, 1}, {RepoComplete + ":3", true, 3}, {"repo-complet", false, 0}, {RepoComplete + ":0", false, 0}, {RepoComplete + ":x", false, 0}, {RepoChunk + ":hold", true, 1}, {RepoChunk + ":2:hold", true, 2}, {"hold", false, 0}} {
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
	h, _ := Parse(RepoChunk + ":2:hold")
	killed, held := 0, 0
	h.kill, h.block = func() { killed++ }, func() { held++ }
	for i := 0; i < 4; i++ {
		h.Hit(RepoChunk)
	}
	if killed != 0 || held != 1 {
		t.Fatalf("hold: killed %d, held %d times; want held once at the 2nd pass, never killed", killed, held)
	}
}

// TestReleaseBuildRefuses: without the build tag, a set variable is an
// error naming the missing crash points, and nothing is armed; with the tag
// (the child run below) the same variable arms the point and the process
// dies by SIGKILL at it.
func TestReleaseBuildRefuses(t *testing.T) {
	if Built {
		t.Skip("this test binary was built with -tags crashpoint")
	}
	t.Setenv(EnvVar, LiveBatch)
	s, err := FromEnv()
	if s != nil || err == nil || !strings.Contains(err.Error(), "this build has no crash points") {
		t.Fatalf("FromEnv in a release build: %v, %v", s, err)
	}
	t.Setenv(EnvVar, "")
	if s, err := FromEnv(); s != nil || err != nil {
		t.Fatalf("unset variable: %v, %v", s, err)
	}
}

// TestKillsProcessWithTag runs TestKillsProcess in a test binary built with
// -tags crashpoint (the go tool is there: this is a test run).
func TestKillsProcessWithTag(t *testing.T) {
	if Built {
		t.Skip("TestKillsProcess runs directly in this binary")
	}
	out, err := exec.Command("go", "test", "-count=1", "-tags", "crashpoint", "-run", "^TestKillsProcess$", "-v", ".").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestKillsProcess") {
		t.Fatalf("go test -tags crashpoint -run TestKillsProcess: %v\n%s", err, out)
	}
}
