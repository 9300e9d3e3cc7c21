package archive

// This file owns the key layout of the store. Every key the
// project writes is built here; nothing else concatenates key bytes.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
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
	// PrefixCursorHostList holds a fleet bootstrap's per-host listRepos
	// checkpoints, cursor/hostlist/<host>, valued like cursor/listrepos.
	PrefixCursorHostList = []byte("cursor/hostlist/")
	// PrefixCursorHostListLast holds each host's last non-empty listRepos
	// cursor, cursor/hostlist_last/<host>, valued like
	// cursor/listrepos_last: where hosts-mode discovery lists the host again.
	PrefixCursorHostListLast = []byte("cursor/hostlist_last/")

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

// KeyIndex is the compaction index's coverage of ev/ (EncodeIndexMarker):
// the ev/ rows from Next up to End lack their rec/ and tomb/ entries (a
// store archived before the writer kept the index); Next ≥ End means the
// index covers every row. A new store writes it covered at creation;
// Open writes it for an older store, End the first seq this writer
// indexes; the index backfill (Store.FillIndex) moves Next; Store.ResetIndex
// (backstream compaction reset) drops the index and sets it to every row.
var KeyIndex = []byte("meta/index")

// KeyReplayIndex is the replay index's coverage of ev/ (xc/, xd/, xm/),
// valued like KeyIndex: the rows from Next up to End lack their entries (a
// store archived before the writer kept it); Store.FillReplayIndex moves
// Next, Store.ResetReplayIndex drops the index and sets it to every row. A
// filtered replay scans until Next ≥ End (or while it is malformed).
var KeyReplayIndex = []byte("meta/index_replay")

// KeyCursorSinkNATS is the NATS sink's position: [0x01][uint64 LE], the
// highest seq whose publish the stream acknowledged with none missing
// below it. A unit Put like the listRepos cursors (it is no seq cursor of
// the writer's: the sink only reads the archive).
var KeyCursorSinkNATS = []byte("cursor/sink/nats")

// KeyCursorSinkNATSRemoved is the last removal the NATS sink saw empty
// its stream (EncodeSinkRemoval): the operator removed the stream's only
// message, which leaves the very state a purge does. A stream found empty
// there later is resumed after it, not filled again. A unit Put.
var KeyCursorSinkNATSRemoved = []byte("cursor/sink/nats_removed")

// KeyCursorPLCExport is where a bootstrap's read of the PLC directory's
// export resumes: the createdAt of the last op read (an EncodeTime value).
// A unit Put, submitted after the ident/ rows of its page.
var KeyCursorPLCExport = []byte("cursor/plcexport")

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
	// (RecordKey), or, for a stretch of creates written together, one run
	// entry rec/<did>\x00<collection>\x00\x01<first seq> (recrun.go).
	// Written by the archive writer only.
	PrefixRecord = []byte("rec/")
	// PrefixTomb lists the rows that supersede older ones, by account:
	// tomb/<did>\x00<seq> (TombKey), value a Tomb (a record's names the
	// rows it supersedes). Written by the archive writer only; deleted by
	// the compaction pass that applies them.
	PrefixTomb = []byte("tomb/")
	// PrefixCompact holds the compaction pass's own state (KeyCompactIntent).
	PrefixCompact = []byte("compact/")
	// PrefixDue indexes the repos the retry runner may fetch
	// (RepoState.Retryable) by their next attempt: due/<next attempt as 8
	// bytes big-endian><did> (DueKey), valued with the repo's host. A pass
	// reads the keys up to now, so its cost follows the repos due, never
	// the repos known. Written by the archive writer only, in the batch of
	// the repo/ row it describes.
	PrefixDue = []byte("due/")
)

// KeyZstdDictionary holds the zstd dictionary /subscribe serves
// (EncodeZstdDictionary), written through a unit Put the first time it is
// trained, so that it and its id outlive restarts and compaction passes.
var KeyZstdDictionary = []byte("meta/zstd_dictionary")

