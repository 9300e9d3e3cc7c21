// Package citest holds the rules for tests that CI must not let skip. A
// test that needs something of the machine (root, a browser, a tool) skips
// on a developer's machine that lacks it and fails in CI, where .ci/run sets
// CI=1 and installs what it needs. A heavy test skips under -short through
// Long, and CI runs every such test after `make test`. A test that skips in
// CI proves nothing there. (The variable is not a BACKSTREAM_* one: the
// binary refuses unknown variables of its own prefix, and the process-level
// tests hand their environment to it.)
//
// Test code only: no production package imports it.
package citest

import (
	"fmt"
	"os"
	"syscall"
	"testing"
)

// EnvVar is set to 1 by .ci/run (the convention of CI services).
const EnvVar = "CI"

// InCI reports whether the tests run under .ci/run.
func InCI() bool { v := os.Getenv(EnvVar); return v == "1" || v == "true" }

// Need skips t with reason outside CI and fails it in CI.
func Need(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s (required in CI: %s=1)", reason, EnvVar)
	}
	t.Skip(reason)
}

// Long skips t under -short with reason: the test is heavy (a subprocess,
// a big world, a long sweep) and `make test` leaves it out. Every test that
// skips whole under -short calls Long, so that `make test-skipped`, which
// CI runs after `make test`, finds it and runs it in full
// (scripts/longtests). A test that only shrinks under -short does not.
func Long(t testing.TB, reason string) {
	t.Helper()
	if testing.Short() {
		t.Skip(reason + " (make test-skipped runs it)")
	}
}

// NeedRoot is Need for tests that mount filesystems or change limits.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Need(t, "needs root")
	}
}

// Tmpfs mounts a tmpfs of size bytes on dir (created if missing) until the
// test ends; opts are further tmpfs options, comma-separated ("nr_inodes=1").
// It needs root: see NeedRoot.
func Tmpfs(t testing.TB, dir string, size int64, opts string) {
	t.Helper()
	NeedRoot(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("size=%d", size)
	if opts != "" {
		data += "," + opts
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, data); err != nil {
		t.Fatalf("mount a %d-byte tmpfs on %s: %v", size, dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}
