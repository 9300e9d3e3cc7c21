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

// recDeleteValue is the rec/ value of a delete row; a create or update row's
// value is empty.
const recDeleteValue = 0x01

// recValueDelete is the shared rec/ value of a delete row (never modified).
var recValueDelete = []byte{recDeleteValue}

// EncodeRecordValue is the rec/ value of a record row: empty for a create or
// update, [0x01] for a delete.
func EncodeRecordValue(deleted bool) []byte {
	if deleted {
		return recValueDelete
	}
	return nil
}

// DecodeRecordValue accepts exactly an empty value (create/update) or
// [0x01] (delete).
func DecodeRecordValue(b []byte) (deleted bool, err error) {
	switch {
	case len(b) == 0:
		return false, nil
	case len(b) == 1 && b[0] == recDeleteValue:
		return true, nil
	}
	return false, malformed("record index value of %d bytes (want empty or [0x01])", len(b))
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
