package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/diskspace"
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

// TestServeDevnetPortTaken: a taken --devnet-listen port is a failure to
// start, as a taken --listen port is (exit 1, the log naming the flag and
// the bind error), not a usage error: the flag's value is valid, and
// "usage:" with exit 2 sends the operator to the flags instead of to the
// process holding the port. A --devnet-listen that is no address at all
// stays a usage error.
func TestServeDevnetPortTaken(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	serve := func(devnetListen string) (int, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, []string{"serve", "--devnet", "--devnet-listen", devnetListen, "--devnet-accounts", "10",
			"--listen", "127.0.0.1:0", "--admin-listen", "", "--log-format", "text", "--data-dir", t.TempDir()}, nil, &out, &errb)
		return code, errb.String()
	}
	code, stderr := serve(held.Addr().String())
	if code != 1 || strings.Contains(stderr, "usage") || !strings.Contains(stderr, "--devnet-listen") ||
		!strings.Contains(stderr, "address already in use") {
		t.Fatalf("serve --devnet on a taken port: exit %d, want 1, no \"usage\", naming --devnet-listen and the bind error:\n%s", code, stderr)
	}
	if code, stderr := serve("bogus"); code != 2 || !strings.Contains(stderr, "usage") {
		t.Fatalf("serve --devnet-listen bogus: exit %d, want 2 (usage):\n%s", code, stderr)
	}
}

// TestServeStartBelowFloorExitsOne: a start on a volume already below the
// free-space floor refuses to open the store with the disk-full message
// and exit status 1 (operating.md, Fatal errors and The disk): only a
// disk fault met while running is status 2. A floor no freed space can
// meet (not below the volume's size) is refused the same way, saying to
// lower --min-free.
func TestServeStartBelowFloorExitsOne(t *testing.T) {
	dir := t.TempDir()
	sp, err := diskspace.Stat(dir)
	if err != nil || sp.Total-min(sp.Free, sp.Total) < 64<<20 {
		t.Skipf("the test volume's space %+v (%v) leaves no floor between its free space and its size", sp, err)
	}
	floor := fmt.Sprintf("%dB", sp.Free+(sp.Total-sp.Free)/2)
	code, _, stderr := runCLI(t, nil, "serve", "--data-dir", dir, "--relay", "http://127.0.0.1:1",
		"--listen", "127.0.0.1:0", "--admin-listen", "", "--min-free", floor, "--log-format", "text")
	if code != 1 || !strings.Contains(stderr, "disk full at "+dir) || !strings.Contains(stderr, "below the floor") {
		t.Fatalf("--min-free %s: exit %d, want 1 with the disk-full message naming the floor:\n%s", floor, code, stderr)
	}
	code, _, stderr = runCLI(t, nil, "serve", "--data-dir", dir, "--relay", "http://127.0.0.1:1",
		"--listen", "127.0.0.1:0", "--admin-listen", "", "--min-free", "100TiB", "--log-format", "text")
	if code != 1 || !strings.Contains(stderr, "lower --min-free") || strings.Contains(stderr, "free space and restart") {
		t.Fatalf("--min-free 100TiB: exit %d, want 1 saying to lower --min-free:\n%s", code, stderr)
	}
}
