package archive

// This file owns the codecs of the compaction families: the rec/ index
// value, the tomb/ value, the watermark (meta/compaction) and the pass's
// intent (compact/intent). Like every decoder here they are fail-closed:
// they accept exactly what the encoder produces.

import (
	"encoding/binary"
	"math"
	"time"
)

// rec/ values: a delete row's is [0x01]; a create or update row's is
// [0x02][uvarint size of its ev/ value], so a compaction pass counts the
// bytes it removes without reading ev/.
const (
	recDelete = 0x01
	recRow    = 0x02
)

// recValueDelete is the shared rec/ value of a delete row (never modified).
var recValueDelete = []byte{recDelete}

// AppendRecordValue appends the rec/ value of a record row to dst: [0x01]
// for a delete, [0x02][uvarint size] for a create or update whose ev/ value
// has size bytes.
func AppendRecordValue(dst []byte, deleted bool, size int) []byte {
	if deleted {
		return append(dst, recDelete)
	}
	return binary.AppendUvarint(append(dst, recRow), uint64(size))
}

// DecodeRecordValue accepts exactly what AppendRecordValue produces (a
// size of at least 1 and at most MaxRecord's row).
func DecodeRecordValue(b []byte) (deleted bool, size int, err error) {
	if len(b) == 1 && b[0] == recDelete {
		return true, 0, nil
	}
	if len(b) < 2 || b[0] != recRow {
		return false, 0, malformed("record index value %x (want [0x01] or [0x02][size])", truncateForError(b))
	}
	d := decoder{b: b[1:]}
	n := d.uvarint()
	if err := d.finish("record index value"); err != nil {
		return false, 0, err
	}
	if n == 0 || n > 2*MaxRecord {
		return false, 0, malformed("record index value: row size %d", n)
	}
	return false, int(n), nil
}

// Tomb is one tombstone: a row that supersedes older rows of its account.
// Kind is KindUpdate or KindDelete (Collection and RKey name the record) or
// KindAccount (a deleted or taken-down account; Collection and RKey empty):
// every older record row of the account.
type Tomb struct {
	Kind       Kind
	Collection string
	RKey       string
}

// Supersedes reports whether ev is a row that supersedes older rows, and
// its tombstone: an update or delete of a record; an account row whose
// status is deleted or takendown. Other account statuses (deactivated,
// suspended, …) supersede nothing: the account may come back and its
// content is kept. A sync row supersedes nothing either: a whole-repo
// replacement is archived as the rows that change the account (backfill's
// job_replace.go), whose updates and deletes supersede what they replace,
// and the records it leaves unchanged are only in the rows before it.
func Supersedes(ev *Event) (Tomb, bool) {
	switch ev.Kind {
	case KindUpdate, KindDelete:
		return Tomb{Kind: ev.Kind, Collection: ev.Collection, RKey: ev.RKey}, true
	case KindAccount:
		if AccountStatusPurges(ev.Status) {
			return Tomb{Kind: KindAccount}, true
		}
	}
	return Tomb{}, false
}

// AccountStatusPurges reports whether an account row with this status
// supersedes every earlier record row of the account.
func AccountStatusPurges(status string) bool {
	return status == "deleted" || status == "takendown"
}

// checkTomb reports what makes t unstorable.
func checkTomb(t Tomb) error {
	switch t.Kind {
	case KindUpdate, KindDelete:
		if t.Collection == "" || t.RKey == "" {
			return malformed("%s tombstone without collection and rkey", t.Kind)
		}
		if len(t.Collection) > maxCollection || len(t.RKey) > maxRKey {
			return malformed("%s tombstone: collection or rkey too long", t.Kind)
		}
	case KindAccount:
		if t.Collection != "" || t.RKey != "" {
			return malformed("%s tombstone names a record", t.Kind)
		}
	default:
		return malformed("tombstone of kind %d", t.Kind)
	}
	return nil
}

// AppendTomb appends [0x01][kind][string collection][string rkey] to dst.
func AppendTomb(dst []byte, t Tomb) ([]byte, error) {
	if err := checkTomb(t); err != nil {
		return dst, err
	}
	dst = append(dst, codecV1, byte(t.Kind))
	dst = appendString(dst, t.Collection)
	return appendString(dst, t.RKey), nil
}

// DecodeTomb accepts exactly what AppendTomb produces.
func DecodeTomb(b []byte) (Tomb, error) {
	d := decoder{b: b}
	if v := d.byte1(); d.err == nil && v != codecV1 {
		return Tomb{}, malformed("tombstone: unknown version 0x%02x", v)
	}
	t := Tomb{Kind: Kind(d.byte1())}
	t.Collection = d.str(maxCollection)
	t.RKey = d.str(maxRKey)
	if err := d.finish("tombstone"); err != nil {
		return Tomb{}, err
	}
	if err := checkTomb(t); err != nil {
		return Tomb{}, err
	}
	return t, nil
}

// EncodeWatermark encodes meta/compaction: [0x01][uint64 LE], at most
// MaxInt64 (a seq).
func EncodeWatermark(w uint64) ([]byte, error) { return encodeU64("watermark", w) }

// DecodeWatermark accepts exactly what EncodeWatermark produces.
func DecodeWatermark(b []byte) (uint64, error) { return decodeU64("watermark", b) }

// CompactIntent is a compaction pass in progress (compact/intent).
type CompactIntent struct {
	W       uint64    // the watermark the pass moves to
	Started time.Time // when the pass wrote the intent (µs precision)
}

// EncodeCompactIntent encodes [0x01][uint64 LE W][uvarint started unix µs].
func EncodeCompactIntent(in CompactIntent) ([]byte, error) {
	if in.W > math.MaxInt64 {
		return nil, malformed("intent watermark %d above MaxInt64", in.W)
	}
	us := in.Started.UnixMicro()
	if us < 0 {
		return nil, malformed("intent started before 1970")
	}
	b := make([]byte, 9, 9+binary.MaxVarintLen64)
	b[0] = codecV1
	binary.LittleEndian.PutUint64(b[1:], in.W)
	return binary.AppendUvarint(b, uint64(us)), nil
}

// DecodeCompactIntent accepts exactly what EncodeCompactIntent produces.
func DecodeCompactIntent(b []byte) (CompactIntent, error) {
	if len(b) < 10 {
		return CompactIntent{}, malformed("compaction intent: %d bytes, want at least 10", len(b))
	}
	if b[0] != codecV1 {
		return CompactIntent{}, malformed("compaction intent: unknown version 0x%02x", b[0])
	}
	w := binary.LittleEndian.Uint64(b[1:9])
	if w > math.MaxInt64 {
		return CompactIntent{}, malformed("intent watermark %d above MaxInt64", w)
	}
	d := decoder{b: b[9:]}
	us := d.uvarint()
	if err := d.finish("compaction intent"); err != nil {
		return CompactIntent{}, err
	}
	if us > math.MaxInt64 {
		return CompactIntent{}, malformed("intent start %d µs above MaxInt64", us)
	}
	return CompactIntent{W: w, Started: time.UnixMicro(int64(us)).UTC()}, nil
}
