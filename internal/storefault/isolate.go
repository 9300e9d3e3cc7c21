package storefault

// isolate.go owns IsolateKey: a store rewritten so that one key's reads go
// to one sstable.

import (
	"fmt"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/vfs"
)

// IsolateKey rewrites key (with its current value) into an sstable of its
// own in the Pebble store in dir (a data dir's store/), and returns that
// file's path: failing the
// reads of that file then fails the reads of key. The store must not be
// open. The key must exist.
//
// Pebble's point read of a smaller key may still touch the file (its
// filter) when no file of the same level holds that key: a Get of
// meta/phase can reach a file holding only repo/<did>. The shield keys (each
// present in the store) are therefore rewritten, after the isolated key,
// into a newer file, where their reads stop. Pass the keys an operation
// reads before the one under test.
func IsolateKey(fs vfs.FS, dir string, key []byte, shield ...[]byte) (string, error) {
	db, err := pebble.Open(dir, &pebble.Options{
		FS:                          fs,
		Logger:                      panicLogger{},
		L0CompactionThreshold:       1 << 20, // keep the new file as it is
		L0StopWritesThreshold:       1 << 20,
		DisableAutomaticCompactions: true,
	})
	if err != nil {
		return "", fmt.Errorf("storefault: isolate %q: open: %w", key, err)
	}
	defer db.Close()
	v, closer, err := db.Get(key)
	if err != nil {
		return "", fmt.Errorf("storefault: isolate %q: %w", key, err)
	}
	val := append([]byte(nil), v...)
	closer.Close()
	// Everything else goes to the bottom level first, so the new file is the
	// only one in L0 and the reopened store has no reason to compact it away.
	if err := db.Compact([]byte{0}, []byte{0xff, 0xff, 0xff, 0xff}, false); err != nil {
		return "", fmt.Errorf("storefault: isolate %q: compact: %w", key, err)
	}
	if err := db.Set(key, val, pebble.Sync); err != nil {
		return "", fmt.Errorf("storefault: isolate %q: %w", key, err)
	}
	if err := db.Flush(); err != nil {
		return "", fmt.Errorf("storefault: isolate %q: flush: %w", key, err)
	}
	for _, k := range shield {
		v, closer, err := db.Get(k)
		if err != nil {
			return "", fmt.Errorf("storefault: isolate %q: shield %q: %w", key, k, err)
		}
		err = db.Set(k, append([]byte(nil), v...), pebble.Sync)
		closer.Close()
		if err != nil {
			return "", fmt.Errorf("storefault: isolate %q: shield %q: %w", key, k, err)
		}
	}
	if len(shield) > 0 {
		if err := db.Flush(); err != nil {
			return "", fmt.Errorf("storefault: isolate %q: flush: %w", key, err)
		}
	}
	levels, err := db.SSTables()
	if err != nil {
		return "", fmt.Errorf("storefault: isolate %q: %w", key, err)
	}
	var best *pebble.SSTableInfo
	for _, l := range levels {
		for i := range l {
			t := &l[i]
			if string(t.Smallest.UserKey) == string(key) && string(t.Largest.UserKey) == string(key) &&
				(best == nil || t.FileNum > best.FileNum) {
				best = t
			}
		}
	}
	if best == nil {
		return "", fmt.Errorf("storefault: isolate %q: no sstable holds it alone", key)
	}
	return fs.PathJoin(dir, fmt.Sprintf("%06d.sst", best.FileNum)), nil
}

// panicLogger drops Pebble's log lines and panics on a fatal one instead of
// exiting the test binary.
type panicLogger struct{}

func (panicLogger) Infof(string, ...any)  {}
func (panicLogger) Errorf(string, ...any) {}
func (panicLogger) Fatalf(format string, args ...any) {
	panic(fmt.Errorf("storefault: isolate: pebble: "+format, args...))
}
