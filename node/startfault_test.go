package node_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
	"github.com/cockroachdb/pebble/vfs/errorfs"

	"github.com/backstream/backstream/archive"
	"github.com/backstream/backstream/internal/promtest"
	"github.com/backstream/backstream/internal/storefault"
	"github.com/backstream/backstream/lifecycle"
	"github.com/backstream/backstream/node"
)

// TestNewStopsOnStuckDisk: a start whose disk gets stuck before the node
// runs (here in Pebble's open, writing to a table the write-ahead log a
// kill left behind, with no error and no end) does not hang for ever
// while the probes say it is healthy: once the write has been stuck for
// MaxWriteStall, the store's disk fault fails the probes and node.New
// returns it, so the process exits and its supervisor restarts it.
func TestNewStopsOnStuckDisk(t *testing.T) {
	mem := vfs.NewMem()
	s := relayStore(t, mem)
	for i := 0; i < 1000; i++ { // left in the write-ahead log: the next open replays it into a table
		if err := s.DB().Set([]byte(fmt.Sprintf("zz/%06d", i)), make([]byte, 1000), pebble.NoSync); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	sst := &sstFault{release: make(chan struct{})}
	defer sst.unhold()
	sst.hold.Store(true) // every sstable write from now on hangs
	startOnStuckDisk(t, sst.wrap(mem), sst.unhold, "a stuck disk", "no error from the disk holding /data")
}

// relayStore is a store under /data on mem that follows the relay the
// stuck-disk starts name; the caller writes to it and closes it.
func relayStore(t *testing.T, mem vfs.FS) *archive.Store {
	t.Helper()
	s, err := archive.Open("/data", archive.Options{FS: mem, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetRelay("127.0.0.1:1", false); err != nil {
		t.Fatal(err)
	}
	return s
}

// startOnStuckDisk runs node.New over fs, whose disk hangs as stuck says,
// and wants it to return the store's disk fault (its error holding want)
// within 30 s, with the probes failing. Then it lets the disk answer
// (release) and waits for the start New abandoned to end: it stops at the
// fault, closing the store, and builds nothing more (the download client,
// which makes its scratch dir, among the rest).
func startOnStuckDisk(t *testing.T, fs vfs.FS, release func(), stuck, want string) {
	t.Helper()
	cfg := memConfig(t, nil, archive.Options{FS: fs})
	cfg.ScratchDir = filepath.Join(cfg.ScratchDir, "scratch") // made by the download client, if built
	cfg.Relay = "http://127.0.0.1:1"
	cfg.MaxWriteStall = 200 * time.Millisecond
	cfg.Health = new(lifecycle.Health)
	type result struct {
		n   *node.Node
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := node.New(cfg)
		done <- result{n, err}
	}()
	// Pebble's disk-health checker looks every few seconds.
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("node.New still blocked 30 s into %s (MaxWriteStall %v); /healthz would say: %v", stuck, cfg.MaxWriteStall, cfg.Health.Err())
	}
	if r.err == nil || !strings.Contains(r.err.Error(), want) {
		if r.n != nil {
			r.n.Close()
		}
		t.Fatalf("node.New over %s: %v; want the store's disk fault", stuck, r.err)
	}
	if err := cfg.Health.Err(); err == nil {
		t.Fatalf("node.New over %s returned the disk fault, and the probes still say healthy", stuck)
	}
	release()
	promtest.Eventually(t, 10*time.Second, "the abandoned start to close the store", func() bool {
		s, err := archive.Open("/data", archive.Options{FS: fs, Logger: quiet, ReadOnly: true})
		if err == nil {
			s.Close()
		}
		return err == nil
	})
	if _, err := os.Stat(cfg.ScratchDir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the start node.New abandoned at the store's fault went on to build the node once the disk answered: it made %s (%v)", cfg.ScratchDir, err)
	}
}

// TestNewStopsOnStuckTableOpen: a start whose disk stops answering the
// open of a table (every open of one, from the store's first read of its
// own keys on, which misses the table cache; with no error and no end)
// does not hang for ever with healthy probes: once the open has been
// outstanding for MaxWriteStall, the store's read-stall fault fails the
// probes and node.New returns it.
func TestNewStopsOnStuckTableOpen(t *testing.T) {
	mem := vfs.NewMem()
	s := relayStore(t, mem)
	if err := s.DB().Flush(); err != nil { // every key in a table: the start opens it to read them
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	stuck := storefault.Hold(mem, storefault.TableOpens)
	defer stuck.Release()
	startOnStuckDisk(t, stuck, stuck.Release, "a disk that opens no table", "an open of a file of the store has not returned for over")
}

// TestNewStopsOnStuckRead: a start whose disk stops answering reads (here
// every read of a table, from the store's first read of its own keys on,
// with no error and no end) does not hang for ever with healthy probes:
// once a read has been outstanding for MaxWriteStall, the store's
// read-stall fault fails the probes and node.New returns it.
func TestNewStopsOnStuckRead(t *testing.T) {
	mem := vfs.NewMem()
	s := relayStore(t, mem)
	if err := s.DB().Flush(); err != nil { // every key in a table: the start reads them from there
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	stuck := storefault.Hold(mem, storefault.TableReads)
	defer stuck.Release()
	startOnStuckDisk(t, stuck, stuck.Release, "a disk that answers no read", ".sst has not returned for over")
}

// TestNewStopsOnStuckLock: a start whose volume stops answering before
// Pebble starts (here the store's LOCK file, taken by the open before
// anything else of the store is read; with no error and no end) does not
// hang for ever with /healthz answering ok: once the call has been out for
// MaxWriteStall, the store's read-stall fault, naming it, fails the
// probes and node.New returns it.
func TestNewStopsOnStuckLock(t *testing.T) {
	mem := vfs.NewMem()
	if err := relayStore(t, mem).Close(); err != nil {
		t.Fatal(err)
	}
	stuck := storefault.Hold(mem, func(op errorfs.Op, _ string) bool { return op == errorfs.OpLock })
	defer stuck.Release()
	startOnStuckDisk(t, stuck, stuck.Release, "a volume that answers no lock", "taking the LOCK file of /data/store has not returned for over")
}
