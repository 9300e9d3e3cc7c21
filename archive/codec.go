package archive

// This file owns the typed codecs for every stored value except events
// (event_codec.go). Every decoder is fail-closed: it accepts exactly the bytes
// its encoder produces and returns an error wrapping ErrMalformed otherwise.
// Every value that may change format starts with a version byte.

import (
	"bytes"
	"encoding/binary"
	"math"
	"sort"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	codecV1 = 0x01
	// codecV2 is the second version of a value whose format changed (ident/).
	codecV2 = 0x02

	// maxStoredString bounds any string field in a stored value. Larger
	// values are refused by encoders and decoders alike.
	maxStoredString = 64 << 10
	// MaxErrorMessage is the longest last-error message kept in a repo state.
	MaxErrorMessage = 1 << 10
	// InstanceLen is the width of meta/instance.
	InstanceLen = 16
)

// ---- phase ----------------------------------------------------------------

// Phase is the lifecycle phase persisted in meta/phase.
type Phase string

const (
	PhaseBootstrap   Phase = "bootstrap"
	PhaseMerging     Phase = "merging"
	PhaseSteadyState Phase = "steady_state"
)

// Valid reports whether p is one of the three phases.
func (p Phase) Valid() bool {
	return p == PhaseBootstrap || p == PhaseMerging || p == PhaseSteadyState
}

// EncodePhase refuses a phase outside the three names.
func EncodePhase(p Phase) ([]byte, error) {
	if !p.Valid() {
		return nil, malformed("refusing to encode unknown phase %q", string(p))
	}
	return append([]byte{codecV1}, p...), nil
}

// DecodePhase accepts exactly [0x01] followed by one of the three names.
func DecodePhase(b []byte) (Phase, error) {
	if len(b) == 0 {
		return "", malformed("empty phase")
	}
	if b[0] != codecV1 {
		return "", malformed("phase: unknown version 0x%02x", b[0])
	}
	p := Phase(b[1:])
	if !p.Valid() {
		return "", malformed("phase: unknown name %q", truncateForError(b[1:]))
	}
	return p, nil
}

// ---- timestamps -----------------------------------------------------------

// EncodeTime stores t as RFC 3339 with nanoseconds, in UTC.
func EncodeTime(t time.Time) []byte {
	return []byte(t.UTC().Format(time.RFC3339Nano))
}

// DecodeTime parses an RFC 3339 timestamp.
func DecodeTime(b []byte) (time.Time, error) {
	if len(b) == 0 || len(b) > 64 {
		return time.Time{}, malformed("timestamp: %d bytes", len(b))
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return time.Time{}, malformed("timestamp %q: %v", truncateForError(b), err)
	}
	return t, nil
}

// ---- instance -------------------------------------------------------------

// Instance is the store's identity, minted once at creation.
type Instance [InstanceLen]byte

// DecodeInstance accepts exactly 16 bytes.
func DecodeInstance(b []byte) (Instance, error) {
	var id Instance
	if len(b) != InstanceLen {
		return id, malformed("instance: %d bytes, want %d", len(b), InstanceLen)
	}
	copy(id[:], b)
	return id, nil
}

// ---- relay ----------------------------------------------------------------

// EncodeRelay stores the relay host this store follows: [0x01][host].
func EncodeRelay(host string) ([]byte, error) {
	if err := checkRelay(host); err != nil {
		return nil, err
	}
	return append([]byte{codecV1}, host...), nil
}

// zstdDictMagic opens every zstd dictionary (little-endian); its id follows.
const zstdDictMagic = 0xEC30A437

// EncodeZstdDictionary encodes a zstd dictionary (its own format: the magic,
// its 4-byte id, its tables and content) under a version byte.
func EncodeZstdDictionary(raw []byte) ([]byte, error) {
	if _, err := zstdDictionaryID(raw); err != nil {
		return nil, err
	}
	return append([]byte{codecV1}, raw...), nil
}

// DecodeZstdDictionary is the inverse of EncodeZstdDictionary: the
// dictionary's bytes (a copy) and its id.
func DecodeZstdDictionary(b []byte) (ZstdDictionary, error) {
	if len(b) == 0 || b[0] != codecV1 {
		return ZstdDictionary{}, malformed("zstd dictionary: no version byte")
	}
	id, err := zstdDictionaryID(b[1:])
	if err != nil {
		return ZstdDictionary{}, err
	}
	return ZstdDictionary{ID: id, Raw: bytes.Clone(b[1:])}, nil
}

