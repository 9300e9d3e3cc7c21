// Package citest holds the one rule for tests that need something of the
// machine (root, a browser, a tool): they skip on a developer's machine that
// lacks it, and fail in CI, where .ci/run sets BACKSTREAM_CI=1 and installs
// what they need. A test that skips in CI proves nothing there.
//
// Test code only: no production package imports it.
package citest

import (
	"os"
	"testing"
)

// EnvVar is set to 1 by .ci/run.
const EnvVar = "BACKSTREAM_CI"

// InCI reports whether the tests run under .ci/run.
func InCI() bool { return os.Getenv(EnvVar) == "1" }

// Need skips t with reason outside CI and fails it in CI.
func Need(t testing.TB, reason string) {
	t.Helper()
	if InCI() {
		t.Fatalf("%s (required in CI: %s=1)", reason, EnvVar)
	}
	t.Skip(reason)
}

// NeedRoot is Need for tests that mount filesystems or change limits.
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Need(t, "needs root")
	}
}
