package archive

// This file owns the per-repo state (repo/<did>) and the field-level
// mutations producers submit to change it. Only the Writer applies them.

import (
	"encoding/binary"
	"fmt"
)

// RepoStatus is where a repo stands in the download lifecycle. The numeric
// values are part of the stored encoding.
type RepoStatus uint8

const (
	StatusNotStarted  RepoStatus = 1 // known, never fully archived
	StatusPending     RepoStatus = 2 // may hold partial rows; needs a whole-repo replacement
	StatusComplete    RepoStatus = 3 // snapshot archived; BackfillRev is its head rev
	StatusFailed      RepoStatus = 4 // remote failure; retried with durable backoff
	StatusUnavailable RepoStatus = 5 // deactivated / suspended / takendown upstream

	numRepoStatus = 6
)

// RepoStatuses lists every status in order, for metrics and reports.
var RepoStatuses = []RepoStatus{StatusNotStarted, StatusPending, StatusComplete, StatusFailed, StatusUnavailable}

// Valid reports whether s is one of the five statuses.
func (s RepoStatus) Valid() bool { return s >= StatusNotStarted && s < numRepoStatus }

func (s RepoStatus) String() string {
	switch s {
	case StatusNotStarted:
		return "not_started"
	case StatusPending:
		return "pending"
	case StatusComplete:
		return "complete"
	case StatusFailed:
		return "failed"
	case StatusUnavailable:
		return "unavailable"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Refetch says why a repo is due for a whole-repo replacement.
type Refetch uint8

const (
	RefetchNone        Refetch = 0
	RefetchSync        Refetch = 1 // upstream announced #sync
	RefetchReactivated Refetch = 2 // the account became active again
	RefetchDiscovered  Refetch = 3 // found after bootstrap
	RefetchPending     Refetch = 4 // interrupted mid-emission
	RefetchUnverified  Refetch = 5 // a live frame failed signature or sync 1.1 verification
	RefetchAudit       Refetch = 6 // a gap's repair pass found it changed
	RefetchUninverted  Refetch = 7 // a live commit was archived without the sync 1.1 inversion (no prevData, a legacy op)
	numRefetch                 = 8
)

func (r Refetch) String() string {
	switch r {
	case RefetchNone:
		return "none"
	case RefetchSync:
		return "sync"
	case RefetchReactivated:
		return "reactivated"
	case RefetchDiscovered:
		return "discovered"
	case RefetchPending:
		return "pending"
	case RefetchUnverified:
		return "unverified"
	case RefetchAudit:
		return "audit"
	case RefetchUninverted:
		return "uninverted"
	}
	return fmt.Sprintf("refetch(%d)", uint8(r))
}

// RepoState is the durable state of one repo.
type RepoState struct {
	Status        RepoStatus
	Active        bool
	AccountStatus string // upstream status when inactive (deactivated, takendown, ...)
	BackfillRev   string // head rev of the archived snapshot (complete repos)
	Host          string // final host after redirects, from the last download
	Attempts      uint32 // failed attempts since the last success
	ErrClass      string // class of the last error
	LastError     string // last error message, at most MaxErrorMessage bytes
	NextAttemptUS int64  // unix µs of the next retry; 0 = none scheduled
	Refetch       Refetch
	StartedUS     int64 // unix µs the last download started
	CompletedUS   int64 // unix µs the repo last became complete
	Records       uint64
	Bytes         uint64
}

// Retryable reports whether the retry runner may fetch the repo once its
// next attempt is due: an active account that is failed, pending, or
// marked for a replacement. An inactive account is never fetched, whatever
// its mark. The due index (PrefixDue) holds exactly these repos.
func (s RepoState) Retryable() bool {
	return s.Active && (s.Status == StatusFailed || s.Status == StatusPending || s.Refetch != RefetchNone)
}

// ClassUnknownDID is the class (RepoState.ErrClass) of a repo whose DID
// the PLC directory has no document for: a DID a listing named that does
// not exist (or that the directory has not caught up with). Failed and
// retried at first; unavailable after a few 404s in a row (backfill's
// UnknownDIDAttempts), and then never fetched again on a listing's word
// (retry, repair and discovery leave it alone); only the firehose (an
// #account event making it active) brings it back.
const ClassUnknownDID = "unknown_did"

// UnknownDID reports whether the repo is unavailable for good because its
// DID does not exist (ClassUnknownDID).
func (s RepoState) UnknownDID() bool {
	return s.Status == StatusUnavailable && s.ErrClass == ClassUnknownDID
}

// RepoField selects the fields a RepoUpdate sets.
type RepoField uint32

const (
	FieldStatus RepoField = 1 << iota
	FieldActive
	FieldAccountStatus
	FieldBackfillRev
	FieldHost
	FieldAttempts
	FieldError // ErrClass and LastError together
	FieldNextAttempt
	FieldRefetch
	FieldStarted
	FieldCompleted
	FieldRecords
	FieldBytes

	allRepoFields = FieldBytes<<1 - 1
)

// RepoUpdate is a field-level mutation of repo/<did>: the fields named in
// Fields take their values from State; the others keep their stored values.
// A repo without stored state starts from the zero state, which must be
// given a status by the update (the writer refuses a status-less repo).
type RepoUpdate struct {
	DID    string
	Fields RepoField
	State  RepoState
	// Func, when set, replaces Fields/State: the writer calls it with the
	// current state (exists=false and the zero state for an unknown repo)
	// and writes the state it returns when write is true. It runs on the
	// writer goroutine, so decisions that depend on the current state (a
	// reactivation of an unavailable repo, a #sync for a complete one) are
	// atomic with the rows of the same unit. It must be a pure function of
	// its input: no I/O, no locks, never Submit.
	Func func(cur RepoState, exists bool) (next RepoState, write bool)
}

// apply returns cur with the update's fields set.
func (u RepoUpdate) apply(cur RepoState) RepoState {
	f, s := u.Fields, u.State
	if f&FieldStatus != 0 {
		cur.Status = s.Status
	}
	if f&FieldActive != 0 {
		cur.Active = s.Active
	}
	if f&FieldAccountStatus != 0 {
		cur.AccountStatus = s.AccountStatus
	}
	if f&FieldBackfillRev != 0 {
		cur.BackfillRev = s.BackfillRev
	}
	if f&FieldHost != 0 {
		cur.Host = s.Host
	}
	if f&FieldAttempts != 0 {
		cur.Attempts = s.Attempts
	}
	if f&FieldError != 0 {
		cur.ErrClass = s.ErrClass
		cur.LastError = s.LastError
	}
	if f&FieldNextAttempt != 0 {
		cur.NextAttemptUS = s.NextAttemptUS
	}
	if f&FieldRefetch != 0 {
		cur.Refetch = s.Refetch
	}
	if f&FieldStarted != 0 {
		cur.StartedUS = s.StartedUS
	}
	if f&FieldCompleted != 0 {
		cur.CompletedUS = s.CompletedUS
	}
	if f&FieldRecords != 0 {
		cur.Records = s.Records
	}
	if f&FieldBytes != 0 {
		cur.Bytes = s.Bytes
	}
	return cur
}

const repoFlagActive = 0x01

// EncodeRepoState encodes a repo state:
//
//	[0x01][status][flags][str account status][str backfill rev][str host]
//	[uvarint attempts][str err class][str last error][varint next attempt]
//	[refetch][varint started][varint completed][uvarint records][uvarint bytes]
//
// An invalid status or refetch reason is refused; LastError is truncated to
// MaxErrorMessage bytes.
func EncodeRepoState(s RepoState) ([]byte, error) {
	if !s.Status.Valid() {
		return nil, malformed("refusing to encode repo status %d", s.Status)
	}
	if s.Refetch >= numRefetch {
		return nil, malformed("refusing to encode refetch reason %d", s.Refetch)
	}
	for _, f := range []string{s.AccountStatus, s.BackfillRev, s.Host, s.ErrClass} {
		if len(f) > 1024 {
			return nil, malformed("repo state field of %d bytes", len(f))
		}
	}
	msg := s.LastError
	if len(msg) > MaxErrorMessage {
		msg = msg[:MaxErrorMessage]
	}
	b := make([]byte, 0, 64+len(s.BackfillRev)+len(s.Host)+len(msg))
	var flags byte
	if s.Active {
		flags |= repoFlagActive
	}
	b = append(b, codecV1, byte(s.Status), flags)
	b = appendString(b, s.AccountStatus)
	b = appendString(b, s.BackfillRev)
	b = appendString(b, s.Host)
	b = binary.AppendUvarint(b, uint64(s.Attempts))
	b = appendString(b, s.ErrClass)
	b = appendString(b, msg)
	b = binary.AppendVarint(b, s.NextAttemptUS)
	b = append(b, byte(s.Refetch))
	b = binary.AppendVarint(b, s.StartedUS)
	b = binary.AppendVarint(b, s.CompletedUS)
	b = binary.AppendUvarint(b, s.Records)
	b = binary.AppendUvarint(b, s.Bytes)
	return b, nil
}

// DecodeRepoState is the inverse of EncodeRepoState.
func DecodeRepoState(b []byte) (RepoState, error) {
	var s RepoState
	if len(b) == 0 {
		return s, malformed("empty repo state")
	}
	if b[0] != codecV1 {
		return s, malformed("repo state: unknown version 0x%02x", b[0])
	}
	d := decoder{b: b[1:]}
	s.Status = RepoStatus(d.byte1())
	flags := d.byte1()
	s.AccountStatus = d.str(1024)
	s.BackfillRev = d.str(1024)
	s.Host = d.str(1024)
	attempts := d.uvarint()
	s.ErrClass = d.str(1024)
	s.LastError = d.str(MaxErrorMessage)
	s.NextAttemptUS = d.varint()
	s.Refetch = Refetch(d.byte1())
	s.StartedUS = d.varint()
	s.CompletedUS = d.varint()
	s.Records = d.uvarint()
	s.Bytes = d.uvarint()
	if err := d.finish("repo state"); err != nil {
		return RepoState{}, err
	}
	switch {
	case !s.Status.Valid():
		return RepoState{}, malformed("repo state: unknown status %d", s.Status)
	case flags&^repoFlagActive != 0:
		return RepoState{}, malformed("repo state: unknown flags 0x%02x", flags)
	case attempts > 1<<32-1:
		return RepoState{}, malformed("repo state: attempts %d", attempts)
	case s.Refetch >= numRefetch:
		return RepoState{}, malformed("repo state: unknown refetch reason %d", s.Refetch)
	}
	s.Active = flags&repoFlagActive != 0
	s.Attempts = uint32(attempts)
	return s, nil
}