// KeyDueIndex marks the due index as complete ([0x01]): a new store
// writes it at creation; Open builds the index of an older store from its
// repo/ rows, then writes it (Store.buildDueIndex).
var KeyDueIndex = []byte("meta/due_index")

// Identity cache keys: the durable copy of resolved DID documents
// (signing key, PDS endpoint, handle, fetched-at), written through unit Puts.
var PrefixIdent = []byte("ident/")

// IdentKey is ident/<did>.
func IdentKey(did string) []byte { return withSuffix(PrefixIdent, did) }

// dataPrefixes are the families whose presence means a store holds archived
// data (the startup guard refuses such a store without an identity).
var dataPrefixes = [][]byte{PrefixEvent, PrefixCapture, PrefixRev, PrefixRepo, PrefixRecord, PrefixTomb, PrefixCompact,
	PrefixByCollection, PrefixByAccount, PrefixMarker, PrefixDue}

func withSuffix(prefix []byte, s string) []byte {
	k := make([]byte, 0, len(prefix)+len(s))
	k = append(k, prefix...)
	return append(k, s...)
}

// RepoKey is repo/<did>.
func RepoKey(did string) []byte { return withSuffix(PrefixRepo, did) }

// RevKey is rev/<did>, the per-account ratchet.
func RevKey(did string) []byte { return withSuffix(PrefixRev, did) }

// HostListCursorKey is cursor/hostlist/<host>.
func HostListCursorKey(host string) []byte { return withSuffix(PrefixCursorHostList, host) }

// HostListLastKey is cursor/hostlist_last/<host>.
func HostListLastKey(host string) []byte { return withSuffix(PrefixCursorHostListLast, host) }

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

// DueKey is due/<nextUS as 8 bytes big-endian><did>: keys sort by next
// attempt, then by DID. A next attempt before the epoch (none scheduled
// is 0) is stored as 0: due at once either way.
func DueKey(nextUS int64, did string) []byte {
	k := make([]byte, 0, len(PrefixDue)+8+len(did))
	k = append(k, PrefixDue...)
	k = binary.BigEndian.AppendUint64(k, uint64(max(nextUS, 0)))
	return append(k, did...)
}

// ParseDueKey is the inverse of DueKey; it fails closed on a key DueKey
// cannot produce (no DID, or a time past the int64 range).
func ParseDueKey(key []byte) (did string, nextUS int64, err error) {
	n := len(PrefixDue)
	if !hasPrefix(key, PrefixDue) || len(key) <= n+8 {
		return "", 0, fmt.Errorf("archive: key %q is not a due index key", truncateForError(key))
	}
	t := binary.BigEndian.Uint64(key[n:])
	if t > math.MaxInt64 {
		return "", 0, fmt.Errorf("archive: due index key %q: time %d past the int64 range", truncateForError(key), t)
	}
	return string(key[n+8:]), int64(t), nil
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
	did, collection, rkey, seq, err := splitRecordKey(key)
	if err != nil {
		return RecordKeyFields{}, err
	}
	return RecordKeyFields{DID: string(did), Collection: string(collection), RKey: string(rkey), Seq: seq}, nil
}

// splitRecordKey is ParseRecordKey without a copy: the fields alias key.
func splitRecordKey(key []byte) (did, collection, rkey []byte, seq uint64, err error) {
	if !hasPrefix(key, PrefixRecord) || len(key) < len(PrefixRecord)+3+8+3 {
		return nil, nil, nil, 0, fmt.Errorf("archive: key %q is not a record index key", truncateForError(key))
	}
	body := key[len(PrefixRecord) : len(key)-8]
	if body[len(body)-1] != keySep {
		return nil, nil, nil, 0, fmt.Errorf("archive: record index key %q: no separator before the seq", truncateForError(key))
	}
	body = body[:len(body)-1]
	i := bytes.IndexByte(body, keySep)
	j := i + 1 + bytes.IndexByte(body[i+1:], keySep)
	if i <= 0 || j <= i+1 || j == len(body)-1 || bytes.IndexByte(body[j+1:], keySep) >= 0 {
		return nil, nil, nil, 0, fmt.Errorf("archive: record index key %q: want did, collection and rkey", truncateForError(key))
	}
	return body[:i], body[i+1 : j], body[j+1:], binary.BigEndian.Uint64(key[len(key)-8:]), nil
}

