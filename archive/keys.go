package archive

// This file owns the key layout of the store. Every key the
// project writes is built here; nothing else concatenates key bytes.

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Fixed keys.
var (
	KeyInstance           = []byte("meta/instance")
	KeyPhase              = []byte("meta/phase")
	KeyPhaseEnteredAt     = []byte("meta/phase_entered_at")
	KeyBackfillStartedAt  = []byte("meta/backfill_started_at")
	KeyBackfillCompleteAt = []byte("meta/backfill_completed_at")
	KeyRelay              = []byte("meta/relay")
	KeyCounts             = []byte("meta/counts")
	KeyCursorRelay        = []byte("cursor/relay")
	KeyCursorListRepos    = []byte("cursor/listrepos")
	KeyCursorListLast     = []byte("cursor/listrepos_last")
	KeyCursorMerge        = []byte("cursor/merge")

	// KeyRelaySilentAt: capture's wait for a first frame expired while the
	// relay had sent nothing, so cursor/relay is absent because there was
	// never a position, not because one was lost (Store.MarkRelaySilent).
	KeyRelaySilentAt = []byte("meta/relay_silent_at")

	// KeyCompaction is the compaction watermark W: below W every superseded
	// row is gone (EncodeWatermark). Absent means 0, never compacted.
	KeyCompaction = []byte("meta/compaction")
	// KeyCompactIntent is a compaction pass in progress: the watermark it
	// moves to (EncodeCompactIntent). Written synced before the pass
	// removes anything, deleted with the watermark's move.
	KeyCompactIntent = []byte("compact/intent")
)

// Key prefixes of the keyed families.
var (
	PrefixRepo = []byte("repo/")
	PrefixRev  = []byte("rev/")
	PrefixHost = []byte("host/")
	// PrefixHostRank indexes the hosts with failed repos by their failure
	// count, highest first: the top-N is a read of N keys, never a scan of
	// host/ (S3).
	PrefixHostRank = []byte("hostrank/")
	PrefixEvent    = []byte("ev/")
	PrefixCapture  = []byte("cap/")
	PrefixCursor   = []byte("cursor/")
	PrefixMeta     = []byte("meta/")
	// PrefixRecord indexes every record row: rec/<did>\x00<collection>\x00<rkey>\x00<seq>
	// (RecordKey). Written by the archive writer only.
	PrefixRecord = []byte("rec/")
	// PrefixTomb lists the rows that supersede older ones, by account:
	// tomb/<did>\x00<seq> (TombKey). Written by the archive writer only;
	// deleted by the compaction pass that applies them.
	PrefixTomb = []byte("tomb/")
	// PrefixCompact holds the compaction pass's own state (KeyCompactIntent).
	PrefixCompact = []byte("compact/")
)

// Identity cache keys: the durable copy of resolved DID documents
// (signing key, PDS endpoint, handle, fetched-at), written through unit Puts.
var PrefixIdent = []byte("ident/")

// IdentKey is ident/<did>.
func IdentKey(did string) []byte { return withSuffix(PrefixIdent, did) }

// dataPrefixes are the families whose presence means a store holds archived
// data (the startup guard refuses such a store without an identity).
var dataPrefixes = [][]byte{PrefixEvent, PrefixCapture, PrefixRev, PrefixRepo, PrefixRecord, PrefixTomb, PrefixCompact}

func withSuffix(prefix []byte, s string) []byte {
	k := make([]byte, 0, len(prefix)+len(s))
	k = append(k, prefix...)
	return append(k, s...)
}

// RepoKey is repo/<did>.
func RepoKey(did string) []byte { return withSuffix(PrefixRepo, did) }

// RevKey is rev/<did>, the per-account ratchet.
func RevKey(did string) []byte { return withSuffix(PrefixRev, did) }

// HostKey is host/<host>.
func HostKey(host string) []byte { return withSuffix(PrefixHost, host) }

// HostRankKey is hostrank/<^failures as 8 bytes big-endian><host>: keys
// sort by failures descending, then by host.
func HostRankKey(failures uint64, host string) []byte {
	k := make([]byte, 0, len(PrefixHostRank)+8+len(host))
	k = append(k, PrefixHostRank...)
	k = binary.BigEndian.AppendUint64(k, ^failures)
	return append(k, host...)
}

// ParseHostRankKey is the inverse of HostRankKey.
func ParseHostRankKey(key []byte) (host string, failures uint64, err error) {
	if len(key) <= len(PrefixHostRank)+8 || string(key[:len(PrefixHostRank)]) != string(PrefixHostRank) {
		return "", 0, fmt.Errorf("archive: key %q is not a host rank key", key)
	}
	return string(key[len(PrefixHostRank)+8:]), ^binary.BigEndian.Uint64(key[len(PrefixHostRank):]), nil
}

// EventKey is ev/<seq as 8 bytes big-endian>, so keys sort by seq.
func EventKey(seq uint64) []byte { return seqKey(PrefixEvent, seq) }

// CaptureKey is cap/<seq as 8 bytes big-endian>.
func CaptureKey(seq uint64) []byte { return seqKey(PrefixCapture, seq) }

func seqKey(prefix []byte, seq uint64) []byte {
	k := make([]byte, len(prefix)+8)
	copy(k, prefix)
	binary.BigEndian.PutUint64(k[len(prefix):], seq)
	return k
}

