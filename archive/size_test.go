package archive

// Where the bytes of a store go (≤ 80 B on disk per record): per
// key family (estimated on-disk bytes), per sstable section (data, index,
// filter), per event field before compression, and per file kind in the
// store directory.

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble"
)

type sizeBreakdown struct {
	Events int64 // ev/ rows

	// Per file kind in <data-dir>/store (apparent sizes).
	Files map[string]int64

	// sstable sections, summed over every table.
	Tables, DataBytes, IndexBytes, FilterBytes, FileBytes int64
	RawKeyBytes, RawValueBytes, Entries                   int64

	// Estimated on-disk bytes per key family.
	Family map[string]int64

	// ev/ values before compression, by field (payload and length
	// prefixes counted separately).
	Field map[string]int64
}

// measureSizes flushes and fully compacts s, then reports where its bytes
// go. s must not be written to meanwhile.
func measureSizes(s *Store) (sizeBreakdown, error) {
	db := s.DB()
	bd := sizeBreakdown{Files: map[string]int64{}, Family: map[string]int64{}, Field: map[string]int64{}}
	if err := db.Flush(); err != nil {
		return bd, err
	}
	if err := db.Compact([]byte{0}, bytes.Repeat([]byte{0xff}, 64), true); err != nil {
		return bd, err
	}
	levels, err := db.SSTables(pebble.WithProperties())
	if err != nil {
		return bd, err
	}
	for _, l := range levels {
		for _, t := range l {
			bd.Tables++
			bd.FileBytes += int64(t.Size)
			p := t.Properties
			bd.DataBytes += int64(p.DataSize)
			bd.IndexBytes += int64(p.IndexSize)
			bd.FilterBytes += int64(p.FilterSize)
			bd.RawKeyBytes += int64(p.RawKeySize)
			bd.RawValueBytes += int64(p.RawValueSize)
			bd.Entries += int64(p.NumEntries)
		}
	}
	for _, p := range [][]byte{PrefixMeta, PrefixCursor, PrefixRepo, PrefixRev, PrefixHost, PrefixEvent, PrefixCapture, PrefixRecord, PrefixTomb, PrefixByCollection, PrefixByAccount, PrefixMarker} {
		n, err := db.EstimateDiskUsage(p, prefixEnd(p))
		if err != nil {
			return bd, err
		}
		bd.Family[string(p)] = int64(n)
	}
	ents, err := os.ReadDir(filepath.Join(s.DataDir(), StoreDir))
	if err == nil { // MemFS stores have no OS directory
		for _, e := range ents {
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // an obsolete file Pebble's cleaner removed after the compaction returned
			}
			if err != nil {
				return bd, err
			}
			kind := filepath.Ext(e.Name())
			switch {
			case strings.HasPrefix(e.Name(), "MANIFEST"):
				kind = "MANIFEST"
			case strings.HasPrefix(e.Name(), "OPTIONS"):
				kind = "OPTIONS"
			case kind == "":
				kind = e.Name()
			}
			bd.Files[kind] += info.Size()
		}
	}
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: PrefixEvent, UpperBound: prefixEnd(PrefixEvent)})
	if err != nil {
		return bd, err
	}
	defer it.Close()
	var ev Event
	for it.First(); it.Valid(); it.Next() {
		v := it.Value()
		seq, err := ParseSeqKey(PrefixEvent, it.Key())
		if err != nil {
			return bd, err
		}
		if err := DecodeEvent(v, seq, &ev); err != nil {
			return bd, fmt.Errorf("%x: %w", it.Key(), err)
		}
		bd.Events++
		bd.Field["key (ev/+seq)"] += int64(len(it.Key()))
		bd.Field["value total"] += int64(len(v))
		addEventFields(bd.Field, v)
	}
	return bd, it.Error()
}

