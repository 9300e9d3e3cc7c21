// record.go owns what one verified record is and the per-record validation
// that drops a hostile record alone (R1): its path must be collection/rkey
// with a valid NSID and record key (upstream.ValidNSID, ValidRecordKey: the
// checks the firehose applies to op paths), its bytes at most 1 MiB and one
// DAG-CBOR map. A drop is a closed-set reason, never an error for the
// repository.

package backfill

import (
	"bytes"

	"github.com/backstream/backstream/upstream"
	"github.com/bluesky-social/indigo/atproto/atdata"
	"github.com/ipfs/go-cid"
)

// MaxRecordBytes is the largest record accepted (the atproto limit); a larger
// one is dropped with DropTooLarge.
const MaxRecordBytes = atdata.MAX_CBOR_RECORD_SIZE

// Record is one verified record of a Snapshot, yielded in MST key order.
type Record struct {
	Collection string // a valid NSID
	RKey       string // a valid record key
	CID        cid.Cid
	// CBOR is the record block. It aliases the snapshot's CAR buffer (no
	// copy): read-only, and holding it keeps the whole buffer alive, so copy
	// it if it must outlive the emission of its chunk. A snapshot verified
	// from its file (VerifyFile) reuses one read buffer: copy before the
	// callback returns.
	CBOR []byte
}

// DropReason says why a record was dropped. The set is closed; use it as a
// metric label value.
type DropReason uint8

// Drop reasons, in the order of the checks.
const (
	// DropInvalidPath: the MST key is not exactly "collection/rkey", or
	// longer than an MST key may be.
	DropInvalidPath DropReason = iota + 1
	// DropInvalidCollection: the collection is not a valid NSID.
	DropInvalidCollection
	// DropInvalidRKey: the record key is not a valid record key.
	DropInvalidRKey
	// DropTooLarge: the record block is larger than MaxRecordBytes.
	DropTooLarge
	// DropBadCBOR: the record block is not one well-formed DAG-CBOR map.
	DropBadCBOR

	numDropReasons = int(DropBadCBOR) + 1
)

var dropReasonNames = [numDropReasons]string{
	DropInvalidPath:       "invalid_path",
	DropInvalidCollection: "invalid_collection",
	DropInvalidRKey:       "invalid_rkey",
	DropTooLarge:          "too_large",
	DropBadCBOR:           "bad_cbor",
}

// String returns the metric label value, or "unknown" outside the set.
func (r DropReason) String() string {
	if r == 0 || int(r) >= numDropReasons {
		return "unknown"
	}
	return dropReasonNames[r]
}

// DropReasons lists every reason, for pre-registering metric label values.
func DropReasons() []DropReason {
	return []DropReason{DropInvalidPath, DropInvalidCollection, DropInvalidRKey, DropTooLarge, DropBadCBOR}
}

// DropCounts counts dropped records by reason; index it with a DropReason.
type DropCounts [numDropReasons]int

// Total is the number of dropped records.
func (d DropCounts) Total() int {
	n := 0
	for _, c := range d {
		n += c
	}
	return n
}

// Drop describes one dropped record, for VerifyOptions.OnDrop.
type Drop struct {
	Path   string // the raw MST key; hostile input, quote it when logging
	CID    cid.Cid
	Size   int
	Reason DropReason
}

// recordChecker validates the records of one walk.
type recordChecker struct {
	strict bool
}

func newRecordChecker(strict bool) *recordChecker {
	return &recordChecker{strict: strict}
}

// checkPath validates an MST key as collection/rkey; it returns the slash
// position, or the drop reason.
func (rc *recordChecker) checkPath(key []byte) (int, DropReason) {
	if len(key) > maxKeyBytes {
		return 0, DropInvalidPath
	}
	slash := bytes.IndexByte(key, '/')
	if slash < 0 || bytes.IndexByte(key[slash+1:], '/') >= 0 {
		return 0, DropInvalidPath
	}
	if !upstream.ValidNSID(key[:slash]) {
		return 0, DropInvalidCollection
	}
	if !upstream.ValidRecordKey(key[slash+1:]) {
		return 0, DropInvalidRKey
	}
	return slash, 0
}

// checkBody validates a record block; 0 means keep.
func (rc *recordChecker) checkBody(b []byte) DropReason {
	if len(b) > MaxRecordBytes {
		return DropTooLarge
	}
	if !WellFormedRecord(b) {
		return DropBadCBOR
	}
	if rc.strict {
		if _, err := atdata.UnmarshalCBOR(b); err != nil {
			return DropBadCBOR
		}
	}
	return 0
}
