package archive

// This file owns the event model: one archived row of the stream.

import "fmt"

// Kind is what an event says happened. The numeric values are part of the
// stored encoding and never change.
type Kind uint8

const (
	KindCreate   Kind = 1 // a record was created (Record, CID set)
	KindUpdate   Kind = 2 // a record was replaced (Record, CID set)
	KindDelete   Kind = 3 // a record was removed (no Record, no CID)
	KindIdentity Kind = 4 // the account's identity (handle) changed
	KindAccount  Kind = 5 // the account's hosting status changed (Active, Status)
	KindSync     Kind = 6 // the account's repo was reset: the rows that change its records follow (a marker; it supersedes nothing)
)

// Valid reports whether k is one of the six kinds.
func (k Kind) Valid() bool { return k >= KindCreate && k <= KindSync }

func (k Kind) String() string {
	switch k {
	case KindCreate:
		return "create"
	case KindUpdate:
		return "update"
	case KindDelete:
		return "delete"
	case KindIdentity:
		return "identity"
	case KindAccount:
		return "account"
	case KindSync:
		return "sync"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// IsCommit reports whether k is a record operation (create, update, delete).
func (k Kind) IsCommit() bool { return k >= KindCreate && k <= KindDelete }

// Source names the producer that submitted an event. Part of the stored
// encoding.
type Source uint8

const (
	SourceBackfill Source = 1 // bootstrap snapshot rows
	SourceLive     Source = 2 // steady-state firehose
	SourceMerge    Source = 3 // captured firehose folded in by merge
	SourceRetry    Source = 4 // whole-repo replacement rows
)

// Valid reports whether s is one of the four sources.
func (s Source) Valid() bool { return s >= SourceBackfill && s <= SourceRetry }

// download reports whether s is a download's (a bootstrap snapshot's or a
// whole-repo replacement's): its records come in the repo's key order.
func (s Source) download() bool { return s == SourceBackfill || s == SourceRetry }

func (s Source) String() string {
	switch s {
	case SourceBackfill:
		return "backfill"
	case SourceLive:
		return "live"
	case SourceMerge:
		return "merge"
	case SourceRetry:
		return "retry"
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// Event is one archived row. Seq and TimeUS are assigned by the Writer when
// the event is made durable; producers leave them zero.
type Event struct {
	Seq         uint64 // archive sequence number, strictly increasing, never reused
	Kind        Kind
	DID         string
	Collection  string // commit kinds only
	RKey        string // commit kinds only
	Rev         string // commit and sync kinds: the repo revision (TID)
	CID         []byte // create/update: the record CID in binary form
	Record      []byte // create/update: the record as raw DAG-CBOR
	TimeUS      int64  // unix microseconds, stamped at seq allocation, strictly increasing along seqs
	Handle      string // identity only (may be empty)
	Active      bool   // account only
	Status      string // account only: "", "deactivated", "takendown", "suspended", "deleted", ...
	UpstreamSeq int64  // the relay seq the row came from; 0 for snapshot rows
	Source      Source
	// CIDOfRecord: the producer checked that CID is Record's block CID (a
	// block of a CAR whose every block was hashed against its CID), so the
	// codec stores a derivable CID without hashing Record again. Not
	// stored; never set on data not so checked.
	CIDOfRecord bool
	// Since is a firehose commit's since (the rev of the account's commit
	// before it), on the commit's first row; "" otherwise. The writer
	// checks it against the ratchet (see Writer's chain check); only cap/
	// keeps it, so merging checks it too.
	Since string
}