// ZstdDictionary is a stored zstd dictionary.
type ZstdDictionary struct {
	ID  uint32
	Raw []byte
}

func zstdDictionaryID(raw []byte) (uint32, error) {
	if len(raw) < 8 || binary.LittleEndian.Uint32(raw) != zstdDictMagic {
		return 0, malformed("zstd dictionary: no zstd dictionary header")
	}
	id := binary.LittleEndian.Uint32(raw[4:])
	if id == 0 {
		return 0, malformed("zstd dictionary: id 0")
	}
	return id, nil
}

// DecodeRelay is the inverse of EncodeRelay.
func DecodeRelay(b []byte) (string, error) {
	if len(b) == 0 {
		return "", malformed("empty relay")
	}
	if b[0] != codecV1 {
		return "", malformed("relay: unknown version 0x%02x", b[0])
	}
	host := string(b[1:])
	if err := checkRelay(host); err != nil {
		return "", err
	}
	return host, nil
}

func checkRelay(host string) error {
	if host == "" || len(host) > 2048 || !utf8.ValidString(host) || strings.ContainsAny(host, " \t\r\n") {
		return malformed("relay host %q is not a host", truncateForError([]byte(host)))
	}
	return nil
}

// ---- u64 cursors (cursor/relay, cursor/merge) -------------------------------

// EncodeSeqCursor encodes [0x01][uint64 LE]. Values above MaxInt64 are
// refused: upstream seqs are signed 64-bit.
func EncodeSeqCursor(seq uint64) ([]byte, error) { return encodeU64("cursor", seq) }

// DecodeSeqCursor accepts exactly 9 bytes, version 1, value ≤ MaxInt64.
func DecodeSeqCursor(b []byte) (uint64, error) { return decodeU64("cursor", b) }

// SinkRemoval is a removal the NATS sink saw empty its stream: the
// stream (its creation time) and its last sequence then, and the archive
// seq of the message removed.
type SinkRemoval struct {
	Created time.Time
	LastSeq uint64 // the stream's last sequence, the removed message's
	Seq     uint64 // the archive seq of the removed message
}

// EncodeSinkRemoval encodes [0x01][created, Unix ns, int64 LE][last
// sequence, uint64 LE][archive seq, uint64 LE]; both sequences are at
// least 1 and at most MaxInt64.
func EncodeSinkRemoval(r SinkRemoval) ([]byte, error) {
	if r.LastSeq == 0 || r.Seq == 0 || r.LastSeq > math.MaxInt64 || r.Seq > math.MaxInt64 {
		return nil, malformed("sink removal: sequences %d and %d, want 1 to MaxInt64", r.LastSeq, r.Seq)
	}
	b := make([]byte, 25)
	b[0] = codecV1
	binary.LittleEndian.PutUint64(b[1:], uint64(r.Created.UnixNano()))
	binary.LittleEndian.PutUint64(b[9:], r.LastSeq)
	binary.LittleEndian.PutUint64(b[17:], r.Seq)
	return b, nil
}

// DecodeSinkRemoval accepts exactly what EncodeSinkRemoval produces.
func DecodeSinkRemoval(b []byte) (SinkRemoval, error) {
	if len(b) != 25 {
		return SinkRemoval{}, malformed("sink removal: %d bytes, want 25", len(b))
	}
	if b[0] != codecV1 {
		return SinkRemoval{}, malformed("sink removal: unknown version 0x%02x", b[0])
	}
	r := SinkRemoval{
		Created: time.Unix(0, int64(binary.LittleEndian.Uint64(b[1:]))).UTC(),
		LastSeq: binary.LittleEndian.Uint64(b[9:]),
		Seq:     binary.LittleEndian.Uint64(b[17:]),
	}
	if r.LastSeq == 0 || r.Seq == 0 || r.LastSeq > math.MaxInt64 || r.Seq > math.MaxInt64 {
		return SinkRemoval{}, malformed("sink removal: sequences %d and %d, want 1 to MaxInt64", r.LastSeq, r.Seq)
	}
	return r, nil
}

// encodeU64 encodes [0x01][uint64 LE] of a value at most MaxInt64 (a seq);
// what names the value in the error.
func encodeU64(what string, v uint64) ([]byte, error) {
	if v > math.MaxInt64 {
		return nil, malformed("%s %d above MaxInt64", what, v)
	}
	b := make([]byte, 9)
	b[0] = codecV1
	binary.LittleEndian.PutUint64(b[1:], v)
	return b, nil
}

