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

// rec/ values: a delete row's is [0x01]; a create row's is [0x02][uvarint
// size of its ev/ value] and an update row's [0x03][uvarint size], so a
// compaction pass counts the bytes it removes without reading ev/, and the
// writer tells an update (whose tombstone names what it supersedes) from a
// create (which names nothing). An update written before updates had their
// own tag is [0x02]: read as a create, which only makes the writer look
// further back (tombResolver.older).
const (
	recDelete = 0x01
	recRow    = 0x02
	recUpdate = 0x03
)

// recValueDelete is the shared rec/ value of a delete row (never modified).
var recValueDelete = []byte{recDelete}

// AppendRecordValue appends the rec/ value of a record row of kind (create,
// update or delete) to dst: [0x01] for a delete, [0x02][uvarint size] for a
// create and [0x03][uvarint size] for an update whose ev/ value has size
// bytes.
func AppendRecordValue(dst []byte, kind Kind, size int) []byte {
	switch kind {
	case KindDelete:
		return append(dst, recDelete)
	case KindUpdate:
		return binary.AppendUvarint(append(dst, recUpdate), uint64(size))
	}
	return binary.AppendUvarint(append(dst, recRow), uint64(size))
}

// recordValueLen is the length of the rec/ value of a create or update row
// whose ev/ value has size bytes.
func recordValueLen(size int) int {
	n := 2
	for v := uint64(size); v >= 0x80; v >>= 7 {
		n++
	}
	return n
}

// DecodeRecordValue accepts exactly what AppendRecordValue produces (a
// size of at least 1 and at most MaxRecord's row).
func DecodeRecordValue(b []byte) (deleted bool, size int, err error) {
	kind, size, err := decodeRecordValue(b)
	return kind == KindDelete, size, err
}

// decodeRecordValue is DecodeRecordValue reporting the row's kind: an
// update written before updates had their own tag reads as a create.
func decodeRecordValue(b []byte) (Kind, int, error) {
	if len(b) == 1 && b[0] == recDelete {
		return KindDelete, 0, nil
	}
	if len(b) < 2 || b[0] != recRow && b[0] != recUpdate {
		return 0, 0, malformed("record index value %x (want [0x01], [0x02][size] or [0x03][size])", truncateForError(b))
	}
	kind := KindCreate
	if b[0] == recUpdate {
		kind = KindUpdate
	}
	d := decoder{b: b[1:]}
	n := d.uvarint()
	if err := d.finish("record index value"); err != nil {
		return 0, 0, err
	}
	if n == 0 || n > 2*MaxRecord {
		return 0, 0, malformed("record index value: row size %d", n)
	}
	return kind, int(n), nil
}

// Tomb is one tombstone: a row that supersedes older rows of its account.
// Kind is KindUpdate or KindDelete (Collection and RKey name the record) or
// KindAccount (a deleted or taken-down account; Collection and RKey empty):
// every older record row of the account.
//
// A record's tombstone written since the writer resolves what it
// supersedes is Named: Superseded lists the create and update rows it
// supersedes (newest first; usually one, none for a record the archive did
// not hold), so a pass removes them blind. A tombstone without names (an
// account's, or a record's written before) makes the pass look the
// superseded rows up in rec/.
type Tomb struct {
	Kind       Kind
	Collection string
	RKey       string
	Named      bool
	Superseded []SupersededRow
}

// SupersededRow is a create or update row a tombstone supersedes: its seq
// and the size of its ev/ value.
type SupersededRow struct {
	Seq  uint64
	Size int
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

// tombNamed is the version byte of a named tombstone (codecV1: unnamed).
const tombNamed = 0x02

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
		if t.Named {
			return malformed("%s tombstone names superseded rows", t.Kind)
		}
	default:
		return malformed("tombstone of kind %d", t.Kind)
	}
	if !t.Named && len(t.Superseded) > 0 {
		return malformed("unnamed tombstone with superseded rows")
	}
	for i, r := range t.Superseded {
		if r.Seq == 0 || r.Seq > math.MaxInt64 || i > 0 && r.Seq >= t.Superseded[i-1].Seq {
			return malformed("tombstone: superseded seq %d (newest first, in (0, MaxInt64])", r.Seq)
		}
		if r.Size <= 0 || r.Size > 2*MaxRecord {
			return malformed("tombstone: superseded row size %d", r.Size)
		}
	}
	return nil
}

// AppendTomb appends [0x01][kind][string collection][string rkey] to dst,
// or for a named tombstone [0x02][kind][string collection][string
// rkey][uvarint n] and n × [uvarint seq][uvarint size].
func AppendTomb(dst []byte, t Tomb) ([]byte, error) {
	if err := checkTomb(t); err != nil {
		return dst, err
	}
	return appendTomb(dst, t.Kind, t.Collection, t.RKey, t.Named, t.Superseded), nil
}

// appendTomb is AppendTomb's encoding, unchecked, for a record named by
// strings or by bytes (the writer's, from a rec/ key: no allocation).
func appendTomb[S ~string | ~[]byte](dst []byte, kind Kind, collection, rkey S, named bool, superseded []SupersededRow) []byte {
	v := byte(codecV1)
	if named {
		v = tombNamed
	}
	dst = append(dst, v, byte(kind))
	dst = append(binary.AppendUvarint(dst, uint64(len(collection))), collection...)
	dst = append(binary.AppendUvarint(dst, uint64(len(rkey))), rkey...)
	if !named {
		return dst
	}
	dst = binary.AppendUvarint(dst, uint64(len(superseded)))
	for _, r := range superseded {
		dst = binary.AppendUvarint(dst, r.Seq)
		dst = binary.AppendUvarint(dst, uint64(r.Size))
	}
	return dst
}

// DecodeTomb accepts exactly what AppendTomb produces.
func DecodeTomb(b []byte) (Tomb, error) {
	d := decoder{b: b}
	v := d.byte1()
	if d.err == nil && v != codecV1 && v != tombNamed {
		return Tomb{}, malformed("tombstone: unknown version 0x%02x", v)
	}
	t := Tomb{Kind: Kind(d.byte1()), Named: v == tombNamed}
	t.Collection = d.str(maxCollection)
	t.RKey = d.str(maxRKey)
	if t.Named {
		n := d.uvarint()
		if n > uint64(len(d.b)/2) {
			d.fail("tombstone: %d superseded rows in %d bytes", n, len(d.b))
		}
		if d.err == nil && n > 0 {
			t.Superseded = make([]SupersededRow, n)
		}
		for i := range t.Superseded {
			t.Superseded[i] = SupersededRow{Seq: d.uvarint(), Size: int(min(d.uvarint(), math.MaxInt32))}
		}
	}
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