// ParseSeqKey returns the seq of an ev/ or cap/ key with the given prefix.
func ParseSeqKey(prefix, key []byte) (uint64, error) {
	if len(key) != len(prefix)+8 || string(key[:len(prefix)]) != string(prefix) {
		return 0, fmt.Errorf("archive: key %q is not a %q seq key", key, prefix)
	}
	return binary.BigEndian.Uint64(key[len(prefix):]), nil
}

// keySep separates the fields of rec/ and tomb/ keys. DIDs, NSIDs and
// rkeys never contain it (ValidateEvent refuses a key field holding it), so
// the fields parse back unambiguously and one account's (one record's) keys
// are one contiguous range.
const keySep = 0x00

// AppendRecordKey appends rec/<did>\x00<collection>\x00<rkey>\x00<seq as 8
// bytes big-endian> to dst: one record's rows sort together by seq, one
// account's records together.
func AppendRecordKey(dst []byte, did, collection, rkey string, seq uint64) []byte {
	dst = AppendRecordPrefix(dst, did, collection, rkey)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// RecordKey is AppendRecordKey into a new slice.
func RecordKey(did, collection, rkey string, seq uint64) []byte {
	return AppendRecordKey(make([]byte, 0, len(PrefixRecord)+len(did)+len(collection)+len(rkey)+3+8), did, collection, rkey, seq)
}

// AppendRecordPrefix appends rec/<did>\x00<collection>\x00<rkey>\x00: the
// prefix of every rec/ key of one record.
func AppendRecordPrefix(dst []byte, did, collection, rkey string) []byte {
	dst = append(dst, PrefixRecord...)
	dst = append(dst, did...)
	dst = append(dst, keySep)
	dst = append(dst, collection...)
	dst = append(dst, keySep)
	dst = append(dst, rkey...)
	return append(dst, keySep)
}

// AccountRecordPrefix is rec/<did>\x00: the prefix of every rec/ key of one
// account.
func AccountRecordPrefix(did string) []byte {
	k := make([]byte, 0, len(PrefixRecord)+len(did)+1)
	k = append(k, PrefixRecord...)
	k = append(k, did...)
	return append(k, keySep)
}

// RecordKeyFields is a parsed rec/ key. The strings alias nothing.
type RecordKeyFields struct {
	DID, Collection, RKey string
	Seq                   uint64
}

// ParseRecordKey is the inverse of RecordKey; it fails closed on anything
// RecordKey cannot produce (a missing field, an empty field, a short seq).
func ParseRecordKey(key []byte) (RecordKeyFields, error) {
	var f RecordKeyFields
	if !hasPrefix(key, PrefixRecord) || len(key) < len(PrefixRecord)+3+8+3 {
		return f, fmt.Errorf("archive: key %q is not a record index key", truncateForError(key))
	}
	body := key[len(PrefixRecord) : len(key)-8]
	if body[len(body)-1] != keySep {
		return f, fmt.Errorf("archive: record index key %q: no separator before the seq", truncateForError(key))
	}
	parts := bytes.Split(body[:len(body)-1], []byte{keySep})
	if len(parts) != 3 || len(parts[0]) == 0 || len(parts[1]) == 0 || len(parts[2]) == 0 {
		return f, fmt.Errorf("archive: record index key %q: want did, collection and rkey", truncateForError(key))
	}
	f.DID, f.Collection, f.RKey = string(parts[0]), string(parts[1]), string(parts[2])
	f.Seq = binary.BigEndian.Uint64(key[len(key)-8:])
	return f, nil
}

// AppendTombKey appends tomb/<did>\x00<seq as 8 bytes big-endian> to dst:
// an account's tombstones sort together, by seq.
func AppendTombKey(dst []byte, did string, seq uint64) []byte {
	dst = append(dst, PrefixTomb...)
	dst = append(dst, did...)
	dst = append(dst, keySep)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// TombKey is AppendTombKey into a new slice.
func TombKey(did string, seq uint64) []byte {
	return AppendTombKey(make([]byte, 0, len(PrefixTomb)+len(did)+1+8), did, seq)
}

// ParseTombKey is the inverse of TombKey; it fails closed.
func ParseTombKey(key []byte) (did string, seq uint64, err error) {
	n := len(PrefixTomb)
	if !hasPrefix(key, PrefixTomb) || len(key) < n+1+1+8 || key[len(key)-9] != keySep {
		return "", 0, fmt.Errorf("archive: key %q is not a tombstone key", truncateForError(key))
	}
	d := key[n : len(key)-9]
	if bytes.IndexByte(d, keySep) >= 0 {
		return "", 0, fmt.Errorf("archive: tombstone key %q: separator inside the DID", truncateForError(key))
	}
	return string(d), binary.BigEndian.Uint64(key[len(key)-8:]), nil
}

// keyString renders a key for a message: an ev/, rec/ or tomb/ key with
// its seq as a number and its separators visible; any other key as it is
// (cut at 64 bytes).
func keyString(key []byte) string {
	if f, err := ParseRecordKey(key); err == nil {
		return fmt.Sprintf("%s%s|%s|%s|%d", PrefixRecord, f.DID, f.Collection, f.RKey, f.Seq)
	}
	if did, seq, err := ParseTombKey(key); err == nil {
		return fmt.Sprintf("%s%s|%d", PrefixTomb, did, seq)
	}
	if seq, err := ParseSeqKey(PrefixEvent, key); err == nil {
		return fmt.Sprintf("%s%d", PrefixEvent, seq)
	}
	return truncateForError(key)
}

// prefixEnd returns the smallest key greater than every key with prefix p.
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		end[i]++
		if end[i] != 0 {
			return end[:i+1]
		}
	}
	return nil // p is all 0xff: no upper bound
}
