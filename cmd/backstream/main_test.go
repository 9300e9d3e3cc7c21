package main

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/backstream/backstream/archive"
)

// TestFailedExitStatus: main decides the exit status from the command's
// error. A fatal store error anywhere in the chain is status 2, with the
// store's operator message in the log; a usage error is 2 as well; any
// other failure is 1.
func TestFailedExitStatus(t *testing.T) {
	fatal := &archive.FatalError{Err: archive.PersistError("/data", "pebble", syscall.ENOSPC)}
	for _, tc := range []struct {
		name string
		err  error
		code int
		want string
	}{
		{"fatal store error", fmt.Errorf("a steady-state component stopped: %w", fatal), 2, "disk full at /data: free space and restart"},
		{"usage", fmt.Errorf("%w: --relay: want an http(s) URL", errUsage), 2, "--relay"},
		{"other", errors.New("http server: boom"), 1, "boom"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			code := failed("serve", tc.err, slog.New(slog.NewTextHandler(&out, nil)), &out)
			if code != tc.code || !strings.Contains(out.String(), tc.want) {
				t.Fatalf("exit %d, output %q; want %d and %q", code, out.String(), tc.code, tc.want)
			}
		})
	}
}