// addEventFields attributes the bytes of one encoded event value to its
// fields by re-walking the encoding (any version DecodeEvent accepts).
func addEventFields(f map[string]int64, v []byte) {
	if v[0] != codecV1 && v[0] != eventV2 {
		addEventFieldsV(f, v)
		return
	}
	f["header (version,kind,source)"] += 3
	b := v[3:]
	uv := func(name string) {
		_, n := binary.Uvarint(b)
		f[name] += int64(n)
		b = b[n:]
	}
	str := func(name string) {
		l, n := binary.Uvarint(b)
		f["length prefixes"] += int64(n)
		f[name] += int64(l)
		b = b[n+int(l):]
	}
	m, _ := binary.Uvarint(b)
	uv("mask")
	uv("time_us")
	str("did")
	fields := []struct {
		bit  uint64
		name string
	}{{evCollection, "collection"}, {evRKey, "rkey"}, {evRev, "rev"}, {evCID, "cid"}, {evRecord, "record"}, {evHandle, "handle"}, {evStatus, "status"}, {evUpstreamSeq, "upstream seq"}}
	if v[0] == eventV2 {
		fields = append(fields[:3], fields[5:]...)
	}
	for _, x := range fields {
		switch {
		case m&x.bit == 0:
		case x.bit == evUpstreamSeq:
			uv(x.name)
		default:
			str(x.name)
		}
	}
	if v[0] == eventV2 {
		if m&evSince != 0 {
			str("since")
		}
		if m&evCID != 0 {
			str("cid")
		}
		f["record"] += int64(len(b))
	}
}

func (bd sizeBreakdown) String() string {
	var sb strings.Builder
	per := func(n int64) string {
		if bd.Events == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", float64(n)/float64(bd.Events))
	}
	var files int64
	for _, n := range bd.Files {
		files += n
	}
	fmt.Fprintf(&sb, "events %d; store files %d B = %s B/event\n", bd.Events, files, per(files))
	for _, k := range sortedKeys(bd.Files) {
		fmt.Fprintf(&sb, "  file %-10s %12d B %8s B/event\n", k, bd.Files[k], per(bd.Files[k]))
	}
	fmt.Fprintf(&sb, "sstables %d: %d B = data %s + index %s + filter %s + other %s B/event; raw keys %s, raw values %s B/event, %d entries\n",
		bd.Tables, bd.FileBytes, per(bd.DataBytes), per(bd.IndexBytes), per(bd.FilterBytes),
		per(bd.FileBytes-bd.DataBytes-bd.IndexBytes-bd.FilterBytes), per(bd.RawKeyBytes), per(bd.RawValueBytes), bd.Entries)
	for _, k := range sortedKeys(bd.Family) {
		if bd.Family[k] > 0 {
			fmt.Fprintf(&sb, "  family %-8s ~%12d B %8s B/event\n", k, bd.Family[k], per(bd.Family[k]))
		}
	}
	fmt.Fprintf(&sb, "ev/ rows before compression (B/event):")
	for _, k := range sortedKeys(bd.Field) {
		fmt.Fprintf(&sb, " %s %s;", k, per(bd.Field[k]))
	}
	sb.WriteString("\n")
	return sb.String()
}

func sortedKeys(m map[string]int64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// TestSizeBreakdownDir prints the size breakdown of an existing data dir
// (e.g. one left by a devnet bootstrap): BACKSTREAM_SIZE_DIR=<data-dir>.
// The store is flushed and compacted in place.
func TestSizeBreakdownDir(t *testing.T) {
	dir := os.Getenv("BACKSTREAM_SIZE_DIR")
	if dir == "" {
		t.Skip("BACKSTREAM_SIZE_DIR not set")
	}
	s, err := Open(dir, Options{Logger: quietLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	bd, err := measureSizes(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + bd.String())
}

// addEventFieldsV attributes an event of a version addEventFields does not
// walk.
func addEventFieldsV(f map[string]int64, v []byte) {
	f[fmt.Sprintf("version 0x%02x (unattributed)", v[0])] += int64(len(v))
}
