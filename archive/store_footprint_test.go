package archive

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble"
)

// TestStoreDefaultFootprint: a store opened with the default options holds
// its write-ahead log to 110% of DefaultMemTableSize on disk (Pebble
// preallocates each log at that size, and keeps used ones for recycling),
// and its block cache, memtables included, to DefaultCacheSize. With 64 MiB
// memtables a freshly opened, nearly empty store took 70 MiB of disk per
// log; a bootstrap left 56–59 MB of recycled log beside the live one (and
// 55 MB of logs with 16 MiB memtables, which took the data directory of a
// 2,000 × 200 bootstrap to 125 MB for a 40 MB compacted store, over its
// bound of 1.2× that plus 64 MiB).
func TestStoreDefaultFootprint(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.cache.MaxSize(); got != DefaultCacheSize || got > 96<<20 {
		t.Errorf("block cache %d bytes; want %d (at most 96 MiB)", got, int64(DefaultCacheSize))
	}
	// A flush rotates to a new log, which Pebble preallocates on its first
	// write (the log made at open is not).
	if err := s.DB().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := s.DB().Set([]byte("footprint"), []byte("x"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	var logs int
	entries, err := os.ReadDir(filepath.Join(dir, StoreDir))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		logs++
		onDisk := info.Sys().(*syscall.Stat_t).Blocks * 512
		if limit := int64(DefaultMemTableSize)*11/10 + 1<<20; onDisk > limit || onDisk > 10<<20 {
			t.Errorf("%s: %d bytes on disk; want at most %d (at most 10 MiB)", e.Name(), onDisk, limit)
		}
	}
	if logs == 0 {
		t.Fatal("no write-ahead log in a freshly opened store")
	}
}