// decodeU64 accepts exactly what encodeU64 produces.
func decodeU64(what string, b []byte) (uint64, error) {
	if len(b) != 9 {
		return 0, malformed("%s: %d bytes, want 9", what, len(b))
	}
	if b[0] != codecV1 {
		return 0, malformed("%s: unknown version 0x%02x", what, b[0])
	}
	v := binary.LittleEndian.Uint64(b[1:])
	if v > math.MaxInt64 {
		return 0, malformed("%s %d above MaxInt64", what, v)
	}
	return v, nil
}

// ---- listRepos cursor -----------------------------------------------------

// ListCursor is a listRepos checkpoint: either a page cursor to resume from,
// or "the listing finished". Absence of the key (ErrNotFound) is a third,
// distinct state: start from the beginning.
type ListCursor struct {
	Finished bool
	Cursor   string // resume point; empty only when Finished
}

const (
	listStatePage     = 0x01
	listStateFinished = 0x02
	// MaxListCursor bounds a stored listRepos cursor. Real relays use short
	// cursors; 64 KiB leaves room for hostile-but-valid ones (4 KiB tested).
	MaxListCursor = maxStoredString
)

// EncodeListCursor encodes [0x01][state][cursor bytes].
func EncodeListCursor(c ListCursor) ([]byte, error) {
	if c.Finished {
		if c.Cursor != "" {
			return nil, malformed("finished listRepos cursor carries a cursor")
		}
		return []byte{codecV1, listStateFinished}, nil
	}
	if c.Cursor == "" {
		return nil, malformed("listRepos page cursor is empty")
	}
	if len(c.Cursor) > MaxListCursor {
		return nil, malformed("listRepos cursor is %d bytes (max %d)", len(c.Cursor), MaxListCursor)
	}
	b := make([]byte, 0, 2+len(c.Cursor))
	b = append(b, codecV1, listStatePage)
	return append(b, c.Cursor...), nil
}

// DecodeListCursor is the inverse of EncodeListCursor.
func DecodeListCursor(b []byte) (ListCursor, error) {
	if len(b) < 2 {
		return ListCursor{}, malformed("listRepos cursor: %d bytes", len(b))
	}
	if b[0] != codecV1 {
		return ListCursor{}, malformed("listRepos cursor: unknown version 0x%02x", b[0])
	}
	switch b[1] {
	case listStateFinished:
		if len(b) != 2 {
			return ListCursor{}, malformed("finished listRepos cursor has %d trailing bytes", len(b)-2)
		}
		return ListCursor{Finished: true}, nil
	case listStatePage:
		if len(b) == 2 {
			return ListCursor{}, malformed("listRepos page cursor is empty")
		}
		if len(b)-2 > MaxListCursor {
			return ListCursor{}, malformed("listRepos cursor is %d bytes (max %d)", len(b)-2, MaxListCursor)
		}
		return ListCursor{Cursor: string(b[2:])}, nil
	}
	return ListCursor{}, malformed("listRepos cursor: unknown state 0x%02x", b[1])
}

// ---- rev ------------------------------------------------------------------

// maxRev bounds a stored rev. atproto revs are 13-character TIDs; the
// archive does not parse them (it must not know atproto) but refuses
// anything that is clearly not one.
const maxRev = 64

// EncodeRev encodes [0x01][rev].
func EncodeRev(rev string) ([]byte, error) {
	if rev == "" || len(rev) > maxRev {
		return nil, malformed("rev %q", truncateForError([]byte(rev)))
	}
	return append([]byte{codecV1}, rev...), nil
}

// DecodeRev is the inverse of EncodeRev.
func DecodeRev(b []byte) (string, error) {
	if len(b) < 2 || len(b) > 1+maxRev {
		return "", malformed("rev: %d bytes", len(b))
	}
	if b[0] != codecV1 {
		return "", malformed("rev: unknown version 0x%02x", b[0])
	}
	return string(b[1:]), nil
}

// ---- counts ---------------------------------------------------------------

// Counts are the repo counts by status plus the number of inactive repos and
// the failed repos by error class, maintained by the writer in the same batch
// as every transition.
type Counts struct {
	ByStatus [numRepoStatus]int64 // indexed by RepoStatus
	Inactive int64                // repos with Active == false
	// FailedByClass counts the repos in status failed by their error class
	// (FailedClass); it sums to ByStatus[StatusFailed]. nil only when read
	// from a version-1 value, which predates it (the writer rebuilds it).
	FailedByClass map[string]int64
}

// MaxFailedClasses bounds the distinct error classes counted; repos of any
// further class are counted under FailedClassOther.
const MaxFailedClasses = 64

