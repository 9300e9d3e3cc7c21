package procenv

import (
	"slices"
	"testing"
)

// TestClean: BACKSTREAM_* variables are left out, others kept, extra added.
func TestClean(t *testing.T) {
	t.Setenv("BACKSTREAM_WORKERS", "7")
	t.Setenv("PROCENV_KEPT", "yes")
	env := Clean("BACKSTREAM_LISTEN=127.0.0.1:1")
	if slices.Contains(env, "BACKSTREAM_WORKERS=7") || !slices.Contains(env, "PROCENV_KEPT=yes") || env[len(env)-1] != "BACKSTREAM_LISTEN=127.0.0.1:1" {
		t.Fatalf("Clean: %q", env)
	}
}