// AppendTombKey appends tomb/<did>\x00<seq as 8 bytes big-endian> to dst:
// an account's tombstones sort together, by seq.
func AppendTombKey(dst []byte, did string, seq uint64) []byte {
	return appendTombKey(dst, did, seq)
}

// appendTombKey is AppendTombKey for a DID held as a string or as bytes.
func appendTombKey[S ~string | ~[]byte](dst []byte, did S, seq uint64) []byte {
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

// keyString renders a key for a message: an ev/, cap/, gap/, rec/ or
// tomb/ key with its seq (a gap's id) as a number and its separators
// visible; any other key as it is (cut at 64 bytes).
func keyString(key []byte) string {
	if f, err := ParseRecordKey(key); err == nil {
		return fmt.Sprintf("%s%s|%s|%s|%d", PrefixRecord, f.DID, f.Collection, f.RKey, f.Seq)
	}
	if did, collection, first, ok := splitRunKey(key); ok {
		return fmt.Sprintf("%s%s|%s|run|%d", PrefixRecord, did, collection, first)
	}
	if did, seq, err := ParseTombKey(key); err == nil {
		return fmt.Sprintf("%s%s|%d", PrefixTomb, did, seq)
	}
	for _, p := range [][]byte{PrefixEvent, PrefixCapture, PrefixGap} {
		if seq, err := ParseSeqKey(p, key); err == nil {
			return fmt.Sprintf("%s%d", p, seq)
		}
	}
	if fam, name, seq, last, err := ParseIndexEntry(key); err == nil {
		span := strconv.FormatUint(seq, 10)
		if last > seq {
			span += "-" + strconv.FormatUint(last, 10)
		}
		switch string(fam) {
		case string(PrefixMarker):
			return fmt.Sprintf("%s%s|%s", fam, Kind(name[0]), span)
		case string(PrefixByAccount):
			return fmt.Sprintf("%s%x|%s", fam, name, span)
		}
		return fmt.Sprintf("%s%s|%s", fam, name, span)
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

// ---- gaps and audits --------------------------------------------------------
//
// gap/<id as 8 bytes big-endian> records a stretch of the relay's stream the
// archive may be missing (Gap); audit/<id as 8 bytes big-endian> is the
// durable listRepos position of the repair pass healing gap <id>
// (ListCursor's encoding). Both travel as unit Puts, so a gap is durable in
// the same batch as the cursor move that passes it.

// Key prefixes of gaps and audits.
var (
	PrefixGap   = []byte("gap/")
	PrefixAudit = []byte("audit/")
)

// GapKey is gap/<id as 8 bytes big-endian>: gaps sort by id, oldest first.
func GapKey(id uint64) []byte { return seqKey(PrefixGap, id) }

// AuditKey is audit/<gap id as 8 bytes big-endian>: the repair pass's
// listRepos position for that gap.
func AuditKey(gapID uint64) []byte { return seqKey(PrefixAudit, gapID) }

// AuditHostKey is audit/<gap id as 8 bytes big-endian>/<host>: in hosts
// mode, the repair pass's position in one roster host's own listing (an
// Audit: the host's cursor, or done). The gap's AuditKey is its prefix.
func AuditHostKey(gapID uint64, host string) []byte {
	return append(append(AuditKey(gapID), '/'), host...)
}

// GapKind says how a gap was found.
type GapKind uint8

// Gap kinds. The numeric values are part of the stored encoding.
const (
	// GapOutdatedCursor: the relay said #info OutdatedCursor (our cursor is
	// older than its replay window) and streamed from its oldest event.
	GapOutdatedCursor GapKind = 1
	// GapFutureCursor: the relay said FutureCursor (our cursor is ahead of
	// its sequence: it was rebuilt or replaced); the stream resumed from its
	// live tip.
	GapFutureCursor GapKind = 2
	// GapSeqRegression: a connection's seqs stayed below the last accepted
	// one (its dialed cursor, or one it brought) past the threshold, or a
	// frame came under an accepted seq that is not the frame accepted
	// there: the relay restarted or went back in its sequence without
	// saying so. Also a late frame (below the last accepted seq, under one
	// never accepted: the relay delivered out of order), archived, whose
	// effects the pass audits.
	GapSeqRegression GapKind = 3
	// GapSeqSkip: consecutive frames skipped more seqs than the threshold.
	GapSeqSkip GapKind = 4
	// GapRelayReset: the operator's --reset-relay-cursor dropped the cursor.
	GapRelayReset GapKind = 5
	// GapAudit: a scheduled audit, announced by no gap, looks for what the
	// relay dropped silently.
	GapAudit GapKind = 6
	// GapNoCursor: a consumer without a firehose position (capture whose
	// wait for a first frame expired, or the live consumer after it) was
	// without a connection to the relay after work no position covers had
	// begun (meta/relay_silent_at: accounts downloaded): the relay's events
	// of that time reach no stream, and it joins the live tip.
	GapNoCursor GapKind = 7
)

var gapKindNames = [...]string{
	GapOutdatedCursor: "outdated_cursor",
	GapFutureCursor:   "future_cursor",
	GapSeqRegression:  "seq_regression",
	GapSeqSkip:        "seq_skip",
	GapRelayReset:     "relay_reset",
	GapAudit:          "audit",
	GapNoCursor:       "no_cursor",
}

// Valid reports whether k is a known kind.
func (k GapKind) Valid() bool { return k > 0 && int(k) < len(gapKindNames) }

func (k GapKind) String() string {
	if k.Valid() {
		return gapKindNames[k]
	}
	return fmt.Sprintf("gap_kind(%d)", uint8(k))
}

// Found reports whether a firehose consumer records gaps of kind k (the
// holes it finds in the relay's stream), which a later hole extends
// while their pass has not begun (GapIDs).
func (k GapKind) Found() bool {
	switch k {
	case GapOutdatedCursor, GapFutureCursor, GapSeqRegression, GapSeqSkip, GapNoCursor:
		return true
	}
	return false
}

// GapKinds lists every valid kind (metric labels).
func GapKinds() []GapKind {
	ks := make([]GapKind, 0, len(gapKindNames)-1)
	for k := GapKind(1); k.Valid(); k++ {
		ks = append(ks, k)
	}
	return ks
}

// Gap is one stretch of the relay's stream the archive may be missing.
// Events after FromSeq and before ToSeq may be missing; for a relay that
// restarted its sequence, ToSeq is in the new sequence.
type Gap struct {
	ID          uint64  // the key's id (not in the value)
	Kind        GapKind // how it was found
	FromSeq     uint64  // the last relay seq held before the gap (0: none)
	ToSeq       uint64  // the first relay seq taken after it (0: none yet)
	FirstSeenUS int64   // when it was found (unix µs)
	ClosedUS    int64   // when its repair finished (unix µs); 0: open
}

// Open reports whether the gap still waits for its repair.
func (g Gap) Open() bool { return g.ClosedUS == 0 }

// EncodeGap encodes [0x01][kind][uvarint from][uvarint to][uvarint
// first seen µs][uvarint closed µs]. Seqs above MaxInt64, a negative or zero
// first-seen time, a negative closing time or an unknown kind are refused.
func EncodeGap(g Gap) ([]byte, error) {
	switch {
	case !g.Kind.Valid():
		return nil, fmt.Errorf("archive: gap: %w: kind %d", ErrMalformed, g.Kind)
	case g.FromSeq > math.MaxInt64 || g.ToSeq > math.MaxInt64:
		return nil, fmt.Errorf("archive: gap: %w: seq above MaxInt64", ErrMalformed)
	case g.FirstSeenUS <= 0 || g.ClosedUS < 0:
		return nil, fmt.Errorf("archive: gap: %w: times %d, %d", ErrMalformed, g.FirstSeenUS, g.ClosedUS)
	}
	b := make([]byte, 0, 2+4*binary.MaxVarintLen64)
	b = append(b, codecV1, byte(g.Kind))
	b = binary.AppendUvarint(b, g.FromSeq)
	b = binary.AppendUvarint(b, g.ToSeq)
	b = binary.AppendUvarint(b, uint64(g.FirstSeenUS))
	return binary.AppendUvarint(b, uint64(g.ClosedUS)), nil
}

// DecodeGap accepts exactly what EncodeGap produces (ID is left 0).
func DecodeGap(b []byte) (Gap, error) {
	if len(b) == 0 || b[0] != codecV1 {
		return Gap{}, malformed("gap: unknown version or empty")
	}
	d := decoder{b: b[1:]}
	g := Gap{Kind: GapKind(d.byte1())}
	g.FromSeq, g.ToSeq = uint64(d.count()), uint64(d.count())
	g.FirstSeenUS, g.ClosedUS = d.count(), d.count()
	if err := d.finish("gap"); err != nil {
		return Gap{}, err
	}
	if !g.Kind.Valid() || g.FirstSeenUS == 0 {
		return Gap{}, malformed("gap: kind %d, first seen %d", g.Kind, g.FirstSeenUS)
	}
	return g, nil
}

// AuditPhase is where a gap's repair pass is.
type AuditPhase uint8

// Audit phases. The numeric values are part of the stored encoding.
const (
	// AuditList: comparing listRepos' head revs with rev/ from Cursor on.
	AuditList AuditPhase = 1
	// AuditDone: every account is marked; the gap closes when their
	// replacements have finished.
	AuditDone AuditPhase = 2
)

func (p AuditPhase) String() string {
	switch p {
	case AuditList:
		return "list"
	case AuditDone:
		return "done"
	}
	return fmt.Sprintf("audit_phase(%d)", uint8(p))
}

// Audit is a gap's repair pass position, audit/<gap id>.
type Audit struct {
	Phase  AuditPhase
	Cursor string // AuditList: the listRepos cursor to resume from ("" = the start)
	Marked uint64 // accounts marked (or refreshed) so far
	Listed uint64 // accounts listed so far
}

// EncodeAudit encodes [0x01][phase][string cursor][uvarint marked]
// [uvarint listed]. A cursor over 64 KiB, a count above MaxInt64 or an
// unknown phase is refused.
func EncodeAudit(a Audit) ([]byte, error) {
	switch {
	case a.Phase < AuditList || a.Phase > AuditDone:
		return nil, fmt.Errorf("archive: audit: %w: phase %d", ErrMalformed, a.Phase)
	case a.Marked > math.MaxInt64 || a.Listed > math.MaxInt64:
		return nil, fmt.Errorf("archive: audit: %w: count above MaxInt64", ErrMalformed)
	case len(a.Cursor) > maxStoredString:
		return nil, fmt.Errorf("archive: audit: %w: cursor of %d bytes", ErrMalformed, len(a.Cursor))
	}
	b := make([]byte, 0, 2+2*binary.MaxVarintLen64+binary.MaxVarintLen32+len(a.Cursor))
	b = append(b, codecV1, byte(a.Phase))
	b = appendString(b, a.Cursor)
	b = binary.AppendUvarint(b, a.Marked)
	return binary.AppendUvarint(b, a.Listed), nil
}

// DecodeAudit accepts exactly what EncodeAudit produces.
func DecodeAudit(b []byte) (Audit, error) {
	if len(b) == 0 || b[0] != codecV1 {
		return Audit{}, malformed("audit: unknown version or empty")
	}
	d := decoder{b: b[1:]}
	a := Audit{Phase: AuditPhase(d.byte1())}
	a.Cursor = d.str(maxStoredString)
	a.Marked, a.Listed = uint64(d.count()), uint64(d.count())
	if err := d.finish("audit"); err != nil {
		return Audit{}, err
	}
	if a.Phase < AuditList || a.Phase > AuditDone {
		return Audit{}, malformed("audit: phase %d", a.Phase)
	}
	return a, nil
}

// ---- the replay index ------------------------------------------------------
//
// Three families let a filtered replay read only the rows it sends
// (Store.IndexedEvents). Each key ends with the row's seq as 8 bytes
// big-endian after a fixed prefix, and its value is empty or, in xc/ and
// xm/, a covering copy of the row (replayindex.go): neighbouring keys
// share everything but the seq's low bytes, which Pebble's prefix
// compression keeps out of the block. Every family is written by the archive
// writer only, as blind Sets in the row's batch, and deleted with the row by
// the compaction pass (a delete, account, identity or sync row is never
// removed, so neither are its entries).
//
// A run entry stands for consecutive seqs of one name written in one
// batch (a repo's records in the bootstrap, a commit's ops): the first
// seq's key followed by last-first, 2 bytes big-endian, value empty.
// The compaction pass removes rows from a run without touching it (it
// deletes each removed row's own key, which a run row never had), so a
// run names a span of seqs whose surviving rows are all of its name; a
// reader skips the seqs ev/ no longer holds.

// Key prefixes of the replay index.
var (
	// PrefixByCollection: xc/<collection>\x00<seq>, one per create, update
	// and delete row.
	PrefixByCollection = []byte("xc/")
	// PrefixByAccount: xd/<account hash><seq>, one per row of every kind:
	// an account's whole history, markers included, so a wantedDids
	// replay reads it alone. The account is its DID's 64-bit FNV-1a hash
	// (AccountHash), 8 bytes big-endian: a fixed-width key a third the
	// size of the DID; two DIDs with one hash only make a replay read the
	// other's rows too, which its filter drops.
	PrefixByAccount = []byte("xd/")
	// PrefixMarker: xm/<kind><seq>, one per account, identity and sync
	// row (kind one byte): the rows every collection filter lets through,
	// by kind, so a subscriber without includeSync never reads a sync row.
	PrefixMarker = []byte("xm/")
)

// AppendCollectionIndexKey appends xc/<collection>\x00<seq> to dst.
func AppendCollectionIndexKey(dst []byte, collection string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(AppendIndexPrefix(dst, PrefixByCollection, collection), seq)
}

// AppendAccountIndexKey appends xd/<AccountHash(did)><seq> to dst.
func AppendAccountIndexKey(dst []byte, did string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(AppendIndexPrefix(dst, PrefixByAccount, did), seq)
}

// AccountHash is the 64-bit FNV-1a hash of a DID, the account in xd/ keys.
// Stored: it never changes.
func AccountHash(did string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(did); i++ {
		h ^= uint64(did[i])
		h *= 1099511628211
	}
	return h
}

// AppendMarkerKey appends xm/<kind><seq> to dst.
func AppendMarkerKey(dst []byte, kind Kind, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append(append(dst, PrefixMarker...), byte(kind)), seq)
}

// MarkerName is the name of kind's marker range (IndexRange.Name).
func MarkerName(kind Kind) string { return string([]byte{byte(kind)}) }

// AppendIndexPrefix appends the prefix of one range of the replay index
// to dst: xc/<collection>\x00 for a collection, xd/<AccountHash(did)> for
// an account (name the DID), xm/<kind> for a kind's markers (name
// MarkerName(kind)).
func AppendIndexPrefix(dst, family []byte, name string) []byte {
	dst = append(dst, family...)
	switch string(family) {
	case string(PrefixByAccount):
		return binary.BigEndian.AppendUint64(dst, AccountHash(name))
	case string(PrefixMarker):
		return append(dst, name...)
	}
	dst = append(dst, name...)
	return append(dst, keySep)
}

// MaxIndexRun is the most seqs one run entry stands for.
const MaxIndexRun = 1 << 16

// AppendIndexRunKey appends the run entry for the seqs [first, last]
// (first < last ≤ first+MaxIndexRun-1) of the range whose prefix
// (AppendIndexPrefix) is prefix: first's key and last-first, 2 bytes
// big-endian (few bytes after the shared prefix, as a row's key).
func AppendIndexRunKey(dst, prefix []byte, first, last uint64) []byte {
	return appendRunLength(binary.BigEndian.AppendUint64(append(dst, prefix...), first), last-first)
}

// appendRunLength appends to a run's first key the seqs after it.
func appendRunLength(key []byte, after uint64) []byte {
	return binary.BigEndian.AppendUint16(key, uint16(after))
}

// ParseIndexEntry is ParseIndexKey for a key that may be a run entry: the
// seqs it stands for are [first, last] (first == last: one row's key).
func ParseIndexEntry(key []byte) (family []byte, name string, first, last uint64, err error) {
	if family, name, first, err = ParseIndexKey(key); err == nil {
		return family, name, first, first, nil
	}
	if len(key) < 10 {
		return nil, "", 0, 0, err
	}
	family, name, _, rerr := ParseIndexKey(key[:len(key)-2])
	first, last, ok := entrySpan(key, len(key)-10)
	if rerr != nil || !ok {
		return nil, "", 0, 0, err
	}
	return family, name, first, last, nil
}

// entrySpan returns the seqs [first, last] of the replay index key k
// whose range prefix is plen bytes: one row's key, or a run's.
func entrySpan(k []byte, plen int) (first, last uint64, ok bool) {
	switch len(k) - plen {
	case 8:
		first = binary.BigEndian.Uint64(k[plen:])
		return first, first, true
	case 10:
		first = binary.BigEndian.Uint64(k[plen:])
		n := uint64(binary.BigEndian.Uint16(k[plen+8:]))
		return first, first + n, n > 0 && first <= math.MaxUint64-n
	}
	return 0, 0, false
}

// ParseIndexKey returns the family, the name (the collection, the
// account hash's 8 bytes, or the marker's MarkerName) and the seq of a
// replay index key; it fails closed on anything the Append functions
// cannot produce.
func ParseIndexKey(key []byte) (family []byte, name string, seq uint64, err error) {
	switch {
	case hasPrefix(key, PrefixByAccount):
		n := len(PrefixByAccount)
		if len(key) != n+16 {
			return nil, "", 0, fmt.Errorf("archive: key %q is not an account index key", truncateForError(key))
		}
		return PrefixByAccount, string(key[n : n+8]), binary.BigEndian.Uint64(key[n+8:]), nil
	case hasPrefix(key, PrefixMarker):
		n := len(PrefixMarker)
		if k := Kind(key[min(n, len(key)-1)]); len(key) != n+1+8 || k.IsCommit() || !k.Valid() {
			return nil, "", 0, fmt.Errorf("archive: key %q is not a marker index key", truncateForError(key))
		}
		return PrefixMarker, string(key[n : n+1]), binary.BigEndian.Uint64(key[n+1:]), nil
	case hasPrefix(key, PrefixByCollection):
		family = PrefixByCollection
	default:
		return nil, "", 0, fmt.Errorf("archive: key %q is not a replay index key", truncateForError(key))
	}
	n := len(family)
	if len(key) < n+1+1+8 || key[len(key)-9] != keySep || bytes.IndexByte(key[n:len(key)-9], keySep) >= 0 {
		return nil, "", 0, fmt.Errorf("archive: replay index key %q: want <name>\\x00<seq>", truncateForError(key))
	}
	return family, string(key[n : len(key)-9]), binary.BigEndian.Uint64(key[len(key)-8:]), nil
}