// Error classes the counts use for a failed repo without a usable class.
const (
	FailedClassUnknown = "unknown" // a failed repo whose state names no class
	FailedClassOther   = "other"   // classes beyond MaxFailedClasses
)

// maxClassName bounds a class name in meta/counts.
const maxClassName = 64

// FailedClass is the class a failed repo is counted under.
func FailedClass(s RepoState) string {
	if s.ErrClass == "" || len(s.ErrClass) > maxClassName {
		return FailedClassUnknown
	}
	return s.ErrClass
}

// Total is the number of known repos.
func (c Counts) Total() int64 {
	var n int64
	for _, v := range c.ByStatus {
		n += v
	}
	return n
}

// Get returns the count of repos in status s.
func (c Counts) Get(s RepoStatus) int64 {
	if !s.Valid() {
		return 0
	}
	return c.ByStatus[s]
}

// Clone returns a deep copy (the class map is not shared).
func (c Counts) Clone() Counts {
	if c.FailedByClass != nil {
		m := make(map[string]int64, len(c.FailedByClass))
		for k, v := range c.FailedByClass {
			m[k] = v
		}
		c.FailedByClass = m
	}
	return c
}

const countsV2 = 0x02

// EncodeCounts encodes [0x02], one uvarint per status (1..5), the inactive
// count, then the failed classes: a uvarint n and n (class, uvarint count)
// pairs in strictly increasing class order, every count positive, summing to
// the failed count. Negative counts and inconsistent classes are a bug and
// refused.
func EncodeCounts(c Counts) ([]byte, error) {
	b := []byte{countsV2}
	for s := RepoStatus(1); s < numRepoStatus; s++ {
		if c.ByStatus[s] < 0 {
			return nil, malformed("negative count %d for %s", c.ByStatus[s], s)
		}
		b = binary.AppendUvarint(b, uint64(c.ByStatus[s]))
	}
	if c.Inactive < 0 {
		return nil, malformed("negative inactive count %d", c.Inactive)
	}
	b = binary.AppendUvarint(b, uint64(c.Inactive))
	classes := make([]string, 0, len(c.FailedByClass))
	var sum int64
	for k, v := range c.FailedByClass {
		switch {
		case v < 0:
			return nil, malformed("negative failed count %d for class %q", v, k)
		case v == 0:
			continue
		case k == "" || len(k) > maxClassName:
			return nil, malformed("failed class name of %d bytes", len(k))
		}
		sum += v
		classes = append(classes, k)
	}
	if len(classes) > MaxFailedClasses {
		return nil, malformed("%d failed classes, at most %d", len(classes), MaxFailedClasses)
	}
	if sum != c.ByStatus[StatusFailed] {
		return nil, malformed("failed classes sum to %d, failed count is %d", sum, c.ByStatus[StatusFailed])
	}
	sort.Strings(classes)
	b = binary.AppendUvarint(b, uint64(len(classes)))
	for _, k := range classes {
		b = appendString(b, k)
		b = binary.AppendUvarint(b, uint64(c.FailedByClass[k]))
	}
	return b, nil
}

// DecodeCounts is the inverse of EncodeCounts. It also reads version 1
// (no classes), leaving FailedByClass nil.
func DecodeCounts(b []byte) (Counts, error) {
	var c Counts
	if len(b) == 0 {
		return c, malformed("empty counts")
	}
	if b[0] != codecV1 && b[0] != countsV2 {
		return c, malformed("counts: unknown version 0x%02x", b[0])
	}
	d := decoder{b: b[1:]}
	for s := RepoStatus(1); s < numRepoStatus; s++ {
		c.ByStatus[s] = d.count()
	}
	c.Inactive = d.count()
	if b[0] == countsV2 {
		n := d.uvarint()
		if n > MaxFailedClasses {
			d.fail("%d failed classes, at most %d", n, MaxFailedClasses)
			n = 0 // no map sized by a malformed count
		}
		c.FailedByClass = make(map[string]int64, n)
		var sum int64
		prev := ""
		for i := uint64(0); i < n && d.err == nil; i++ {
			k := d.str(maxClassName)
			v := d.count()
			switch {
			case d.err != nil:
			case k == "" || (i > 0 && k <= prev):
				d.fail("failed classes not in strictly increasing order at %q", k)
			case v == 0:
				d.fail("failed class %q with a zero count", k)
			case v > math.MaxInt64-sum:
				d.fail("failed classes overflow")
			}
			prev, sum = k, sum+v
			c.FailedByClass[k] = v
		}
		if d.err == nil && sum != c.ByStatus[StatusFailed] {
			d.fail("failed classes sum to %d, failed count is %d", sum, c.ByStatus[StatusFailed])
		}
	}
	if err := d.finish("counts"); err != nil {
		return Counts{}, err
	}
	return c, nil
}

