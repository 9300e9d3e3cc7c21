package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
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

// TestDataDirIsStoreDir: every command with --data-dir refuses a store
// directory itself (a data dir's store/) with a usage error naming the flag
// and creates nothing inside it; without the check, serve and compaction
// reset would start a new store at store/store.
func TestDataDirIsStoreDir(t *testing.T) {
	base := t.TempDir()
	data := filepath.Join(base, "data")
	seedStore(t, data)
	storeDir := filepath.Join(data, archive.StoreDir)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // a serve that got past the check stops at once
	for _, args := range [][]string{
		{"serve", "--relay", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"},
		{"status"},
		{"checkpoint", "--to", filepath.Join(base, "ck")},
		{"compaction", "reset"},
	} {
		var out, errb bytes.Buffer
		code := run(ctx, append(args, "--data-dir", storeDir), nil, &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), "--data-dir") || !strings.Contains(errb.String(), "looks like a store directory") {
			t.Errorf("%s --data-dir %s: exit %d, %s", args[0], storeDir, code, errb.String())
		}
		for _, sub := range []string{archive.StoreDir, archive.ScratchDir} {
			if _, err := os.Stat(filepath.Join(storeDir, sub)); !os.IsNotExist(err) {
				t.Fatalf("%s created %s inside the store directory: %v", args[0], sub, err)
			}
		}
	}
	if code, _, stderr := runCLI(t, nil, "status", "--data-dir", data); code != 0 {
		t.Fatalf("status of the data dir itself: %d %s", code, stderr)
	}
}
