package archive

// The store's filter and bottom-level options (store.go): ev/ and
// cap/ keys are left out of bloom filters yet stay readable by Get; the
// bottom level carries no filter; tables written by earlier builds (plain
// bloom over every key) keep their filters in use.

import (
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

func filterSizes(t *testing.T, db *pebble.DB) (byLevel map[int]uint64) {
	t.Helper()
	levels, err := db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	byLevel = map[int]uint64{}
	for l, ts := range levels {
		for _, ti := range ts {
			byLevel[l] += ti.Properties.FilterSize
		}
	}
	return byLevel
}

// TestStoreFilter_ScanFamiliesOutOfFilterButReadable: a flushed L0 table of
// ev/ and cap/ rows plus a few rev/ rows has a filter sized for the rev/
// rows only; Get finds every ev/, cap/ and rev/ key through that filter and
// answers absent rev/ keys from it; after a full compaction the bottom
// level has no filter at all and every key is still found.
func TestStoreFilter_ScanFamiliesOutOfFilterButReadable(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	db := s.DB()
	const rows, revs = 5000, 10
	b := db.NewBatch()
	for i := uint64(1); i <= rows; i++ {
		_ = b.Set(EventKey(i), []byte("event"), nil)
		_ = b.Set(CaptureKey(i), []byte("capture"), nil)
	}
	for i := 0; i < revs; i++ {
		_ = b.Set(RevKey(fmt.Sprintf("did:plc:present%d", i)), []byte("rev"), nil)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	fs := filterSizes(t, db)
	// 10 bits per filtered key: the meta/ rows and the rev/ rows, not the
	// 10,000 ev/ and cap/ rows (which would take ~12.5 KB).
	if fs[0] == 0 || fs[0] > 200 {
		t.Fatalf("L0 filter bytes = %d, want a filter of the ~15 point-read keys only", fs[0])
	}
	check := func(stage string) {
		t.Helper()
		for i := uint64(1); i <= rows; i += 7 {
			for _, k := range [][]byte{EventKey(i), CaptureKey(i)} {
				v, c, err := db.Get(k)
				if err != nil {
					t.Fatalf("%s: Get %q: %v (a filter without ev/ and cap/ keys must not answer for them)", stage, k, err)
				}
				_ = v
				c.Close()
			}
		}
		for i := 0; i < revs; i++ {
			_, c, err := db.Get(RevKey(fmt.Sprintf("did:plc:present%d", i)))
			if err != nil {
				t.Fatalf("%s: present rev: %v", stage, err)
			}
			c.Close()
		}
		if _, _, err := db.Get(RevKey("did:plc:absent")); !errors.Is(err, pebble.ErrNotFound) {
			t.Fatalf("%s: absent rev: %v", stage, err)
		}
	}
	before := db.Metrics().Filter.Hits
	check("L0")
	for i := 0; i < 200; i++ {
		_, _, _ = db.Get(RevKey(fmt.Sprintf("did:plc:absent%d", i)))
	}
	if db.Metrics().Filter.Hits-before < 150 {
		t.Fatalf("filter hits %d for 200 absent rev/ keys: the L0 filter is not answering", db.Metrics().Filter.Hits-before)
	}
	// A second, overlapping L0 table, so the compaction rewrites both into
	// L6 (a lone table would be moved down as is, filter and all).
	if err := db.Set(EventKey(1), []byte("event"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Set(RevKey("did:plc:present0"), []byte("rev"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Compact([]byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	fs = filterSizes(t, db)
	if fs[6] != 0 {
		t.Fatalf("L6 filter bytes = %d, want none (Pebble never reads L6 filters on Get)", fs[6])
	}
	check("L6")
}

// TestStoreFilter_TablesOfEarlierBuildsKeepTheirFilter: a table written with
// the plain bloom policy (every key, its own name) by an earlier build is
// still filtered after the upgrade, and its ev/ keys are found.
func TestStoreFilter_TablesOfEarlierBuildsKeepTheirFilter(t *testing.T) {
	mem := vfs.NewMem()
	s := openMem(t, mem)
	s.Close()
	// The earlier build's options: plain bloom on every level.
	old := &pebble.Options{FS: mem, Logger: pebbleLogger{log: quietLogger}, DisableAutomaticCompactions: true}
	old.Levels = make([]pebble.LevelOptions, 7)
	for i := range old.Levels {
		old.Levels[i].FilterPolicy = plainBloom
		old.Levels[i].FilterType = pebble.TableFilter
	}
	old.EnsureDefaults()
	db, err := pebble.Open(mem.PathJoin("/data", StoreDir), old)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 100; i++ {
		_ = db.Set(EventKey(i), []byte("event"), nil)
	}
	_ = db.Set(RevKey("did:plc:present"), []byte("rev"), nil)
	if err := db.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	// Read-only: no compaction can rewrite the table under the reads.
	opts := testOptions(mem)
	opts.ReadOnly = true
	s, err = Open("/data", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if l0 := filterSizes(t, s.DB())[0]; l0 == 0 {
		t.Fatal("the earlier build's table has no filter: fixture broken")
	}
	for i := uint64(1); i <= 100; i++ {
		if _, c, err := s.DB().Get(EventKey(i)); err != nil {
			t.Fatalf("ev/ key of an earlier build's table: %v", err)
		} else {
			c.Close()
		}
	}
	before := s.DB().Metrics().Filter.Hits
	for i := 0; i < 100; i++ {
		_, _, _ = s.DB().Get(RevKey(fmt.Sprintf("did:plc:absent%d", i)))
	}
	if hits := s.DB().Metrics().Filter.Hits - before; hits < 80 {
		t.Fatalf("filter hits %d for 100 absent keys: the earlier build's filters are no longer read", hits)
	}
}

// TestStoreBottomLevelBlocks: tables rewritten into L6 use 64 KiB data
// blocks (store.go: 1.75 B per event less than 32 KiB on the record mix).
func TestStoreBottomLevelBlocks(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	db := s.DB()
	v := make([]byte, 500)
	for round := 0; round < 2; round++ { // two overlapping L0 tables: the compaction rewrites
		b := db.NewBatch()
		for i := uint64(1); i <= 4000; i++ {
			for j := range v {
				v[j] = byte(i*7 + uint64(j)*13 + uint64(round))
			}
			_ = b.Set(EventKey(i), v, nil)
		}
		if err := b.Commit(pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := db.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Compact([]byte{0}, []byte{0xff}, true); err != nil {
		t.Fatal(err)
	}
	levels, err := db.SSTables(pebble.WithProperties())
	if err != nil {
		t.Fatal(err)
	}
	var raw, blocks uint64
	for _, ti := range levels[6] {
		raw += ti.Properties.RawKeySize + ti.Properties.RawValueSize
		blocks += ti.Properties.NumDataBlocks
	}
	if blocks == 0 || raw/blocks < 48<<10 {
		t.Fatalf("L6: %d raw bytes in %d data blocks, want blocks of ~64 KiB", raw, blocks)
	}
}
