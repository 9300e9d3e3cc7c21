package storefault

// held.go owns the probe of tables held on disk by open iterators: the
// tests of every long reader that reopens its iterator to release them
// (the merge walk, the NATS sink) read it here.

import (
	"time"

	"github.com/cockroachdb/pebble"
)

// HeldTables is the number of sstables compaction has removed from db's
// current version that open iterators still hold (Pebble's zombie
// tables): they stay on disk until those iterators close.
func HeldTables(db *pebble.DB) int64 { return db.Metrics().Table.ZombieCount }

// WaitReleased waits up to d for db to hold no such table (Pebble deletes
// a released table in the background, shortly after its last iterator
// closes) and returns how many it still holds.
func WaitReleased(db *pebble.DB, d time.Duration) int64 {
	deadline := time.Now().Add(d)
	held := HeldTables(db)
	for held > 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
		held = HeldTables(db)
	}
	return held
}