// ---- host state -----------------------------------------------------------

// HostState is what is kept about one PDS host: retry's parking (through
// HostUpdate), the writer's failure aggregate, and the relay's listHosts
// roster entry as a fleet bootstrap last read it (through HostUpdate).
type HostState struct {
	ParkedUntilUS int64  // unix µs; 0 = not parked
	Failures      uint64 // repos in status failed whose final host this is; the writer's
	LastErrClass  string
	// Status, Accounts and Seq are the host's roster entry (status as the
	// relay gave it, e.g. active; its account count and seq); Status ""
	// when the host was never on a roster read.
	Status   string
	Accounts uint64
	Seq      uint64
}

// hostStateV2 is the host state with a roster entry; maxHostStatus bounds
// its status.
const (
	hostStateV2   = 0x02
	maxHostStatus = 64
)

// EncodeHostState encodes [0x01][varint parked][uvarint failures][string
// class], and, for a host with a roster entry, version 2: the same then
// [string status][uvarint accounts][uvarint seq].
func EncodeHostState(h HostState) ([]byte, error) {
	if len(h.LastErrClass) > 256 {
		return nil, malformed("host error class is %d bytes", len(h.LastErrClass))
	}
	if len(h.Status) > maxHostStatus {
		return nil, malformed("host roster status is %d bytes", len(h.Status))
	}
	roster := h.Status != "" || h.Accounts != 0 || h.Seq != 0
	v := byte(codecV1)
	if roster {
		v = hostStateV2
	}
	b := []byte{v}
	b = binary.AppendVarint(b, h.ParkedUntilUS)
	b = binary.AppendUvarint(b, h.Failures)
	b = appendString(b, h.LastErrClass)
	if roster {
		b = appendString(b, h.Status)
		b = binary.AppendUvarint(b, h.Accounts)
		b = binary.AppendUvarint(b, h.Seq)
	}
	return b, nil
}

// DecodeHostState is the inverse of EncodeHostState: version 1 or 2, and a
// version 2 value must carry a roster entry.
func DecodeHostState(b []byte) (HostState, error) {
	var h HostState
	if len(b) == 0 {
		return h, malformed("empty host state")
	}
	if b[0] != codecV1 && b[0] != hostStateV2 {
		return h, malformed("host state: unknown version 0x%02x", b[0])
	}
	d := decoder{b: b[1:]}
	h.ParkedUntilUS = d.varint()
	h.Failures = d.uvarint()
	h.LastErrClass = d.str(256)
	if b[0] == hostStateV2 {
		h.Status = d.str(maxHostStatus)
		h.Accounts = d.uvarint()
		h.Seq = d.uvarint()
	}
	if err := d.finish("host state"); err != nil {
		return HostState{}, err
	}
	if b[0] == hostStateV2 && h.Status == "" && h.Accounts == 0 && h.Seq == 0 {
		return HostState{}, malformed("host state: version 2 without a roster entry")
	}
	return h, nil
}

// ---- shared helpers ---------------------------------------------------------

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, s []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads uvarint-framed fields; the first failure sticks and finish
// reports it, so call sites stay linear.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = malformed(format, args...)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail("bad or non-minimal uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 || n > 1 && d.b[n-1] == 0 {
		d.fail("bad or non-minimal varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count is a uvarint that must fit a non-negative int64.
func (d *decoder) count() int64 {
	v := d.uvarint()
	if v > math.MaxInt64 {
		d.fail("count %d above MaxInt64", v)
		return 0
	}
	return int64(v)
}

func (d *decoder) byte1() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// raw returns a length-prefixed byte field, aliasing the input.
func (d *decoder) raw(max int) []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(max) {
		d.fail("field of %d bytes exceeds %d", n, max)
		return nil
	}
	if n > uint64(len(d.b)) {
		d.fail("field of %d bytes, %d left", n, len(d.b))
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) str(max int) string { return string(d.raw(max)) }

func (d *decoder) finish(what string) error {
	if d.err != nil {
		return d.err
	}
	if len(d.b) != 0 {
		return malformed("%s: %d trailing bytes", what, len(d.b))
	}
	return nil
}

func truncateForError(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
