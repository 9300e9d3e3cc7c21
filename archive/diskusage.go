package archive

import (
	"fmt"

	"github.com/cockroachdb/pebble"
	"github.com/cockroachdb/pebble/sstable"
)

// IndexUsage is the bytes on disk of the store's two indexes, apart from
// the event rows and the state they describe.
type IndexUsage struct {
	// Compaction is rec/ and tomb/: what the compaction pass removes, by
	// record and by account.
	Compaction uint64 `json:"compaction"`
	// Replay is xc/, xd/ and xm/: what the replay planner reads.
	Replay uint64 `json:"replay"`
}

// Total is both indexes' bytes.
func (u IndexUsage) Total() uint64 { return u.Compaction + u.Replay }

// IndexDiskUsage is the bytes each of the store's indexes takes on disk
// when fully compacted: its keys as they stand, written alone into a
// bottom-level table (the bottom level's block size and compression),
// counted and discarded. It reads both indexes whole, so it is a
// measurement (make bench's), not a gauge. Pebble's EstimateDiskUsage
// would be cheaper but is exact only to a data block, and a block holds
// more than a small index.
func (s *Store) IndexDiskUsage() (IndexUsage, error) {
	po := &pebble.Options{Levels: levelOptions()}
	po.EnsureDefaults()
	wo := po.MakeWriterOptions(len(po.Levels)-1, s.db.FormatMajorVersion().MaxTableFormat())
	var u IndexUsage
	var err error
	if u.Compaction, err = s.tableBytes(wo, PrefixRecord, PrefixTomb); err != nil {
		return u, err
	}
	u.Replay, err = s.tableBytes(wo, PrefixByCollection, PrefixByAccount, PrefixMarker)
	return u, err
}

// tableBytes writes the keys under prefixes (given in key order) into one
// table with wo and returns its size; 0 when there is no key.
func (s *Store) tableBytes(wo sstable.WriterOptions, prefixes ...[]byte) (uint64, error) {
	var out countingWritable
	w := sstable.NewWriter(&out, wo)
	keys := 0
	for _, p := range prefixes {
		if err := s.copyKeys(w, p, &keys); err != nil {
			_ = w.Close()
			return 0, err
		}
	}
	if err := w.Close(); err != nil {
		return 0, fmt.Errorf("archive: index disk usage: write a table: %w", err)
	}
	if keys == 0 {
		return 0, nil
	}
	return out.n, nil
}

// copyKeys sets every key under prefix into w, counting them in n.
func (s *Store) copyKeys(w *sstable.Writer, prefix []byte, n *int) error {
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: prefix, UpperBound: prefixEnd(prefix)})
	if err != nil {
		return &KeyError{Key: string(prefix) + "<iter>", Kind: ErrRead, Err: err}
	}
	defer it.Close()
	for ok := it.First(); ok; ok = it.Next() {
		if err := w.Set(it.Key(), it.Value()); err != nil {
			return fmt.Errorf("archive: index disk usage: write %s: %w", keyString(it.Key()), err)
		}
		*n++
	}
	if err := it.Error(); err != nil {
		return &KeyError{Key: string(prefix), Kind: ErrRead, Err: err}
	}
	return nil
}

// countingWritable counts a table's bytes and keeps none of them.
type countingWritable struct{ n uint64 }

func (c *countingWritable) Write(p []byte) error { c.n += uint64(len(p)); return nil }
func (c *countingWritable) Finish() error        { return nil }
func (c *countingWritable) Abort()               {}
